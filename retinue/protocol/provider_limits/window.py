"""A per-minute limit: a bucket whose units come back 60 s after the call that took them ended.

A provider counts a request in its window when it arrives, somewhere between
the moment retinue admits the call and the moment the call ends. So a unit
(a request, or a token of one) is held from the call's admission until
``span_s`` seconds after its end: then no ``span_s`` window, as any provider
may draw it, holds more than ``capacity`` units of the calls admitted here.
A call ends with what it really spent (a response's usage corrects the
estimate it was admitted with). Time is passed in; nothing reads a clock.
"""

from __future__ import annotations

from collections import deque

__all__ = ["RateWindow"]


class RateWindow:
    """``capacity`` units in any ``span_s`` seconds: held by calls in flight, then spent."""

    __slots__ = ("_last", "_spent", "_spent_total", "capacity", "held", "span_s")

    def __init__(self, capacity: int, span_s: float = 60.0) -> None:
        """A window of ``capacity`` units over ``span_s`` seconds, empty."""
        self.capacity = capacity
        self.span_s = span_s
        self.held = 0
        """Units held by calls in flight."""
        self._spent: deque[tuple[float, int]] = deque()  # (ended at, units), in time order
        self._spent_total = 0
        self._last = float("-inf")

    def _expire(self, now: float) -> None:
        """Drop the spent units whose ``span_s`` has passed at ``now``."""
        spent = self._spent
        span = self.span_s
        # ``at + span <= now``, the very sum free_at answers: the window frees at that time.
        while spent and spent[0][0] + span <= now:
            self._spent_total -= spent.popleft()[1]

    def used(self, now: float) -> int:
        """Return the units held or spent within the last ``span_s`` seconds at ``now``."""
        self._expire(now)
        return self.held + self._spent_total

    def fits(self, units: int, now: float) -> bool:
        """Whether ``units`` more fit at ``now``."""
        return self.used(now) + units <= self.capacity

    def take(self, units: int) -> None:
        """Hold ``units`` for a call admitted now (the caller checked :meth:`fits`)."""
        self.held += units

    def give_back(self, held: int, spent: int, now: float) -> None:
        """A call that held ``held`` units ended at ``now`` having spent ``spent`` units.

        The spent units stay counted for ``span_s`` seconds from ``now``. A
        ``now`` earlier than a previous end (a clock that went back) counts as
        that end, so the window stays in time order.
        """
        self.held = max(0, self.held - held)
        if spent > 0:
            at = max(now, self._last)
            self._last = at
            self._spent.append((at, spent))
            self._spent_total += spent

    def free_at(self, units: int, now: float) -> float | None:
        """Return when ``units`` will fit if nothing else is taken (``now`` if they fit now).

        None: they will not fit until calls in flight end (the held units
        alone leave too little room).
        """
        self._expire(now)
        excess = self.held + self._spent_total + units - self.capacity
        if excess <= 0:
            return now
        if self.held + units > self.capacity:
            return None
        for at, spent in self._spent:
            excess -= spent
            if excess <= 0:
                return at + self.span_s
        return None  # unreachable: the spent units cover the excess
