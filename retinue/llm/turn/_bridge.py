"""The LLM runner's two supervisor requests: load an agent's LLM state, record one model step.

Both go through the turn's own request channel (so they are refused once the
turn is interrupted) and are answered once committed:

- ``llm_load``: the stored transcript (raw bytes or None), this agent's usage
  and its top-level tree's usage;
- ``llm_step``: add one call's usage to the agent and its tree and (when given)
  replace the stored transcript, in one transition; answers the new totals.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from retinue.actors.commands import LlmLoad, LlmStep
from retinue.llm.turn._context import TurnContext
from retinue.protocol.messages import ToolCallInDoubt, Usage

__all__ = ["LlmState", "llm_load", "llm_step"]

LlmState = tuple[bytes | None, Usage, Usage]
"""``(transcript, agent usage, tree usage)``."""


async def llm_load(turn: TurnContext) -> LlmState:
    """Return the agent's stored transcript and its usage totals.

    A turn the scheduler started carries them (``turn.llm_state``, taken
    once): the transcript is read from the store here, with no supervisor
    round trip; another turn asks the supervisor (:class:`LlmLoad`).

    Raises:
        TurnInterrupted: the turn was interrupted (asking the supervisor).
        StoreError: the store could not be read.
    """
    started = turn.llm_state
    if started is not None:
        turn.llm_state = None
        return started.transcript(), started.usage, started.tree_usage
    state: LlmState = await turn.request_async(LlmLoad(turn.ref))
    return state


def llm_step(
    turn: TurnContext,
    usage: Usage,
    transcript: bytes | None,
    *,
    takes_input: bool = False,
    ends_call: bool = False,
    open_calls: int | None = None,
    in_doubt: tuple[ToolCallInDoubt, ...] = (),
) -> Coroutine[Any, Any, tuple[Usage, Usage]]:
    """Record one model step: await it for ``(agent usage, tree usage)`` after it.

    It builds the command and returns the turn's request to await (no
    coroutine of its own: one frame fewer to create and resume per step).

    ``takes_input`` says ``transcript`` is the first to hold the turn's input:
    from this commit on the input is the transcript's (see ``LlmStep``);
    ``ends_call`` that ``usage`` is a call a budget admitted (see ``AdmitCall``);
    ``open_calls`` and ``in_doubt``: the journal's calls that may have started
    without a result, and the events of the calls found in doubt (see ``LlmStep``).

    Raises:
        TurnInterrupted: the turn was interrupted.
    """
    return turn.request_async(
        LlmStep(turn.ref, usage, transcript, takes_input, ends_call, open_calls, in_doubt)
    )
