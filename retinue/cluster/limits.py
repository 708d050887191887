"""A shard's side of the cluster's provider limits: capacity leased from one actor in batches.

Under ``Cluster.open(..., provider_limits=[...])`` every shard's runtime
admits its model calls with its own gate (fairness between its trees, the
adaptive level, ``Retry-After``), and then, for each leased limit that covers
the call (:func:`~retinue.cluster.leasebook.leased`), takes one call of the
capacity its :class:`LeasedCapacity` holds. When it holds none, one waiting
call asks the cluster's provider-limits actor (a :class:`Broker`) for a
small batch: as many as the shard's calls then waiting, at most ``batch``;
the others wait for that answer, and a refusal is asked again after
``poll_s``. A call that ends gives its slot back with its usage (one
message, not awaited); permits nobody waits for any more are given back
unused. A thread renews the shard's lease every ``lease_s / 3``: when the
shard's process dies the renewals stop and the actor frees its slots after
``lease_s`` (:class:`~retinue.cluster.leasebook.LeaseBook`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from retinue.cluster.leasebook import LeaseBook

__all__ = ["Broker", "LeasedCapacity", "LocalBroker"]


class Broker(Protocol):
    """Where a shard leases capacity (the cluster's provider-limits actor)."""

    async def take(self, holder: str, match: str, calls: int, tokens_each: int) -> int:
        """Ask for up to ``calls`` calls of limit ``match``; return how many were granted."""
        ...

    def end(self, holder: str, match: str, calls: int, tokens: int) -> None:
        """``calls`` granted calls ended, using ``tokens`` (not awaited)."""
        ...

    def give_back(self, holder: str, match: str, calls: int) -> None:
        """``calls`` granted calls were never started (not awaited)."""
        ...

    def renew(self, holder: str) -> None:
        """Keep ``holder``'s lease (blocking; from the renewal thread)."""
        ...


class LocalBroker:
    """A :class:`Broker` over a :class:`LeaseBook` in this process (thread-safe)."""

    def __init__(self, book: LeaseBook, clock: Callable[[], float] = time.monotonic) -> None:
        """Serve ``book`` with ``clock`` (monotonic seconds)."""
        self.book = book
        self._clock = clock
        self._lock = threading.Lock()

    async def take(self, holder: str, match: str, calls: int, tokens_each: int) -> int:
        """See :meth:`LeaseBook.take`."""
        with self._lock:
            return self.book.take(holder, match, calls, tokens_each, self._clock())

    def end(self, holder: str, match: str, calls: int, tokens: int) -> None:
        """See :meth:`LeaseBook.end`."""
        with self._lock:
            self.book.end(holder, match, calls, tokens, self._clock())

    def give_back(self, holder: str, match: str, calls: int) -> None:
        """See :meth:`LeaseBook.give_back`."""
        with self._lock:
            self.book.give_back(holder, match, calls, self._clock())

    def renew(self, holder: str) -> None:
        """See :meth:`LeaseBook.renew`."""
        with self._lock:
            self.book.renew(holder, self._clock())


class _Pool:
    """One leased limit's permits on this shard (under the capacity's lock)."""

    def __init__(self) -> None:
        self.available = 0  # granted, not yet taken by a call
        self.wanting = 0  # calls waiting for a permit
        self.asking = False  # a call is asking the broker


class LeasedCapacity:
    """The capacity one shard (``holder``) leases of the leased limits ``matches``.

    A :class:`~retinue.actors.admission.SharedCapacity`: the runtime's gate
    awaits :meth:`acquire` once it admitted a call, and calls :meth:`end`
    when the call ends.
    """

    def __init__(
        self,
        broker: Broker,
        holder: str,
        matches: Iterable[str],
        *,
        lease_s: float,
        batch: int = 4,
        poll_s: float = 0.05,
    ) -> None:
        """Lease from ``broker`` as ``holder``; renew every ``lease_s / 3`` once started."""
        self.broker = broker
        self.holder = holder
        self.batch = max(1, batch)
        self.poll_s = poll_s
        self.lease_s = lease_s
        self._pools = {match: _Pool() for match in matches}
        self._calls: dict[str, tuple[tuple[str, ...], int]] = {}  # call id: (matches, tokens)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def start(self) -> LeasedCapacity:
        """Start renewing the lease (a daemon thread); return self."""
        self._renewer = threading.Thread(
            target=self._renew, name="retinue-provider-lease", daemon=True
        )
        self._renewer.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            with contextlib.suppress(Exception):  # the actor restarting: the next renewal
                self.broker.renew(self.holder)
            self._spare_all()

    async def acquire(self, call_id: str, matches: tuple[str, ...], tokens: int) -> None:
        """Take one permit of each leased limit of ``matches`` for call ``call_id``; wait
        (asking the broker) until each is there. Cancelled, it gives back what it took."""
        leased = tuple(m for m in matches if m in self._pools)
        taken: list[str] = []
        try:
            for match in leased:
                await self._one(match, tokens)
                taken.append(match)
        except BaseException:
            with self._lock:
                for match in taken:
                    self._pools[match].available += 1
            self._spare_all()
            raise
        if leased:
            with self._lock:
                self._calls[call_id] = (leased, tokens)

    async def _one(self, match: str, tokens: int) -> None:
        pool = self._pools[match]
        with self._lock:
            pool.wanting += 1
        try:
            while True:
                with self._lock:
                    if pool.available > 0:
                        pool.available -= 1
                        return
                    ask = not pool.asking
                    if ask:
                        pool.asking = True
                        want = min(self.batch, pool.wanting)
                if ask:
                    granted = 0
                    try:
                        granted = await self.broker.take(self.holder, match, want, tokens)
                    finally:
                        with self._lock:
                            pool.asking = False
                            pool.available += granted
                    if granted:
                        continue
                await asyncio.sleep(self.poll_s)
        finally:
            with self._lock:
                pool.wanting -= 1

    def end(self, call_id: str, tokens: int | None) -> None:
        """Call ``call_id`` ended, using ``tokens`` (None: no answer; its estimate counts)."""
        with self._lock:
            entry = self._calls.pop(call_id, None)
        if entry is None:
            return
        matches, estimate = entry
        for match in matches:
            with contextlib.suppress(Exception):  # the actor restarting: its book is new
                self.broker.end(self.holder, match, 1, estimate if tokens is None else tokens)
        self._spare_all()

    def _spare_all(self) -> None:
        """Give back the permits no call waits for."""
        spare: list[tuple[str, int]] = []
        with self._lock:
            for match, pool in self._pools.items():
                if pool.available and not pool.wanting and not pool.asking:
                    spare.append((match, pool.available))
                    pool.available = 0
        for match, calls in spare:
            with contextlib.suppress(Exception):
                self.broker.give_back(self.holder, match, calls)

    def held(self) -> dict[str, int]:
        """The permits taken by calls in flight, per leased limit."""
        with self._lock:
            counts = dict.fromkeys(self._pools, 0)
            for matches, _ in self._calls.values():
                for match in matches:
                    counts[match] += 1
            return counts

    def close(self) -> None:
        """Stop renewing and give back the spare permits (the shard closes)."""
        self._stop.set()
        self._spare_all()
