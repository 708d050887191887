"""Turns: what a runner sees and what runs it.

``Turn`` (the runner's context: its task, messages, cancellation and the
coordinator operations with their ``*_async`` twins; only the runtime makes
one), its private control (``TurnControl``, reached with ``control_of(turn)``:
what the supervisor, the executor and the LLM layer hold) and receipt of
waits, the agent actors that run one sync runner's turn each (``AgentActor``) on
the shared ``Executor``'s worker pool, what starts an async runner's turns as
tasks on its one event loop (``LoopTurns``),
and what must end with the loop (``at_loop_close``).

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.actors.turns._agent import (
    AgentActor,
    Report,
    is_async_runner,
    is_model_runner,
    running_agent,
)
from retinue.actors.turns._control import TurnControl, turn_ref
from retinue.actors.turns._executor import Executor, runner_finished
from retinue.actors.turns._loop_close import at_close, at_loop_close
from retinue.actors.turns._loop_turns import LoopTurns
from retinue.actors.turns._turn import BatchRequest, Runner, Turn, control_of

__all__ = [
    "AgentActor",
    "BatchRequest",
    "Executor",
    "LoopTurns",
    "Report",
    "Runner",
    "Turn",
    "TurnControl",
    "at_close",
    "at_loop_close",
    "control_of",
    "is_async_runner",
    "is_model_runner",
    "runner_finished",
    "running_agent",
    "turn_ref",
]
