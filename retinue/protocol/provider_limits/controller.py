"""The admission controller: which model call may start now, fairly, within every limit.

Pure logic: no thread, no clock (``now`` is passed in), no I/O; randomness
from the ``random.Random`` it is given. Whoever drives it (an asyncio gate,
a Ray actor leasing capacity to shards) keeps it on one thread and, after
each :meth:`~AdmissionController.try_admit`, :meth:`~AdmissionController.release`,
:meth:`~AdmissionController.cancel` or :meth:`~AdmissionController.on_rate_limited`,
and at the time :meth:`~AdmissionController.next_check` names, calls
:meth:`~AdmissionController.admit_waiting` and lets the calls it returns go.

A call fits when it fits every limit that covers it: none closed by a
Retry-After, fewer calls in flight than the level, a request and its token
estimate within the per-minute windows. Calls that wait are served tree by
tree (:class:`~retinue.protocol.provider_limits.fairness.FairQueue`); a
call that does not fit a limit holds that limit for the rest of a pass, so
a later call never overtakes it there (but may go ahead on other limits).
A call that no limit covers is admitted at once.

Bounds: each agent has at most one call asking at a time, so the calls
waiting are at most the runtime's agents (``Limits.max_agents``); the cache
of which limits cover a model holds at most 4096 entries.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from retinue.errors import InvalidArgument, InvalidLimits, ProviderLimitExceeded
from retinue.protocol.messages import Usage
from retinue.protocol.provider_limits.fairness import FairQueue
from retinue.protocol.provider_limits.learned import Slot
from retinue.protocol.provider_limits.limit import ProviderLimit, normalise_match, specificity
from retinue.protocol.provider_limits.sources import check_unique
from retinue.protocol.provider_limits.state import WINDOW_S, BackOff, LimitSnapshot, LimitState
from retinue.protocol.provider_limits.stated import StatedLimits

__all__ = ["AdmissionController", "Admitted", "ModelCall", "Waiting"]

_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One model call asking for admission (one attempt: a retry asks again).

    ``id`` is unique among the calls the controller knows; ``tree`` the
    top-level agent whose tree makes it (fairness is between trees);
    ``tokens`` its estimate (prompt + expected completion); ``weight`` its
    profile's priority; ``provider`` litellm's provider when the model
    string does not name one.

    Raises:
        InvalidArgument: an empty id, tree or model, negative tokens, or a
            weight that is not a positive finite number.
    """

    id: str
    tree: str
    model: str
    api_base: str | None = None
    tokens: int = 0
    weight: float = 1.0
    provider: str | None = None

    def __post_init__(self) -> None:
        """Check the fields (see the class docstring)."""
        for name in ("id", "tree", "model"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"ModelCall.{name} must be a non-empty string, not {value!r}")
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 0:
            raise InvalidArgument(f"ModelCall.tokens must be an integer >= 0, not {self.tokens!r}")
        weight = self.weight
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight <= 0
        ):
            raise InvalidArgument(f"ModelCall.weight must be a positive number, not {weight!r}")


@dataclass(frozen=True, slots=True)
class Admitted:
    """The call may start now."""

    call: ModelCall


@dataclass(frozen=True, slots=True)
class Waiting:
    """The call waits; ``until`` is the earliest time worth checking again (None: a release)."""

    call: ModelCall
    until: float | None


@dataclass(slots=True)
class _Entry:
    """A call the controller knows: its limits (most specific first), and once admitted,
    the level's epoch of each limit when it was and the learned rates' slots counting it."""

    call: ModelCall
    states: tuple[LimitState, ...]
    admitted_at: float = 0.0
    epochs: tuple[int, ...] = ()
    slots: tuple[Slot | None, ...] = ()


