"""A provider's rate limits as a provider enforces them: requests, tokens, concurrent requests.

:class:`ProviderQuota` is what :class:`~retinue.testing.RateLimitedStub`
enforces, pure (time passed in, no thread, no I/O): a request is counted
when it arrives, with the tokens it uses (its prompt and its completion);
it is refused when one more would make any ``window_s`` window (a minute)
hold more than ``requests_per_minute`` requests or ``tokens_per_minute``
tokens, or make more than ``max_in_flight`` requests run at once. A refused
request is not counted. A refusal says how long to wait (whole seconds, at
least 1, as ``Retry-After`` carries them) and why, in OpenAI's words.
:meth:`ProviderQuota.report` tells what was admitted per window and at most
in any window.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from retinue.errors import InvalidArgument

__all__ = ["ProviderQuota", "QuotaReport", "Refusal", "WindowCount"]


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused (``kind``: ``requests``, ``tokens`` or ``concurrency``)."""

    kind: str
    message: str
    retry_after_s: int


@dataclass(frozen=True)
class WindowCount:
    """What one window (``window_s`` seconds from ``start``, since the quota began) admitted."""

    start: float
    requests: int
    tokens: int
    rate_limited: int


@dataclass(frozen=True)
class QuotaReport:
    """What a quota admitted and refused, and the most any ``window_s`` window held."""

    admitted: int
    tokens: int
    rate_limited: int
    refused: dict[str, int]
    max_in_flight: int
    max_requests_in_window: int
    max_tokens_in_window: int
    windows: tuple[WindowCount, ...] = field(default=())


def _positive(name: str, value: int | None) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidArgument(f"{name} must be a positive integer or None, not {value!r}")
    return value


