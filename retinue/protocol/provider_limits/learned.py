"""A learned rate: the requests and tokens per window a provider let through, learned from 429s.

An adaptive limit without declared ``requests_per_minute`` or
``tokens_per_minute`` meets a provider that limits requests (and tokens) per
window. Its in-flight level (:mod:`.level`) does not bound a rate when calls
are short, so each window would pay a few 429s. :class:`LearnedRate` keeps
a bounded ring of what was admitted (counts per slot of ``window_s / slots``
seconds, the slot of each admission, so a call the provider refused is taken
out again) and, on a 429 that a rate explains, sets a ceiling per window:

- **Learn (multiplicative decrease).** The requests and tokens admitted in
  the last ``window_s`` (without those answered 429) times ``decrease``
  become the ceilings; a later such 429 sets them the same way again. Calls
  still in flight then count as the provider's; each of them answered 429
  later (a 429 of the same burst) takes its share back off the ceilings.
  One burst teaches once: only a 429 of a call admitted since the level's
  last decrease (:mod:`.level`'s epoch) teaches.
- **When a rate explains a 429.** The calls admitted in the window that
  already ended are at least half as many as the others still in flight:
  calls went through within the window, so a rate may have run out. A
  burst of calls all still in flight (a concurrency limit, the first
  fan-out) teaches no rate; the in-flight level answers it. Once a
  rate is learned, a 429 sets it again only when the window holds at least
  what it held at the 429 that last set it, less one increase step: the
  rate was reached again. A 429 below that (a concurrency limit, with the
  rate in use) is left to the level: lowering the rate for it would ratchet
  the rate down. So a provider that lowers its rate is followed by one
  step per 429 (and by the level and its ``Retry-After`` meanwhile).
- **Raise (additive increase).** After each clean window (``window_s``
  with no 429) in which the ceiling held a call back, each ceiling rises by
  ``increase`` times its value when last learned (at least 1).
- **Admit.** A call fits when one more request and its tokens keep the
  ring's window within the ceilings (an empty window always fits one call).
  A window slides slot by slot, so calls are let go at the pace the calls
  before them were, not all at once when a window ends.

Pure: time is passed in, nothing reads a clock. Bounded: the ring holds at
most ``slots + 1`` slots whatever the rate.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["LearnedRate", "Slot"]


class Slot:
    """The admissions counted in one slot of time: requests and tokens (a 429 takes its call
    out again)."""

    __slots__ = ("index", "requests", "tokens")

    def __init__(self, index: int) -> None:
        """An empty slot, the ``index``-th of its ring's time."""
        self.index = index
        self.requests = 0
        self.tokens = 0


