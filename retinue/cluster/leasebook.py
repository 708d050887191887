"""One account's provider limits leased to a cluster's shards: the book the lease actor keeps.

:class:`LeaseBook` is pure (time passed in, no thread, no Ray): the
cluster's provider-limits actor (:mod:`retinue.cluster._actors`) holds one,
and every shard leases capacity from it in small batches
(:mod:`retinue.cluster.limits`). A lease is a number of calls of one limit
(its ``match``) a holder (a shard's process) may start, each with its token
estimate. A granted call holds one of the limit's ``max_in_flight`` slots
until the holder gives it back (ended, or unused), and counts in the
limit's per-minute windows, as the admission controller counts a call, from
its grant until ``window_s`` after it ended: so however the shards share
them, the calls of all shards together stay within the account's limits.

A holder renews its lease at least every ``lease_s``; a holder that does not
(its process died) loses it: :meth:`LeaseBook.expire` ends its granted calls
at that moment (they may have reached the provider, so they stay in the
windows) and frees their slots for the other holders.

Only the static dimensions are leased (``max_in_flight``,
``requests_per_minute``, ``tokens_per_minute``); a limit with none of them
(an adaptive-only ``ProviderLimit(match)``) is not leased, and the adaptive
level and a ``Retry-After`` stay each shard's own (its runtime's gate).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

import msgspec

from retinue.errors import InvalidArgument
from retinue.protocol.provider_limits import ProviderLimit

__all__ = ["LeaseBook", "LeaseSnapshot", "decode_leases", "leased"]


def leased(limit: ProviderLimit) -> bool:
    """Whether ``limit`` has a dimension a cluster leases (in flight, requests, tokens)."""
    return any(
        value is not None
        for value in (limit.max_in_flight, limit.requests_per_minute, limit.tokens_per_minute)
    )


class LeaseSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One leased limit now: the calls each holder holds, what its windows hold, the grants
    made and the holders whose lease expired."""

    match: str
    held: dict[str, int]
    requests: int
    tokens: int
    granted: int
    expired: int


def decode_leases(raw: bytes) -> tuple[LeaseSnapshot, ...]:
    """The leased limits of an encoded snapshot (the provider-limits actor's answer)."""
    return msgspec.msgpack.decode(raw, type=tuple[LeaseSnapshot, ...])


