"""The commands of an agent's life after its spawn: follow-ups, resumes, interrupts, closes,
and a turn's report of its own end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from retinue.actors.commands._base import Command, Sender, TurnRef
from retinue.actors.commands._models import LlmStep
from retinue.protocol.failures import TurnError
from retinue.protocol.messages import AgentInfo

__all__ = [
    "Close",
    "CloseTree",
    "ExpireTurn",
    "FollowUp",
    "Interrupt",
    "InterruptTree",
    "Resume",
    "Settle",
]


@dataclass(frozen=True, slots=True)
class FollowUp(Command[AgentInfo]):
    """Queue a follow-up turn for an idle agent."""

    sender: Sender
    ref: str
    task: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class Resume(Command[AgentInfo]):
    """Re-run an interrupted agent's task."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class Interrupt(Command[AgentInfo]):
    """Cancel an agent's queued or running turn."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class InterruptTree(Command[list[AgentInfo]]):
    """Cancel the queued and running turns of an agent's whole live subtree, leaves first."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class Close(Command[AgentInfo]):
    """Close an agent without live children."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class CloseTree(Command[list[AgentInfo]]):
    """Close an agent's whole live subtree, children first."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class Settle(Command[None]):
    """A runner finished its turn with ``output`` or ``error`` (its text and class).

    ``step``: a model turn's last step (its answer's usage and transcript),
    committed with the settle in one transition: both or neither. It is served
    first, as its own :class:`LlmStep` would be, and only while the turn still
    runs (a late settle's step is dropped as a stale turn's step is refused);
    a budget its usage crosses fails the turn instead of completing it.
    """

    after_close: ClassVar[bool] = True
    live_sender: ClassVar[bool] = False
    sender: TurnRef
    output: str | None
    error: TurnError | None
    trace: str | None = None  # the turn's span (W3C traceparent), when the runtime traces
    step: LlmStep | None = None


@dataclass(frozen=True, slots=True)
class ExpireTurn(Command[None]):
    """A turn's ``turn_timeout_s`` ran out: fail it with ``TurnTimeout`` if it still runs."""

    live_sender: ClassVar[bool] = False

    sender: TurnRef
    seconds: float
