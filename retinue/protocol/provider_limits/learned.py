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
  fan-out) teaches no rate; the in-flight level answers it. Once a rate is
  learned, a 429 sets again each ceiling the window had come near: it
  holds at least ``decrease`` times the smaller of the ceiling and its mark
  (what the window held at the 429 that last set it). A 429 with the window
  below both (a concurrency limit, with the rate not in use) is left to the
  level: lowering the rate for it would ratchet the rate down.
- **Which ceiling binds.** A 429 does not say whether requests or tokens
  ran out, so the first one sets both. Until a 429 sets the tokens ceiling
  alone (the tokens, not the requests, near their ceiling), the tokens are
  not known to bind: when the tokens ceiling alone holds a call back (the
  requests ceiling and the pace have room) it follows the calls' size,
  rising to a full requests ceiling of calls of the window's mean size.
  Calls whose prompts grow step by step are then not held to the tokens
  their first, short steps used.
- **Raise (regain, then probe).** After each clean window (``window_s``
  with no 429) in which a ceiling held a call back, that ceiling rises.
  Below the point halfway from ``decrease`` times its mark to the mark it
  goes straight there: the provider let the mark through just before, so
  most of the ``decrease`` slack is given back after one clean window, not
  step by step (TCP's ssthresh: the old level is regained quickly). Past
  it the ceiling rises by a step, ``increase`` times its value when last
  learned (at least 1), doubled after each clean window that raised it, up
  to ``max_step`` times that value: a ceiling set too low (a 429 of a
  concurrency limit) finds the rate in a few windows, and the next 429 sets
  it again and starts the steps over.
- **Admit, at the learned pace.** A call fits when one more request and its
  tokens keep the ring's window within the ceilings (an empty window always
  fits one call), and the pace allows one more request: requests go at the
  learned requests per ``window_s``, at most ``burst`` times a window's
  worth at once (a token bucket). The window alone would let calls go in
  the bursts the calls before them went in (each window replays the last);
  paced, they go evenly, so fewer are in flight at once and a provider's
  concurrency limit is not hit by a window's worth starting together.
