"""What every command stands on: its senders (the host, a running turn) and ``Command[R]``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, Generic, TypeVar

__all__ = ["HOST", "Command", "Host", "Sender", "TurnRef"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Host:
    """The host (the embedding program) as a sender; use the :data:`HOST` instance."""

    def __repr__(self) -> str:
        """Return ``HOST``."""
        return "HOST"


HOST: Final = Host()


@dataclass(frozen=True, slots=True)
class TurnRef:
    """A running turn as a sender: its agent and generation.

    The supervisor refuses its commands with ``TurnInterrupted`` once that
    turn is no longer the agent's running one.
    """

    agent_id: str
    generation: int


Sender = Host | TurnRef


class Command(Generic[R]):
    """Base of every supervisor command; ``R`` is what it is answered with.

    ``after_close`` is True for the commands still served while the runtime
    closes (shutdown itself, settling turns, giving waits up, barriers).
    ``live_sender`` is True for the commands a turn may send only while it is
    its agent's running turn: the supervisor resolves the sender once, before
    the command's handler runs, and refuses a stale turn with
    ``TurnInterrupted``. A turn's report of its own end (``Settle``,
    ``ExpireTurn``) and a give-up are served for a stale turn too (they are
    discarded or do nothing).
    """

    __slots__ = ()
    after_close: ClassVar[bool] = False
    live_sender: ClassVar[bool] = True