class AdmissionController:
    """Admission of model calls under provider limits; one thread at a time."""

    def __init__(
        self, limits: Iterable[ProviderLimit], rng: random.Random, window_s: float = WINDOW_S
    ) -> None:
        """Control admission under ``limits``; ``rng`` jitters the release after a Retry-After.

        ``window_s`` is the span of the per-minute windows (60 s; shorter only
        against a test provider whose "minute" is shorter).

        Raises:
            InvalidLimits: an item is not a ProviderLimit, or a match is named
                twice, or ``window_s`` is not a positive finite number.
        """
        checked = check_unique(limits, "AdmissionController limits")
        if isinstance(window_s, bool) or not (
            isinstance(window_s, int | float) and 0 < window_s < math.inf
        ):
            raise InvalidLimits(
                f"the provider limits' window must be > 0 seconds, not {window_s!r}"
            )
        self.window_s = float(window_s)
        self._states = {limit.match: LimitState(limit, self.window_s) for limit in checked}
        self._rng = rng
        self._queue: FairQueue[_Entry] = FairQueue()
        self._waiting: dict[str, _Entry] = {}
        self._flying: dict[str, _Entry] = {}
        self._ready: dict[str, ModelCall] = {}  # admitted by a pass, not yet handed out
        self._covering: dict[tuple[str, str | None, str | None], tuple[LimitState, ...]] = {}

    @property
    def limits(self) -> tuple[ProviderLimit, ...]:
        """The limits in force."""
        return tuple(state.limit for state in self._states.values())

    def matching(self, call: ModelCall) -> tuple[ProviderLimit, ...]:
        """The limits that cover ``call``, the most specific first."""
        return tuple(state.limit for state in self._covering_states(call))

    def _covering_states(self, call: ModelCall) -> tuple[LimitState, ...]:
        key = (call.model, call.api_base, call.provider)
        found = self._covering.get(key)
        if found is None:
            covering = [s for s in self._states.values() if s.limit.covers(*key)]
            covering.sort(key=lambda s: specificity(s.limit.match), reverse=True)
            found = tuple(covering)
            if len(self._covering) >= _CACHE_SIZE:
                self._covering.clear()
            self._covering[key] = found
        return found

    def try_admit(self, call: ModelCall, now: float) -> Admitted | Waiting:
        """Admit ``call`` now, or queue it (asking again for a queued call re-checks it).

        Raises:
            ProviderLimitExceeded: its token estimate is above a covering
                limit's ``tokens_per_minute``: it could never be admitted.
            InvalidArgument: another call with its id is known.
        """
        known = self._flying.get(call.id) or self._waiting.get(call.id)
        if known is not None and known.call != call:
            raise InvalidArgument(f"a different model call with id {call.id!r} is already known")
        if call.id not in self._flying:
            if known is None:
                self._enqueue(call)
            self._pass(now)
        if call.id in self._flying:
            self._ready.pop(call.id, None)
            return Admitted(call)
        return Waiting(call, self.next_check(now))

    def _enqueue(self, call: ModelCall) -> None:
        """Queue a new call (or let it fly at once when no limit covers it)."""
        states = self._covering_states(call)
        for state in states:
            tpm = state.limit.tokens_per_minute
            if tpm is not None and call.tokens > tpm:
                raise ProviderLimitExceeded(
                    f"a model call of {call.model} estimated at {call.tokens} tokens can never "
                    f"fit the provider limit {state.limit.match!r} of {tpm} tokens per minute; "
                    f"shorten the prompt, lower max_tokens or raise tokens_per_minute",
                    match=state.limit.match,
                    limit=tpm,
                    value=call.tokens,
                )
        entry = _Entry(call, states)
        if not states:
            self._flying[call.id] = entry
            return
        self._waiting[call.id] = entry
        self._queue.push(call.tree, call.id, entry)
        for state in states:
            state.waiting += 1

    def admit_waiting(self, now: float) -> list[ModelCall]:
        """Admit the waiting calls that fit at ``now``; return every call admitted since the
        last time this was asked (by this pass or by another call's :meth:`try_admit`)."""
        self._pass(now)
        ready = list(self._ready.values())
        self._ready.clear()
        return ready

    def _pass(self, now: float) -> None:
        """One pass over the waiting calls, the fairest tree first, admitting what fits."""
        queue = self._queue
        blocked: set[int] = set()  # ids of the limits a waiting call did not fit
        skipped: set[str] = set()
        heap = [(*queue.rank(tree), tree) for tree in queue.trees()]
        heapq.heapify(heap)
        while heap:
            *_, tree = heapq.heappop(heap)
            chosen = None
            for key, entry in queue.calls(tree):
                if key in skipped:
                    continue
                if not self._fits(entry, now, blocked):
                    skipped.add(key)
                    continue
                chosen = entry
                break
            if chosen is None:
                continue
            self._admit(chosen, now)
            if tree in queue:
                heapq.heappush(heap, (*queue.rank(tree), tree))

    def _fits(self, entry: _Entry, now: float, blocked: set[int]) -> bool:
        """Whether ``entry`` fits every limit now; mark the limits it does not fit."""
        fits = True
        for state in entry.states:
            if id(state) in blocked:
                fits = False
            elif not state.fits(entry.call.tokens, now):
                blocked.add(id(state))
                fits = False
        return fits

    def _admit(self, entry: _Entry, now: float) -> None:
        call = entry.call
        self._queue.served(call.tree, call.id, call.weight)
        del self._waiting[call.id]
        slots = []
        for state in entry.states:
            state.waiting -= 1
            slots.append(state.take(call.tokens, now, self._rng))
        entry.slots = tuple(slots)
        entry.admitted_at = now
        entry.epochs = tuple(state.level.epoch for state in entry.states)
        self._flying[call.id] = entry
        self._ready[call.id] = call

    def next_check(self, now: float) -> float | None:
        """When a waiting call may next fit without a release (None: none waits on time)."""
        best: float | None = None
        for entry in self._queue:
            at: float | None = now
            for state in entry.states:
                ready = state.ready_at(entry.call.tokens, now)
                if ready is None:
                    at = None
                    break
                at = max(at, ready) if at is not None else ready
            if at is not None and at > now and (best is None or at < best):
                best = at
        return best

    def cancel(self, call_id: str) -> bool:
        """Take a waiting call out (its turn was interrupted); return whether it was waiting."""
        entry = self._waiting.pop(call_id, None)
        if entry is None:
            return False
        self._queue.remove(entry.call.tree, call_id)
        for state in entry.states:
            state.waiting -= 1
        return True

    def release(
        self,
        call: ModelCall | str,
        usage: Usage | None,
        now: float,
        status: int | None = None,
        retry_after: float | None = None,
        stated: StatedLimits | None = None,
    ) -> BackOff | None:
        """An admitted call ended at ``now``: give back what it held, learn from how it ended.

        ``usage`` (what its response reported) replaces its token estimate in
        the windows; without it a call answered 429 spent no tokens and any
        other (a timeout, an abandoned call) spent its estimate. ``status``
        2xx raises the adaptive levels in use; 429 takes the call out of
        every learned rate's window (the provider did not count it), backs
        off the call's most specific limit (``retry_after``: the provider's
        seconds; a learned rate may be set) and returns what that did;
        anything else (None: no HTTP answer) neither. ``stated`` is what the
        answer's headers state about the provider's limits: the call's most
        specific limit follows it (:meth:`LimitState.state`) and a 429 it
        shows was not a rate's lowers only that limit's level.

        Raises:
            InvalidArgument: no call with that id is in flight.
        """
        call_id = call if isinstance(call, str) else call.id
        entry = self._flying.pop(call_id, None)
        if entry is None:
            raise InvalidArgument(f"no model call {call_id!r} is in flight; release it once")
        self._ready.pop(call_id, None)
        estimate = entry.call.tokens
        if usage is not None:
            spent = usage.prompt_tokens + usage.completion_tokens
        else:
            spent = 0 if status == 429 else estimate
        busy = [state.busy() for state in entry.states]
        in_flight = [state.in_flight for state in entry.states]
        for state in entry.states:
            state.give_back(estimate, spent, now, refused=status == 429)
        if stated is not None and entry.states:
            entry.states[0].state(stated, now)
        if status is not None and 200 <= status < 300:
            for state, was_busy in zip(entry.states, busy, strict=True):
                state.succeeded(was_busy, now - entry.admitted_at)
        if status != 429 or not entry.states:
            return None
        for state, slot in zip(entry.states, entry.slots, strict=True):
            if state.learned is not None and slot is not None:
                state.learned.refused(slot, estimate)  # the provider did not count it
        return entry.states[0].back_off(
            retry_after, now, in_flight[0], entry.epochs[0], self._rng, estimate, stated
        )

    def on_rate_limited(
        self, limit: ProviderLimit | str, retry_after: float | None, now: float
    ) -> BackOff:
        """A provider rate-limited ``limit`` (one of these limits, or its match) at ``now``.

        For a 429 not tied to a call admitted here (another process's, a
        shard's report): the level is lowered and the limit closed for
        ``retry_after`` seconds, as :meth:`release` does for a call.

        Raises:
            InvalidLimits: ``limit`` is not one of the limits in force.
        """
        match = normalise_match(limit.match if isinstance(limit, ProviderLimit) else limit)
        state = self._states.get(match)
        if state is None:
            raise InvalidLimits(
                f"no provider limit {match!r} is in force (limits: "
                f"{', '.join(self._states) or 'none'})"
            )
        return state.back_off(retry_after, now, state.in_flight, None, self._rng)

    def snapshot(self, now: float) -> tuple[LimitSnapshot, ...]:
        """Every limit's figures at ``now``, in the order the limits were given."""
        return tuple(state.snapshot(now) for state in self._states.values())

    @property
    def waiting(self) -> int:
        """The calls waiting for admission."""
        return len(self._waiting)

    @property
    def in_flight(self) -> int:
        """The admitted calls not yet released."""
        return len(self._flying)

    def flying(self, call_id: str) -> bool:
        """Whether the call ``call_id`` is admitted and not yet released."""
        return call_id in self._flying
