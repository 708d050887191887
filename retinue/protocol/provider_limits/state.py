"""One limit's live state: its windows, its adaptive level and learned rate, its Retry-After,
its counters.

:class:`LimitState` answers whether one more call fits (and from when it
will), holds and gives back what an admitted call takes, and backs off on a
429. :class:`LimitSnapshot` and :class:`BackOff` are what it reports, as
frozen msgspec structs (diagnostics, events, the wire).
"""

from __future__ import annotations

import math
import random

import msgspec

from retinue.protocol.provider_limits.learned import LearnedRate, Slot
from retinue.protocol.provider_limits.level import AdaptiveLevel
from retinue.protocol.provider_limits.limit import LimitKind, ProviderLimit
from retinue.protocol.provider_limits.stated import StatedLimits
from retinue.protocol.provider_limits.window import RateWindow

__all__ = ["WINDOW_S", "BackOff", "LimitSnapshot", "LimitState"]

WINDOW_S = 60.0
"""The span of ``requests_per_minute`` and ``tokens_per_minute``, in seconds."""
_DURATION_WEIGHT = 0.1
"""How much one call's duration moves the mean duration (an exponential average)."""


class LimitSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One limit as diagnostics show it, at one moment.

    ``level`` is the adaptive in-flight level (None: unbounded); ``admitted``
    and ``rate_limited`` count calls since the start; ``requests`` and
    ``tokens`` are what its windows hold now (in flight and ended in the last
    60 s); ``closed_until`` is the end of a Retry-After (None: open);
    ``learned_requests`` and ``learned_tokens`` the requests and tokens per
    window learned from 429s (None: none learned); ``stated_requests`` and
    ``stated_tokens`` the limits the provider's headers state (None: none
    stated, or the limit does not read them).
    """

    match: str
    kind: LimitKind
    in_flight: int
    waiting: int
    admitted: int
    rate_limited: int
    level: float | None
    max_in_flight: int | None
    requests_per_minute: int | None
    tokens_per_minute: int | None
    requests: int
    tokens: int
    closed_until: float | None
    learned_requests: int | None = None
    learned_tokens: int | None = None
    stated_requests: int | None = None
    stated_tokens: int | None = None


class BackOff(msgspec.Struct, frozen=True, kw_only=True):
    """What a 429 did to a limit: its level before and after, and how long it is closed.

    ``lowered`` is False when the level did not move (not adaptive, or the
    429 was of a call admitted before the last decrease, or the provider's
    headers show it was a rate's with the rate stated); ``until`` is when its
    Retry-After ends (None: it sent none); ``learned_requests`` the learned
    requests per window when the 429 set it (None: it did not); ``reason``
    what the provider's headers show ran out: ``"rate"`` (requests or
    tokens), ``"concurrency"`` (they show both left: not the rate), None (they
    do not say).
    """

    match: str
    lowered: bool
    level_before: float | None
    level: float | None
    until: float | None
    learned_requests: int | None = None
    reason: str | None = None


class LimitState:
    """The live state of one :class:`ProviderLimit`."""

    __slots__ = (
        "admitted",
        "closed_until",
        "duration",
        "held_tokens",
        "in_flight",
        "learned",
        "level",
        "limit",
        "next_slot",
        "pace_gap",
        "pace_until",
        "rate_limited",
        "requests",
        "stated_requests",
        "stated_tokens",
        "tokens",
        "waiting",
        "window_s",
    )

    def __init__(self, limit: ProviderLimit, window_s: float = WINDOW_S) -> None:
        """The state of ``limit`` before any call: open, empty, at its ceiling.

        ``window_s`` is the span of its per-minute windows (60 s; shorter only
        against a test provider whose "minute" is shorter).
        """
        self.limit = limit
        self.level = AdaptiveLevel(
            floor=limit.min_in_flight,
            ceiling=limit.max_in_flight,
            decrease=limit.decrease,
            increase=limit.increase,
            adaptive=limit.adaptive,
        )
        self.learned: LearnedRate | None = None
        if limit.adaptive and limit.learn_rate:
            self.learned = LearnedRate(
                window_s=window_s,
                slots=limit.rate_slots,
                decrease=limit.rate_decrease,
                increase=limit.rate_increase,
                max_step=limit.rate_max_step,
                burst=limit.rate_burst,
            )
        rpm, tpm = limit.requests_per_minute, limit.tokens_per_minute
        self.requests = None if rpm is None else RateWindow(rpm, window_s)
        self.tokens = None if tpm is None else RateWindow(tpm, window_s)
        self.window_s = window_s
        self.stated_requests: RateWindow | None = None
        """The requests per window the provider's headers state (None: none stated)."""
        self.stated_tokens: RateWindow | None = None
        """The tokens per window the provider's headers state (None: none stated)."""
        self.held_tokens = 0
        """The token estimates of the calls in flight."""
        self.duration: float | None = None
        """The mean duration of a successful call (an exponential average), None: none yet."""
        self.in_flight = 0
        self.waiting = 0
        self.admitted = 0
        self.rate_limited = 0
        self.closed_until = -math.inf
        self.pace_until = -math.inf  # after a Retry-After: calls let go one by one until then
        self.pace_gap = 0.0
        self.next_slot = -math.inf

    def fits(self, tokens: int, now: float) -> bool:
        """Whether one more call estimated at ``tokens`` may start at ``now``."""
        if now < self.closed_until or (now < self.pace_until and now < self.next_slot):
            return False
        if self.in_flight >= self.level.cap():
            return False
        if not all(window.fits(units, now) for window, units in self._charges(tokens, True)):
            return False
        return self.learned is None or self.learned.fits(tokens, now)

    def _charges(self, tokens: int, alone: bool) -> list[tuple[RateWindow, int]]:
        """Each window a call estimated at ``tokens`` counts in, with the units it counts.

        ``alone``: a call larger than the stated tokens counts as the whole
        stated window, so it goes once that window is empty rather than never.
        """
        charges: list[tuple[RateWindow, int]] = []
        for window, units in (
            (self.requests, 1),
            (self.tokens, tokens),
            (self.stated_requests, 1),
            (self.stated_tokens, tokens),
        ):
            if window is not None:
                if alone and window is self.stated_tokens:
                    units = min(units, window.capacity)
                charges.append((window, units))
        return charges

    def ready_at(self, tokens: int, now: float) -> float | None:
        """Return the earliest time such a call could start (None: not before a call ends)."""
        if self.in_flight >= self.level.cap():
            return None
        at = max(now, self.closed_until)
        if at < self.pace_until:
            at = max(at, self.next_slot)
        for window, units in self._charges(tokens, True):
            free = window.free_at(units, now)
            if free is None:
                return None
            at = max(at, free)
        if self.learned is not None:
            at = max(at, self.learned.ready_at(tokens, now))
        return at

    def take(self, tokens: int, now: float, rng: random.Random) -> Slot | None:
        """Hold one call estimated at ``tokens``, admitted at ``now`` (the caller checked fits);
        return the learned rate's slot that counts it (None: no rate is learned here)."""
        self.in_flight += 1
        self.admitted += 1
        self.held_tokens += tokens
        for window, units in self._charges(tokens, False):
            window.take(units)
        if now < self.pace_until:
            self.next_slot = now + self.pace_gap * rng.uniform(0.5, 1.5)
        return None if self.learned is None else self.learned.admitted(tokens, now)

    def give_back(self, held: int, spent: int, now: float, refused: bool = False) -> None:
        """A call ends at ``now``: it held ``held`` tokens and spent ``spent``; ``refused``:
        the provider answered it 429 (its stated windows do not count its request)."""
        self.in_flight = max(0, self.in_flight - 1)
        self.held_tokens = max(0, self.held_tokens - held)
        if self.requests is not None:
            self.requests.give_back(1, 1, now)
        if self.tokens is not None:
            self.tokens.give_back(held, spent, now)
        if self.stated_requests is not None:
            self.stated_requests.give_back(1, 0 if refused else 1, now)
        if self.stated_tokens is not None:
            self.stated_tokens.give_back(held, spent, now)

    def state(self, stated: StatedLimits, now: float) -> None:
        """The provider's headers stated ``stated`` at ``now``: follow them (when the limit is
        adaptive and reads them).

        A stated limit becomes a window like a declared one (counted from
        admission until a window after the call's end; a call answered 429 is
        not counted) and bounds the learned rate, which paces the calls at it.
        A stated remainder shows what the provider counted: when it counted
        more than the window holds (another client of the account), the
        difference is counted too, for a window.
        """
        if not (self.limit.adaptive and self.limit.provider_headers):
            return
        pairs = (
            ("stated_requests", stated.requests_limit, stated.requests_remaining, self.in_flight),
            ("stated_tokens", stated.tokens_limit, stated.tokens_remaining, self.held_tokens),
        )
        for name, capacity, remaining, held in pairs:
            window: RateWindow | None = getattr(self, name)
            if capacity is not None:
                if window is None:
                    window = RateWindow(capacity, self.window_s)
                    window.held = held
                    setattr(self, name, window)
                else:
                    window.capacity = capacity
            if window is not None and remaining is not None:
                gap = (window.capacity - remaining) - window.used(now)
                if gap > 0:
                    window.give_back(0, gap, now)
        if self.learned is not None:
            self.learned.state(
                None if self.stated_requests is None else self.stated_requests.capacity,
                self.stated_tokens is not None,
            )

    def succeeded(self, busy: bool, duration: float) -> None:
        """A call admitted ``duration`` seconds before succeeded; ``busy``: the level was in use.

        Raises the level (:meth:`AdaptiveLevel.succeeded`) with the in-flight need of a
        learned rate: ``level_headroom`` x the rate per second x the mean call duration.
        """
        duration = max(0.0, duration)
        mean = self.duration
        self.duration = duration if mean is None else mean + _DURATION_WEIGHT * (duration - mean)
        need = 0.0
        learned = self.learned
        if learned is not None and learned.requests is not None:
            need = self.limit.level_headroom * learned.requests / learned.window_s * self.duration
        self.level.succeeded(busy, need)

    def busy(self) -> bool:
        """Whether the level is in use: the limit is full, or calls wait on it."""
        return self.waiting > 0 or self.in_flight >= self.level.cap()

    def back_off(
        self,
        retry_after: float | None,
        now: float,
        in_flight: int,
        epoch: int | None,
        rng: random.Random,
        tokens: int = 0,
        stated: StatedLimits | None = None,
    ) -> BackOff:
        """Answer a 429: learn a rate, lower the level, close the limit for ``retry_after``
        (capped) seconds.

        The learned rate (:mod:`.learned`) is set only by a 429 the level
        counts (of a call admitted at its current epoch): one burst teaches
        once. ``stated`` is what the 429's headers state (already
        :meth:`state`-d): when they show requests and tokens left
        (:meth:`StatedLimits.has_room`), the rate did not run out, so only the
        level is lowered; when they show one ran out and the provider states
        its requests limit, the stated window answers it and the level is
        kept.

        ``in_flight`` is the calls in flight when the 429 came (its call
        included), ``epoch`` the level's epoch when that call was admitted
        (None: lower regardless), ``tokens`` its estimate. After the Retry-After the calls are let
        go over ``jitter`` x its seconds, about one level's worth, at
        jittered intervals (``rng``).
        """
        self.rate_limited += 1
        before = self.level.shown()
        room = None
        if stated is not None and self.limit.adaptive and self.limit.provider_headers:
            room = stated.has_room(tokens)
        learned = None
        if (
            room is not True
            and self.learned is not None
            and self.learned.rate_limited(
                max(0, in_flight - 1), now, tokens, epoch, self.level.epoch
            )
        ):
            learned = self.learned.shown()[0]
        if room is False and self.stated_requests is not None:
            lowered = False  # the rate ran out, and the stated window answers it
        else:
            lowered = self.level.rate_limited(in_flight, epoch)
        until: float | None = None
        if retry_after is not None and retry_after >= 0 and math.isfinite(retry_after):
            pause = min(retry_after, self.limit.max_retry_after_s)
            until = max(self.closed_until, now + pause)
            self.closed_until = until
            spread = self.limit.jitter * pause
            cap = self.level.cap()
            count = max(1.0, cap if math.isfinite(cap) else float(in_flight))
            self.pace_gap = spread / count
            self.pace_until = until + spread
            self.next_slot = until + self.pace_gap * rng.uniform(0.0, 1.0)
        return BackOff(
            match=self.limit.match,
            lowered=lowered,
            level_before=before,
            level=self.level.shown(),
            until=until,
            learned_requests=learned,
            reason=None if room is None else ("concurrency" if room else "rate"),
        )

    def snapshot(self, now: float) -> LimitSnapshot:
        """This limit's figures at ``now``."""
        limit = self.limit
        learned = (None, None) if self.learned is None else self.learned.shown()
        return LimitSnapshot(
            match=limit.match,
            kind=limit.kind,
            in_flight=self.in_flight,
            waiting=self.waiting,
            admitted=self.admitted,
            rate_limited=self.rate_limited,
            level=self.level.shown(),
            max_in_flight=limit.max_in_flight,
            requests_per_minute=limit.requests_per_minute,
            tokens_per_minute=limit.tokens_per_minute,
            requests=0 if self.requests is None else self.requests.used(now),
            tokens=0 if self.tokens is None else self.tokens.used(now),
            closed_until=self.closed_until if now < self.closed_until else None,
            learned_requests=learned[0],
            learned_tokens=learned[1],
            stated_requests=None if self.stated_requests is None else self.stated_requests.capacity,
            stated_tokens=None if self.stated_tokens is None else self.stated_tokens.capacity,
        )
