"""What a store commit is made of: writes, callbacks, the durability modes, the writer's bounds.

The vocabulary of :mod:`retinue.persistence.writer` (the one writer thread)
and of :class:`~retinue.persistence.store.Store`, which hands it transitions.

Spread writes: a transition may carry, besides its writes, ``spread`` writes
(a compaction's deletes) that the writer commits after them, a few per
transaction (at least :data:`SPREAD_WRITES`, at most the file's pages over
:data:`SPREAD_SHARE`), in order, before anything queued behind; the
callback runs once the last is committed.

Why: each LMDB write transaction copies every page it changes to a free page
(copy-on-write), and the pages it frees become reusable only after it
commits. One transaction deleting thousands of records spread over the key
space (a retention compaction) needs as many free pages at once, and the
file's high-water mark grows to hold them. Spread over small transactions,
the pages one frees are reused by the next but one. Whoever gives spread
writes orders them so that a crash after any prefix leaves a consistent store.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "FLUSH_INTERVAL_S",
    "MAX_GROUP",
    "SPREAD_SHARE",
    "SPREAD_WRITES",
    "Callback",
    "CommitTimer",
    "Durability",
    "Queued",
    "StoreStats",
    "Submission",
    "Write",
]

FLUSH_INTERVAL_S = 1.0
"""How often a ``buffered`` store is fsynced while it has unsynced commits."""
MAX_GROUP = 4096
"""The most transitions committed together."""
SPREAD_WRITES = 16
"""The fewest spread writes (a compaction's deletes) one LMDB transaction takes."""
SPREAD_SHARE = 32
"""A spread transaction takes up to the file's pages over this many writes (at least
:data:`SPREAD_WRITES`)."""

Write = tuple[str, bytes, bytes | None]
"""``(database name, key, value)``; a value of None deletes the key."""
Callback = Callable[[BaseException | None], None]
"""Called once a transition is committed (None) or failed (the error)."""
CommitTimer = Callable[[float], None]
"""Told the seconds one group commit took (see :attr:`Writer.on_commit`)."""
Submission = tuple[Sequence[Write], Callback] | tuple[Sequence[Write], Callback, Sequence[Write]]
"""One transition handed over: its writes, its callback and (optional) its spread writes."""


class Queued(Protocol):
    """One transition as the writer queues it: its writes, its spread writes, and what it
    does once committed (the supervisor's transitions are handed over as they are, with
    no tuple, callback or item of the writer's own built for each)."""

    @property
    def writes(self) -> Sequence[Write]:
        """Its writes, committed in one transaction with the rest of its group."""

    @property
    def spread(self) -> Sequence[Write]:
        """Its spread writes (a compaction's deletes), committed after ``writes``."""

    def committed(self, error: BaseException | None) -> None:
        """Called once it is committed (``error`` None) or failed (the error)."""


class Durability(enum.StrEnum):
    """How far a commit has gone before the caller is answered."""

    FULL = "full"
    BUFFERED = "buffered"


@dataclass
class StoreStats:
    """Counters of the writer thread, for benchmarks and diagnostics."""

    commits: int = 0
    transitions: int = 0
    writes: int = 0
    map_growths: int = 0
    syncs: int = 0