- **Stated.** A limit the provider states in its headers
  (:meth:`LearnedRate.state`, :mod:`.stated`) is the rate: the requests
  ceiling is the stated requests, the calls go at its pace, and no 429 sets
  it or probes past it; with the tokens stated (a window of their own bounds
  them) no tokens ceiling is learned.

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
        "_bucket",
        "_bucket_at",
        "_burst",
        "_changed_at",
        "_epoch",
        "_growth",
        "_held_requests",
        "_held_tokens",
        "_increase",
        "_max_step",
        "_refused_at",
        "_refused_tokens",
        "_ring",
        "_stated_requests",
        "_stated_tokens",
        "_step_requests",
        "_step_tokens",
        "_tokens_bind",
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

    def __init__(
        self,
        *,
        window_s: float,
        slots: int,
        decrease: float,
        increase: float,
        max_step: float | None = None,
        burst: float = 1.0,
    ) -> None:
        """Nothing learned yet; admissions counted in ``slots`` slots per ``window_s``;
        a raise past the mark is at most ``max_step`` (None: ``increase``, never doubled)
        times the value learned; once a rate is learned, calls go at its pace with at most
        ``burst`` times its requests per window at once (1.0: a window's worth)."""
        self.window_s = window_s
        self.slot_s = window_s / slots
        self.decrease = decrease
        self._increase = increase
        self._max_step = increase if max_step is None else max(increase, max_step)
        self._growth = 1.0  # the step's multiple: doubled by each raise past the mark
        self._held_requests = False
        self._held_tokens = False
        self._tokens_bind = False  # a 429 came with the tokens, not the requests, at their mark
        self._refused_tokens = 0.0
        self._burst = burst
        self._bucket = 0.0  # the requests that may start now at the learned pace
        self._bucket_at = -math.inf
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
        self._stated_requests: float | None = None  # the provider's stated requests per window
        self._stated_tokens = False  # the provider states its tokens (a window bounds them)

    def state(self, requests: int | None, tokens: bool) -> None:
        """The provider states its limits (its headers): ``requests`` per window (None: not
        stated), and whether it states its tokens per window.

        A stated requests limit is the rate: the calls go at its pace, and no 429
        sets it or probes past it. Stated tokens are bounded by a window of their
        own (:class:`~retinue.protocol.provider_limits.LimitState`), so no tokens
        ceiling is learned.
        """
        if requests is not None:
            if self.requests is None:
                self._bucket_at = -math.inf  # the first stated rate starts with a burst's room
            self._stated_requests = float(requests)
            self.requests = self._stated_requests
            self._refused_at = requests
        if tokens:
            self._stated_tokens = True
            self.tokens = None

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
        if self.requests is not None:
            self._refill(now)
            self._bucket -= 1.0
        return slot

    def _refill(self, now: float) -> None:
        """Add the requests the learned pace allows since the last look, up to the burst."""
        assert self.requests is not None
        depth = max(1.0, self.requests * self._burst)
        if now > self._bucket_at:
            gained = (now - self._bucket_at) * self.requests / self.window_s
            self._bucket = min(depth, self._bucket + gained)
            self._bucket_at = now

    def refused(self, slot: Slot, tokens: int) -> None:
        """A call counted in ``slot`` (estimated at ``tokens``) was answered 429: the provider
        did not count it, so neither does the window (nothing if the slot left it)."""
        if slot.requests > 0:
            slot.requests -= 1
            self.window_requests -= 1
            self._bucket += 1.0  # its turn at the pace is given back
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
        self.held_back = self._held_requests = self._held_tokens = False
        self._growth = 1.0
        self._expire(now)
        if epoch is not None and epoch != level_epoch:
            if self.requests is not None and epoch == self._epoch:
                self._uncount(tokens)
            return False
        count = self.window_requests
        ended = count - others_in_flight
        if 2 * ended < max(1, others_in_flight):
            return False
        # the first 429 sets both; later ones each ceiling the window came near
        requests = self.requests is None or count >= self.decrease * min(
            self.requests, self._refused_at
        )
        tokens = self.tokens is None or self.window_tokens >= self.decrease * min(
            self.tokens, self._refused_tokens
        )
        requests = requests and self._stated_requests is None  # a stated limit is not learned
        tokens = tokens and not self._stated_tokens
        if not (requests or tokens):
            return False
        self._epoch = level_epoch
        if requests:
            self._refused_at = count
            self.requests = max(1.0, count * self.decrease)
            self._step_requests = max(1.0, self.requests * self._increase)
        if tokens:
            self._refused_tokens = float(self.window_tokens)
            self.tokens = max(1.0, self.window_tokens * self.decrease)
            self._step_tokens = max(1.0, self.tokens * self._increase)
            self._tokens_bind = self._tokens_bind or not requests
        self.learned += 1
        self._bucket, self._bucket_at = 0.0, now
        return True

    def _uncount(self, tokens: int) -> None:
        """A call counted in the window the ceilings were learned from was refused after all:
        the provider did not count it, so the ceilings and the mark drop by its share."""
        if self.requests is not None and self._stated_requests is None:
            self.requests = max(1.0, self.requests - self.decrease)
            self._refused_at = max(0, self._refused_at - 1)
        if self.tokens is not None:
            self.tokens = max(1.0, self.tokens - self.decrease * tokens)
            self._refused_tokens = max(0.0, self._refused_tokens - tokens)

    def _raise(self, now: float) -> None:
        """Raise the ceilings that held a call back, once per clean window (see the module
        docstring: to the mark, then by a step that doubles up to ``max_step``)."""
        if self.requests is None or now - self._changed_at < self.window_s:
            return
        probed = False
        if self._held_requests and self._stated_requests is None:
            self.requests, past = self._raised(self.requests, self._refused_at, self._step_requests)
            probed = probed or past
        if self._held_tokens and self.tokens is not None:
            self.tokens, past = self._raised(self.tokens, self._refused_tokens, self._step_tokens)
            probed = probed or past
        if probed:
            self._growth = min(2.0 * self._growth, self._max_step / self._increase)
        self._changed_at = now
        self.held_back = self._held_requests = self._held_tokens = False

    def _raised(self, value: float, mark: float, step: float) -> tuple[float, bool]:
        """Return ``value`` raised once, and whether the raise was a probe (past the point
        halfway from the value learned to the mark)."""
        regained = mark * (1.0 + self.decrease) / 2.0
        if value < regained - step:
            return regained, False
        return value + step * min(self._growth, self._max_step / self._increase), True

    def fits(self, tokens: int, now: float) -> bool:
        """Whether one more call estimated at ``tokens`` keeps the window within the ceilings
        (always, while nothing is learned; a call held back is remembered)."""
        if self.requests is None:
            return True
        self._raise(now)
        self._expire(now)
        self._refill(now)
        requests_ok, tokens_ok = self._room(tokens)
        requests_ok = requests_ok and self._bucket >= 1.0 - 1e-9
        if requests_ok and not tokens_ok:
            followed = self._followed(tokens)
            if followed is not None:
                self.tokens = self._refused_tokens = followed
                self._step_tokens = max(1.0, followed * self._increase)
                tokens_ok = True
        if requests_ok and tokens_ok:
            return True
        self.held_back = True
        self._held_requests = self._held_requests or not requests_ok
        self._held_tokens = self._held_tokens or not tokens_ok
        return False

    def _followed(self, tokens: int, paced: bool = True) -> float | None:
        """The tokens ceiling raised so that a call of ``tokens`` fits, or None.

        Only when it alone holds the call back (the requests ceiling and, when ``paced``,
        the pace have room) and no 429 showed the tokens binding: then it follows the
        calls' size, a full window of calls of the window's mean size (this one's included).
        """
        if self._tokens_bind or self.requests is None or self.tokens is None:
            return None
        if (paced and self._bucket < 1.0 - 1e-9) or not self._room(tokens)[0]:
            return None
        mean = (self.window_tokens + tokens) / (self.window_requests + 1)
        follow = math.floor(self.requests) * mean
        return follow if self.window_tokens + tokens <= follow else None

    def _room(self, tokens: int) -> tuple[bool, bool]:
        """Whether one more request, and its ``tokens``, keep the window within each ceiling
        (an empty window has room for one call)."""
        if self.window_requests == 0:
            return True, True
        requests_ok = self.window_requests + 1 <= math.floor(self.requests or math.inf)
        tokens_ok = self.tokens is None or self.window_tokens + tokens <= self.tokens
        return requests_ok, tokens_ok

    def _within(self, tokens: int) -> bool:
        return all(self._room(tokens))

    def ready_at(self, tokens: int, now: float) -> float:
        """Return the earliest time such a call fits if nothing else is admitted."""
        if self.requests is None:
            return now
        self._raise(now)
        self._expire(now)
        self._refill(now)
        paced = now + max(0.0, 1.0 - self._bucket) * self.window_s / self.requests
        if self._within(tokens) or self._followed(tokens, paced=False) is not None:
            return paced
        return max(paced, self._window_ready_at(tokens, now))

    def _window_ready_at(self, tokens: int, now: float) -> float:
        """Return when the window, sliding, has room for such a call."""
        assert self.requests is not None
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