class ProviderQuota:
    """Requests and tokens per ``window_s`` and concurrent requests, enforced as a provider does.

    Raises:
        InvalidArgument: a limit that is not a positive integer (or None), or
            ``window_s`` not a positive number.
    """

    def __init__(
        self,
        *,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        max_in_flight: int | None = None,
        window_s: float = 60.0,
        start: float = 0.0,
    ) -> None:
        """A quota that began at ``start`` (the reported windows count from it)."""
        self.requests_per_minute = _positive("requests_per_minute", requests_per_minute)
        self.tokens_per_minute = _positive("tokens_per_minute", tokens_per_minute)
        self.max_in_flight = _positive("max_in_flight", max_in_flight)
        if not isinstance(window_s, int | float) or not math.isfinite(window_s) or window_s <= 0:
            raise InvalidArgument(f"window_s must be a positive number, not {window_s!r}")
        self.window_s = float(window_s)
        self.start = start
        self.in_flight = 0
        self._recent: deque[tuple[float, int]] = deque()  # admitted in the last window_s
        self._recent_tokens = 0
        self._admitted: list[tuple[float, int]] = []
        self._refused: list[tuple[float, str]] = []
        self._most_in_flight = 0

    def _expire(self, now: float) -> None:
        recent = self._recent
        while recent and recent[0][0] + self.window_s <= now:
            self._recent_tokens -= recent.popleft()[1]

    def admit(self, tokens: int, now: float) -> Refusal | None:
        """Admit a request using ``tokens`` at ``now`` (None), or say why not (not counted)."""
        self._expire(now)
        refusal = self._refusal(tokens, now)
        if refusal is not None:
            self._refused.append((now, refusal.kind))
            return refusal
        self._recent.append((now, tokens))
        self._recent_tokens += tokens
        self._admitted.append((now, tokens))
        self.in_flight += 1
        self._most_in_flight = max(self._most_in_flight, self.in_flight)
        return None

    @property
    def rate_limited(self) -> int:
        """The requests refused so far."""
        return len(self._refused)

    def done(self) -> None:
        """An admitted request was answered (it no longer counts as running)."""
        self.in_flight = max(0, self.in_flight - 1)

    def _refusal(self, tokens: int, now: float) -> Refusal | None:
        rpm, tpm, top = self.requests_per_minute, self.tokens_per_minute, self.max_in_flight
        used = len(self._recent)
        if rpm is not None and used + 1 > rpm:
            wait = self._recent[used - rpm][0] + self.window_s - now
            return self._refuse("requests", "requests per min (RPM)", rpm, used, 1, wait)
        if tpm is not None and self._recent_tokens + tokens > tpm:
            return self._refuse(
                "tokens",
                "tokens per min (TPM)",
                tpm,
                self._recent_tokens,
                tokens,
                self._tokens_free_in(tokens, now),
            )
        if top is not None and self.in_flight >= top:
            return Refusal(
                "concurrency",
                f"Too many concurrent requests: limit {top}, running {self.in_flight}. "
                f"Please try again in 1s.",
                1,
            )
        return None

    def _tokens_free_in(self, tokens: int, now: float) -> float:
        """Seconds until ``tokens`` fit (a request larger than the limit never does: a window)."""
        assert self.tokens_per_minute is not None
        excess = self._recent_tokens + tokens - self.tokens_per_minute
        for at, spent in self._recent:
            excess -= spent
            if excess <= 0:
                return at + self.window_s - now
        return self.window_s

    def _refuse(
        self, kind: str, what: str, limit: int, used: int, asked: int, wait: float
    ) -> Refusal:
        seconds = max(1, math.ceil(wait))
        return Refusal(
            kind,
            f"Rate limit reached on {what}: Limit {limit}, Used {used}, Requested {asked}. "
            f"Please try again in {seconds}s.",
            seconds,
        )

    def remaining(self, now: float) -> tuple[int | None, int | None]:
        """Requests and tokens left in the current window at ``now`` (None: no such limit)."""
        self._expire(now)
        rpm, tpm = self.requests_per_minute, self.tokens_per_minute
        return (
            None if rpm is None else max(0, rpm - len(self._recent)),
            None if tpm is None else max(0, tpm - self._recent_tokens),
        )

    def reset_in(self, now: float) -> float:
        """Seconds until the window is whole again at ``now`` (every request in it expired)."""
        self._expire(now)
        return max(0.0, self._recent[-1][0] + self.window_s - now) if self._recent else 0.0

    def report(self) -> QuotaReport:
        """What was admitted and refused: in all, per window since ``start``, and at most."""
        refused: dict[str, int] = {}
        for _, kind in self._refused:
            refused[kind] = refused.get(kind, 0) + 1
        most_requests, most_tokens = _densest(self._admitted, self.window_s)
        return QuotaReport(
            admitted=len(self._admitted),
            tokens=sum(tokens for _, tokens in self._admitted),
            rate_limited=len(self._refused),
            refused=refused,
            max_in_flight=self._most_in_flight,
            max_requests_in_window=most_requests,
            max_tokens_in_window=most_tokens,
            windows=self._windows(),
        )

    def _windows(self) -> tuple[WindowCount, ...]:
        """The consecutive windows from ``start`` to the last request, admitted or refused."""
        times = [at for at, _ in self._admitted] + [at for at, _ in self._refused]
        if not times:
            return ()
        count = int((max(times) - self.start) // self.window_s) + 1
        requests, tokens, limited = [0] * count, [0] * count, [0] * count
        for at, spent in self._admitted:
            slot = max(0, int((at - self.start) // self.window_s))
            requests[slot] += 1
            tokens[slot] += spent
        for at, _ in self._refused:
            limited[max(0, int((at - self.start) // self.window_s))] += 1
        return tuple(
            WindowCount(n * self.window_s, requests[n], tokens[n], limited[n]) for n in range(count)
        )


def _densest(admitted: Sequence[tuple[float, int]], window_s: float) -> tuple[int, int]:
    """The most requests and tokens admitted within any ``window_s`` (in arrival order)."""
    most_requests = most_tokens = 0
    first = 0
    tokens = 0
    for last, (at, spent) in enumerate(admitted):
        tokens += spent
        while admitted[first][0] + window_s <= at:
            tokens -= admitted[first][1]
            first += 1
        most_requests = max(most_requests, last - first + 1)
        most_tokens = max(most_tokens, tokens)
    return most_requests, most_tokens
