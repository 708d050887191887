"""The runtime's own commands: compaction, barriers and shutdown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pykka

from retinue.actors.commands._base import HOST, Command, Host
from retinue.protocol.details import CompactionReport

__all__ = ["Barrier", "Compact", "Shutdown"]


@dataclass(frozen=True, slots=True)
class Compact(Command[CompactionReport]):
    """Remove what retention no longer keeps, as one transition."""

    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class Barrier(Command[None]):
    """Answer once everything submitted before it is committed."""

    after_close: ClassVar[bool] = True
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class Shutdown(Command[list[tuple[str, pykka.ActorRef[Any]]]]):
    """Interrupt every turn and stop serving; answer with the actors still running, by agent."""

    after_close: ClassVar[bool] = True
    sender: Host = HOST
