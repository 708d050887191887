"""The leases a shard was told to release: tombstones, so a wait that comes late takes nothing.

A face whose wait is cancelled sends ``ReleaseLease(L)`` beside the wait's own
call, and the two may reach the shard in either order (``ray.cancel`` is best
effort, and Ray does not order two calls). :class:`Released` remembers each
released lease for ``keep_s`` (the shard's ``lease_timeout_s``), so a wait
under it that arrives afterwards is refused without taking anything, and one
that took a completion meanwhile gives it back at once (see
:class:`~retinue.cluster.shard.ShardCore`).

Pure: time is passed in, no lock (the shard uses it on its event loop only).
At most ``max_entries`` are kept; past that the oldest is dropped before its
time and counted in :attr:`Released.dropped_early`: a late wait under that one
lease then falls back to the sweeper's guarantee (its completion is handed out
again ``lease_timeout_s`` after it was taken), never to a loss.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["MAX_RELEASED", "Released"]

MAX_RELEASED = 100_000


class Released:
    """Released lease ids with when they were released, oldest first, each for ``keep_s``."""

    def __init__(self, keep_s: float, max_entries: int = MAX_RELEASED) -> None:
        """Remember each release for ``keep_s`` seconds, at most ``max_entries`` at once."""
        self.keep_s = keep_s
        self.max_entries = max(1, max_entries)
        self.dropped_early = 0  # tombstones dropped before keep_s to stay within the bound
        self._at: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        """How many tombstones are kept now."""
        return len(self._at)

    def add(self, lease: str, now: float) -> None:
        """Remember that ``lease`` was released at ``now`` (a repeat renews it)."""
        self.expire(now)
        self._at.pop(lease, None)
        self._at[lease] = now
        while len(self._at) > self.max_entries:
            self._at.popitem(last=False)
            self.dropped_early += 1

    def has(self, lease: str, now: float) -> bool:
        """Whether ``lease`` was released and its tombstone is still kept at ``now``."""
        self.expire(now)
        return lease in self._at

    def expire(self, now: float) -> None:
        """Forget the tombstones older than ``keep_s``."""
        while self._at:
            lease, at = next(iter(self._at.items()))
            if now - at <= self.keep_s:
                return
            del self._at[lease]
