"""The handover ledger: what was handed to a waiter that has not received it yet.

An answer handed to a wait crosses threads: the supervisor (or a closing
runtime) hands it, and the waiter receives it when it runs again. Until then
the other side may take it back (an interrupt cancels the turn, the runtime
closes before the awaiting task resumed), and whoever comes first owns it:
the waiter sees an answer only if it was not taken back, and what is taken
back is exactly what no waiter saw. Its three verbs:

- :meth:`Handover.hand`: record what was handed for the wait keyed by its reply;
- :meth:`Handover.receive`: the waiter claims it (False: it was taken back);
- :meth:`Handover.take_back`: the other side takes back what nobody received.

A model turn's waits keep what they receive (``receive(key, keep=True)``)
until its transcript stores it (:meth:`Handover.consume`, at the step's
commit): an interrupt meanwhile takes that back too, so a child's result a
model never got to see goes back to the agent instead of being lost.

A turn's ledger holds the events a wait took from its children (its cancel
gives them back to the agent); the runtime's (a :class:`HostLedger`: never
journaled, nothing kept, so it needs no lock) holds the give-back of each async
host wait (its close gives back what the waiting tasks never received).
"""

from __future__ import annotations

import _thread
import concurrent.futures
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from retinue.actors import Journal

__all__ = ["Handover", "HostLedger"]

T = TypeVar("T")
Key = concurrent.futures.Future[Any]
_MISSING: Any = object()


class Handover(Generic[T]):
    """Values handed to waits (keyed by the wait's reply) and not received yet; thread-safe.

    Attributes:
        kept: what was received and kept, not consumed yet (read it, never change it:
            a step that finds it empty skips :meth:`consume`, with no call).

    The supervisor's changes (:meth:`hand`, :meth:`consume`, :meth:`take_back`
    with a ``journal``) are part of its command's transaction: the ledger's
    lock is held until the command is kept or rolled back, so a waiter never
    receives (or misses) something a failed command then undoes.
    """

    __slots__ = ("_held", "_lock", "kept")

    def __init__(self) -> None:
        """Start with nothing handed."""
        self._lock = _thread.RLock()  # threading.RLock's own (no Python frame)
        self._held: dict[Key, T] = {}
        self.kept: list[T] = []

    def _journal(self, journal: Journal | None) -> Journal | None:
        """Hold the lock for ``journal``'s command, if a command is being served."""
        if journal is None or not journal.active:
            return None
        journal.hold(self._lock)
        return journal

    def _restore(self, held: dict[Key, T], kept: list[T]) -> None:
        """Undo a take: put ``held`` and ``kept`` back as they were."""
        self._held = {**held, **self._held}
        self.kept[:0] = kept

    def hand(self, key: Key, value: T, journal: Journal | None = None) -> None:
        """Record that ``value`` was handed to the wait answered on ``key``."""
        with self._lock:
            if journal is not None:  # (a host's wait hands with none: no call)
                tx = self._journal(journal)
                if tx is not None:
                    tx.note(self._held.pop, key, None)
            self._held[key] = value

    def receive(self, key: Key, *, keep: bool = False) -> bool:
        """Claim what was handed on ``key`` for its waiter; False if it was taken back.

        Atomic with :meth:`take_back`: a value is received or taken back, never
        both. ``keep``: the waiter has yet to store it (a model turn), so a
        :meth:`take_back` of every wait still takes it until :meth:`consume`.
        """
        with self._lock:
            held = self._held
            value = held.get(key, _MISSING)
            if value is _MISSING:
                return False
            if keep:  # kept before it leaves the held: take_back's unlocked look sees one
                self.kept.append(value)
            del held[key]
            return True

    def consume(self, journal: Journal | None = None) -> list[T]:
        """Forget (and return) what was received and kept: its waiter stored it."""
        if not self.kept:  # nearly every step: nothing to forget, no lock to take or hold
            # (read unlocked: what the waiter kept before it sent its step is seen here,
            # and a keep or take-back racing this read is as if it came just after it)
            return []
        with self._lock:
            tx = self._journal(journal)
            if tx is not None and self.kept:
                tx.note(self._restore, {}, list(self.kept))
            kept, self.kept = self.kept, []
        return kept

    def take_back(self, key: Key | None = None, journal: Journal | None = None) -> list[T]:
        """Take back what no waiter received: the value of ``key``, or of every wait (None).

        Every wait's also takes what was received and kept but not consumed.
        """
        if not self._held and not self.kept:  # nothing handed, nothing kept: nothing to take
            # (read unlocked, held first: a value handed after the look is as if handed
            # after this take-back; one a waiter receives with keep is kept before it
            # leaves the held, so a value in transit is seen in one of the two)
            return []
        with self._lock:
            tx = self._journal(journal)
            if key is None:
                if tx is not None and (self._held or self.kept):
                    tx.note(self._restore, dict(self._held), list(self.kept))
                held, self._held = self._held, {}
                kept, self.kept = self.kept, []
                return [*kept, *held.values()]
            if tx is not None and key in self._held:
                tx.note(self._restore, {key: self._held[key]}, [])
            value = self._held.pop(key, _MISSING)
        return [] if value is _MISSING else [value]

    def __journal_snapshot__(self) -> tuple[list[tuple[int, T]], list[T]]:
        """What the ledger holds, for the journal's before-and-after pictures."""
        with self._lock:
            return [(id(k), v) for k, v in self._held.items()], list(self.kept)

    def __len__(self) -> int:
        """How many handed values are not received (or not consumed) yet."""
        return len(self._held) + len(self.kept)


class HostLedger(Generic[T]):
    """The host's handover ledger: :class:`Handover`'s three verbs with no journal and no
    ``keep``, so with no lock; thread-safe.

    Nothing journals a host's wait and its task receives for good, so each verb is
    one dict operation, atomic under the GIL (a reply hashes by identity, in C):
    :meth:`receive` and :meth:`take_back` pop each value, and a popped value is
    the popper's alone. Two lines and no lock per verb, on the host's thread, for
    every async host wait.
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        """Start with nothing handed."""
        self._held: dict[Key, T] = {}

    def hand(self, key: Key, value: T) -> None:
        """Record that ``value`` was handed to the wait answered on ``key``."""
        self._held[key] = value

    def receive(self, key: Key) -> bool:
        """Claim what was handed on ``key`` for its waiter; False if it was taken back."""
        return self._held.pop(key, _MISSING) is not _MISSING

    def take_back(self) -> list[T]:
        """Take back what no waiter received, in the order it was handed (a value handed
        after the look is as if handed after this take-back)."""
        return [value for _, value in self.take_back_pairs()]

    def take_back_pairs(self) -> list[tuple[Key, T]]:
        """As :meth:`take_back`, each value with the key it was handed on: a value need not
        hold its key (no pair built per hand, for a take-back that nearly never comes)."""
        held = self._held
        taken = ((key, held.pop(key, _MISSING)) for key in list(held))
        return [(key, value) for key, value in taken if value is not _MISSING]

    def __len__(self) -> int:
        """How many handed values are not received yet."""
        return len(self._held)
