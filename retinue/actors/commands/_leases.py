"""The commands of host waits' leases: acknowledged, released, listed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from retinue.actors.commands._base import HOST, Command, Host
from retinue.protocol.messages import Completion

__all__ = ["AckLease", "Leases", "ReleaseLease"]


@dataclass(frozen=True, slots=True)
class AckLease(Command[bool]):
    """The host has the completion a leased wait handed it: forget the lease.

    Answered True if the lease was stored (False: unknown or acknowledged before).
    """

    lease: str
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class ReleaseLease(Command[bool]):
    """The host never got the completion a leased wait took: give it back, forget the lease.

    The completion goes to the next host wait on its agent, as after a
    :class:`GiveBack`. Answered True if the lease was stored.
    """

    after_close: ClassVar[bool] = True
    lease: str
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class Leases(Command[dict[str, Completion]]):
    """Return every stored lease with the completion it holds (not yet acknowledged)."""

    sender: Host = HOST