class _Limit:
    """One limit's book: calls held per holder, ended calls still in the windows."""

    def __init__(self, limit: ProviderLimit) -> None:
        self.limit = limit
        self.held: dict[str, int] = {}
        self.reserved: dict[str, int] = {}  # tokens of the held calls, per holder
        self.ended: deque[tuple[float, int, int]] = deque()  # (ended at, calls, tokens)
        self.granted = 0
        self.expired = 0

    def prune(self, now: float, window_s: float) -> None:
        while self.ended and self.ended[0][0] + window_s <= now:
            self.ended.popleft()

    def in_window(self) -> tuple[int, int]:
        """Requests and tokens the windows hold: the held calls and those ended lately."""
        requests = sum(self.held.values()) + sum(e[1] for e in self.ended)
        tokens = sum(self.reserved.values()) + sum(e[2] for e in self.ended)
        return requests, tokens

    def room(self, tokens_each: int) -> int | None:
        """How many more calls of ``tokens_each`` tokens fit (None: unbounded)."""
        limit, rooms = self.limit, []
        requests, tokens = self.in_window()
        if limit.max_in_flight is not None:
            rooms.append(limit.max_in_flight - sum(self.held.values()))
        if limit.requests_per_minute is not None:
            rooms.append(limit.requests_per_minute - requests)
        if limit.tokens_per_minute is not None and tokens_each > 0:
            rooms.append((limit.tokens_per_minute - tokens) // tokens_each)
        return None if not rooms else max(0, min(rooms))

    def end(self, holder: str, calls: int, tokens: int, now: float) -> None:
        """``calls`` of ``holder``'s held calls ended, having used ``tokens``."""
        held = self.held.get(holder, 0)
        calls = min(calls, held)
        if calls <= 0:
            return
        reserved = self.reserved.get(holder, 0)
        share = reserved if calls == held else min(reserved, reserved * calls // held)
        self._drop(holder, calls, share)
        self.ended.append((now, calls, tokens))

    def give_back(self, holder: str, calls: int) -> None:
        """``calls`` of ``holder``'s held calls were never made: no trace in the windows."""
        held = self.held.get(holder, 0)
        calls = min(calls, held)
        if calls > 0:
            reserved = self.reserved.get(holder, 0)
            self._drop(holder, calls, reserved if calls == held else reserved * calls // held)

    def _drop(self, holder: str, calls: int, tokens: int) -> None:
        left = self.held[holder] - calls
        if left:
            self.held[holder] = left
            self.reserved[holder] -= tokens
        else:
            del self.held[holder]
            self.reserved.pop(holder, None)


class LeaseBook:
    """The provider limits of one account, leased to holders (a cluster's shards).

    ``window_s`` is the span of the per-minute windows; ``lease_s`` how long a
    holder keeps its lease without renewing it.

    Raises:
        InvalidArgument: ``window_s`` or ``lease_s`` is not a positive number, a
            limit is not a ProviderLimit, or a match is named twice.
    """

    def __init__(
        self, limits: Iterable[ProviderLimit], *, window_s: float = 60.0, lease_s: float = 10.0
    ) -> None:
        """A book over the leased ``limits`` (one without a static dimension is left out)."""
        for name, value in (("window_s", window_s), ("lease_s", lease_s)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise InvalidArgument(f"{name} must be a positive number of seconds, not {value!r}")
            if not math.isfinite(value):
                raise InvalidArgument(f"{name} must be finite, not {value!r}")
        self.window_s = float(window_s)
        self.lease_s = float(lease_s)
        self._limits: dict[str, _Limit] = {}
        for limit in limits:
            if not isinstance(limit, ProviderLimit):
                raise InvalidArgument(f"a provider limit must be a ProviderLimit, not {limit!r}")
            if limit.match in self._limits:
                raise InvalidArgument(f"provider limit {limit.match!r} is named twice")
            if leased(limit):
                self._limits[limit.match] = _Limit(limit)
        self._renewed: dict[str, float] = {}

    @property
    def matches(self) -> tuple[str, ...]:
        """The matches of the leased limits, in the order given."""
        return tuple(self._limits)

    def take(self, holder: str, match: str, calls: int, tokens_each: int, now: float) -> int:
        """Grant ``holder`` up to ``calls`` calls of limit ``match``, each of ``tokens_each``
        tokens; return how many fit now (0: none; ask again later). Renews its lease.

        Raises:
            InvalidArgument: no leased limit ``match``, or ``calls`` or
                ``tokens_each`` negative.
        """
        book = self._book(match)
        if calls < 0 or tokens_each < 0:
            raise InvalidArgument(f"calls and tokens must not be negative ({calls}, {tokens_each})")
        self.expire(now)
        self._renewed[holder] = now
        book.prune(now, self.window_s)
        room = book.room(tokens_each)
        granted = calls if room is None else min(calls, room)
        if granted > 0:
            book.held[holder] = book.held.get(holder, 0) + granted
            book.reserved[holder] = book.reserved.get(holder, 0) + granted * tokens_each
            book.granted += granted
        return granted

    def end(self, holder: str, match: str, calls: int, tokens: int, now: float) -> None:
        """``calls`` granted calls of ``holder`` ended, using ``tokens`` tokens in all
        (a holder whose lease expired is ignored: its calls ended when it expired)."""
        book = self._book(match)
        self._renewed[holder] = now
        book.end(holder, calls, tokens, now)

    def give_back(self, holder: str, match: str, calls: int, now: float) -> None:
        """``calls`` granted calls of ``holder`` were never started."""
        self._book(match).give_back(holder, calls)
        self._renewed[holder] = now

    def renew(self, holder: str, now: float) -> None:
        """``holder`` is alive: its lease runs ``lease_s`` from ``now``."""
        self.expire(now)
        self._renewed[holder] = now

    def expire(self, now: float) -> tuple[str, ...]:
        """End the leases of the holders silent for more than ``lease_s``; return them."""
        gone = tuple(h for h, at in self._renewed.items() if now - at > self.lease_s)
        for holder in gone:
            del self._renewed[holder]
            for book in self._limits.values():
                held = book.held.get(holder, 0)
                if held:
                    book.end(holder, held, book.reserved.get(holder, 0), now)
                    book.expired += 1
        return gone

    def snapshot(self, now: float) -> tuple[LeaseSnapshot, ...]:
        """Every leased limit now (expired leases ended first)."""
        self.expire(now)
        found = []
        for match, book in self._limits.items():
            book.prune(now, self.window_s)
            requests, tokens = book.in_window()
            found.append(
                LeaseSnapshot(
                    match=match,
                    held=dict(book.held),
                    requests=requests,
                    tokens=tokens,
                    granted=book.granted,
                    expired=book.expired,
                )
            )
        return tuple(found)

    def _book(self, match: str) -> _Limit:
        book = self._limits.get(match)
        if book is None:
            raise InvalidArgument(
                f"no leased provider limit {match!r} (leased: {', '.join(self._limits) or 'none'})"
            )
        return book
