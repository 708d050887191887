"""The commands of a model turn's stored state: its transcript and its usage."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from retinue.actors.commands._base import Command, TurnRef
from retinue.protocol.messages import ToolCallInDoubt, Usage

__all__ = ["LlmLoad", "LlmStarted", "LlmStep"]


@dataclass(frozen=True, slots=True)
class LlmStarted:
    """What :class:`LlmLoad` answers, handed to a turn as it starts (no round trip).

    The scheduler sets it on every turn of a model runner it starts
    (``Turn.llm_state``; :func:`~retinue.actors.turns.is_model_runner`): the
    agent's usage and its tree's usage as the turn starts, and ``transcript``,
    which reads the agent's stored transcript (bytes or None) from the store.
    A model runner calls it as it starts, after the commit that started the
    turn, so it reads what :class:`LlmLoad` would: nothing but the turn's own
    steps writes the transcript of a running agent.
    """

    transcript: Callable[[], bytes | None]
    usage: Usage
    tree_usage: Usage


@dataclass(frozen=True, slots=True)
class LlmLoad(Command[tuple[bytes | None, Usage, Usage]]):
    """An LLM turn starts: answer its stored transcript, its usage and its tree's usage."""

    sender: TurnRef


class LlmStep(msgspec.Struct, Command[tuple[Usage, Usage]], frozen=True, gc=False):
    """An LLM turn made a step: add ``usage`` to the agent and its tree, store ``transcript``.

    A frozen msgspec struct, not a frozen dataclass as the other commands: a
    model turn sends two per tool step, and a struct is built in C (a frozen
    dataclass sets each of its seven fields through ``object.__setattr__``,
    about 0.9 µs a command against 0.1). It is never on the wire.

    ``transcript`` is an encoded :class:`~retinue.protocol.records.TranscriptRecord`
    (None keeps the stored one); the answer is the agent's and the tree's new usage.
    ``takes_input`` says the transcript now holds the turn's input (its task,
    messages and children's completions): from this commit on they are the
    transcript's, neither given back if the turn fails or is interrupted nor
    handed again after a crash (see ``Scheduler`` and ``Tree.consume_inputs``).
    ``ends_call`` says ``usage`` is a model call :class:`AdmitCall` admitted:
    its reservation ends in this commit. ``open_calls`` is how many tool
    calls the stored transcript's journal holds that may have started without
    a result (None: unchanged; see ``AgentRecord.open_calls``); ``in_doubt``
    are the events of the calls the turn found in doubt and acts on, published
    once this step is committed.

    Out of the cyclic collector (``gc=False``): frozen, and what it holds (a turn's
    reference, usages, bytes, numbers, events) never refers back to it, so it can never
    be part of a reference cycle.
    """

    sender: TurnRef
    usage: Usage
    transcript: bytes | None = None
    takes_input: bool = False
    ends_call: bool = False
    open_calls: int | None = None
    in_doubt: tuple[ToolCallInDoubt, ...] = ()