class LearnedRate:
    """The requests and tokens per ``window_s`` learned from 429s (None: nothing learned)."""

    __slots__ = (
        "_changed_at",
        "_epoch",
        "_increase",
        "_refused_at",
        "_ring",
        "_step_requests",
        "_step_tokens",
        "decrease",
        "held_back",
        "learned",
        "requests",
        "slot_s",
        "tokens",
        "window_requests",
        "window_s",
        "window_tokens",
    )

    def __init__(self, *, window_s: float, slots: int, decrease: float, increase: float) -> None:
        """Nothing learned yet; admissions counted in ``slots`` slots per ``window_s``."""
        self.window_s = window_s
        self.slot_s = window_s / slots
        self.decrease = decrease
        self._increase = increase
        self.requests: float | None = None
        """The learned requests per window (None: none learned)."""
        self.tokens: float | None = None
        """The learned tokens per window (None: none learned)."""
        self.learned = 0
        """How many times a 429 set the ceilings."""
        self.held_back = False
        """Whether the ceiling held a call back since the last change."""
        self._ring: deque[Slot] = deque()
        self.window_requests = 0
        self.window_tokens = 0
        self._changed_at = -math.inf
        self._step_requests = 1.0
        self._step_tokens = 1.0
        self._refused_at = 0
        self._epoch = -1

    def _expire(self, now: float) -> None:
        """Drop the slots wholly older than ``window_s`` at ``now``."""
        ring = self._ring
        while ring and (ring[0].index + 1) * self.slot_s + self.window_s <= now:
            self._drop(ring.popleft())

    def _drop(self, slot: Slot) -> None:
        self.window_requests -= slot.requests
        self.window_tokens -= slot.tokens
        slot.requests = slot.tokens = 0

    def admitted(self, tokens: int, now: float) -> Slot:
        """Count a call estimated at ``tokens`` admitted at ``now``; return its slot."""
        self._expire(now)
        index = math.floor(now / self.slot_s)
        ring = self._ring
        if not ring or ring[-1].index < index:
            ring.append(Slot(index))
        slot = ring[-1]  # a clock that went back counts in the newest slot
        slot.requests += 1
        slot.tokens += tokens
        self.window_requests += 1
        self.window_tokens += tokens
        return slot

    def refused(self, slot: Slot, tokens: int) -> None:
        """A call counted in ``slot`` (estimated at ``tokens``) was answered 429: the provider
        did not count it, so neither does the window (nothing if the slot left it)."""
        if slot.requests > 0:
            slot.requests -= 1
            self.window_requests -= 1
            taken = min(tokens, slot.tokens)
            slot.tokens -= taken
            self.window_tokens -= taken

    def rate_limited(
        self, others_in_flight: int, now: float, tokens: int, epoch: int | None, level_epoch: int
    ) -> bool:
        """A 429 came at ``now`` for a call estimated at ``tokens`` (already :meth:`refused`),
        admitted at the level's ``epoch`` (None: no call), the level now at ``level_epoch``,
        with ``others_in_flight`` other calls in flight. Learn the ceilings when a rate explains
        it (see the module docstring); return whether they were set."""
        self._changed_at = now  # the window is not clean
        self.held_back = False
        self._expire(now)
        if epoch is not None and epoch != level_epoch:
            if self.requests is not None and epoch == self._epoch:
                self._uncount(tokens)
            return False
        count = self.window_requests
        ended = count - others_in_flight
        if 2 * ended < max(1, others_in_flight):
            return False
        if self.requests is not None and count < self._refused_at - self._step_requests:
            return False
        self._refused_at = count
        self._epoch = level_epoch
        self.requests = max(1.0, count * self.decrease)
        self.tokens = max(1.0, self.window_tokens * self.decrease)
        self._step_requests = max(1.0, self.requests * self._increase)
        self._step_tokens = max(1.0, self.tokens * self._increase)
        self.learned += 1
        return True

    def _uncount(self, tokens: int) -> None:
        """A call counted in the window the ceilings were learned from was refused after all:
        the provider did not count it, so the ceilings and the mark drop by its share."""
        assert self.requests is not None and self.tokens is not None
        self.requests = max(1.0, self.requests - self.decrease)
        self.tokens = max(1.0, self.tokens - self.decrease * tokens)
        self._refused_at = max(0, self._refused_at - 1)

    def _raise(self, now: float) -> None:
        """Raise the ceilings once per clean window in which they held a call back."""
        if self.requests is None or now - self._changed_at < self.window_s:
            return
        if self.held_back:
            self.requests += self._step_requests
            if self.tokens is not None:
                self.tokens += self._step_tokens
        self._changed_at = now
        self.held_back = False

    def fits(self, tokens: int, now: float) -> bool:
        """Whether one more call estimated at ``tokens`` keeps the window within the ceilings
        (always, while nothing is learned; a call held back is remembered)."""
        if self.requests is None:
            return True
        self._raise(now)
        self._expire(now)
        if self._within(tokens):
            return True
        self.held_back = True
        return False

    def _within(self, tokens: int) -> bool:
        if self.window_requests == 0:
            return True
        if self.window_requests + 1 > math.floor(self.requests or math.inf):
            return False
        return self.tokens is None or self.window_tokens + tokens <= self.tokens

    def ready_at(self, tokens: int, now: float) -> float:
        """Return the earliest time such a call fits if nothing else is admitted."""
        if self.requests is None:
            return now
        self._raise(now)
        self._expire(now)
        if self._within(tokens):
            return now
        requests, spent = self.window_requests, self.window_tokens
        for slot in self._ring:
            requests -= slot.requests
            spent -= slot.tokens
            at = (slot.index + 1) * self.slot_s + self.window_s
            if requests == 0 or (
                requests + 1 <= math.floor(self.requests)
                and (self.tokens is None or spent + tokens <= self.tokens)
            ):
                return at
        return now  # unreachable: an empty window fits

    def shown(self) -> tuple[int | None, int | None]:
        """The learned requests and tokens per window as diagnostics show them (None: none)."""
        if self.requests is None:
            return None, None
        return math.floor(self.requests), None if self.tokens is None else math.floor(self.tokens)
