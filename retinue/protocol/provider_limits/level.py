"""The adaptive in-flight level of one limit: AIMD (additive increase, multiplicative decrease).

The level bounds the calls in flight under a limit. It starts at the limit's
``max_in_flight`` (unbounded when None). A 429 sets it to ``decrease``
times the smaller of the level and the calls in flight (TCP's flight size:
a level far above what flew says nothing), never below ``min_in_flight``;
each success while the level is in use (the limit full, or calls waiting
on it) adds ``increase / level``, so a level's worth of successes adds
``increase``, never above ``max_in_flight``. Below a ``need`` the caller
names (the calls a learned rate needs in flight, by Little's law: the rate
times the mean call duration) each success adds one call instead (TCP's
slow start): a level halved by a 429 regains what the rate needs within a
level's worth of successes, not one call per level's worth. One burst of
429s lowers the level once: a 429 of a call admitted before the last
decrease is already answered by it (TCP's rule, per window).
"""

from __future__ import annotations

import math

__all__ = ["AdaptiveLevel"]


class AdaptiveLevel:
    """The in-flight level of one limit, and how 429s and successes move it."""

    __slots__ = ("adaptive", "ceiling", "decrease", "epoch", "floor", "increase", "value")

    def __init__(
        self,
        *,
        floor: int,
        ceiling: int | None,
        decrease: float,
        increase: float,
        adaptive: bool,
    ) -> None:
        """A level at ``ceiling`` (unbounded when None) that moves only when ``adaptive``."""
        self.floor = floor
        self.ceiling = math.inf if ceiling is None else float(ceiling)
        self.decrease = decrease
        self.increase = increase
        self.adaptive = adaptive
        self.value = self.ceiling
        self.epoch = 0
        """How many times the level was lowered; a call admitted at another epoch is older."""

    def cap(self) -> float:
        """Return the calls that may be in flight: the level rounded down, at least ``floor``."""
        if math.isinf(self.value):
            return math.inf
        return float(max(self.floor, math.floor(self.value + 1e-9)))

    def succeeded(self, busy: bool, need: float = 0.0) -> None:
        """A call succeeded; raise the level if adaptive and ``busy`` (the level was in use):
        by one call while it is below ``need`` (the calls a known rate needs in flight: a
        level's worth of successes doubles it, never past ``need``), else additively."""
        if not (self.adaptive and busy and self.value < self.ceiling):
            return
        if self.value + 1.0 <= need:
            self.value = min(self.ceiling, self.value + 1.0)
        else:
            self.value = min(self.ceiling, self.value + self.increase / max(self.value, 1.0))

    def rate_limited(self, in_flight: int, epoch: int | None) -> bool:
        """A 429 came with ``in_flight`` calls in flight (its own call included, if any).

        Lower the level (if adaptive) unless the call was admitted at an
        older ``epoch`` than the current one (None: always lower). With no
        call in flight the level itself is lowered (an unbounded one stays).
        Return whether it was lowered.
        """
        if not self.adaptive or (epoch is not None and epoch != self.epoch):
            return False
        base = min(self.value, float(in_flight)) if in_flight > 0 else self.value
        if math.isinf(base):
            return False
        self.value = max(float(self.floor), base * self.decrease)
        self.epoch += 1
        return True

    def shown(self) -> float | None:
        """The level as a diagnostic shows it (None: unbounded)."""
        return None if math.isinf(self.value) else round(self.value, 3)
