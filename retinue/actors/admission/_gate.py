"""The runtime's gate in front of the providers: model calls admitted under provider limits.

:class:`ProviderGate` drives the pure
:class:`~retinue.protocol.provider_limits.AdmissionController` for one
runtime. One lock guards the controller; after every operation (a call asks,
ends, or gives up) the calls the controller admits are let go, and a timer on
the event loop at :meth:`~retinue.protocol.provider_limits.AdmissionController.next_check`
lets go those a per-minute window or a ``Retry-After`` held. A call that
must wait awaits a future on its event loop: it holds no thread and nothing a
model call awaiting its answer does not already hold, and an interrupt
(its task cancelled) takes it out of the queue. A 429 that lowers a limit's
level or closes it publishes :class:`~retinue.protocol.messages.ProviderBackoff`.

:class:`Admission` is what the LLM layer asks of a gate; the cluster's gate
(leases from one Ray actor, :mod:`retinue.cluster.limits`) is another.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

import msgspec

from retinue.actors.events import EventBus
from retinue.protocol.messages import ProviderBackoff, Usage
from retinue.protocol.provider_limits import (
    WINDOW_S,
    AdmissionController,
    Admitted,
    BackOff,
    LimitSnapshot,
    ModelCall,
    ProviderLimit,
    StatedLimits,
    TokenEstimator,
)

__all__ = [
    "Admission",
    "CallOwner",
    "ProviderGate",
    "SharedCapacity",
    "backoff_event",
    "resolve",
    "wall_clock",
]


class CallOwner(msgspec.Struct, frozen=True, gc=False):
    """Who makes a model call: its agent (id and path) and its model, for events and reports.

    Three strings: never part of a reference cycle, so out of the cyclic collector.
    """

    agent_id: str
    path: str
    model: str


class Admission(Protocol):
    """A runtime's admission of model calls under provider limits (what the LLM layer asks)."""

    estimator: TokenEstimator

    def covers(self, model: str, api_base: str | None, provider: str | None) -> bool:
        """Whether any limit covers calls of ``model`` at ``api_base``."""
        ...

    async def admit(self, call: ModelCall, owner: CallOwner) -> None:
        """Return once ``call`` is admitted (cancellation takes it out of the queue).

        Raises:
            ProviderLimitExceeded: its estimate can never fit a covering limit.
        """
        ...

    def release(
        self,
        call_id: str,
        usage: Usage | None,
        status: int | None = None,
        retry_after: float | None = None,
        stated: StatedLimits | None = None,
    ) -> None:
        """An admitted call ended (see ``AdmissionController.release``)."""
        ...

    def snapshot(self) -> tuple[LimitSnapshot, ...]:
        """Every limit's figures now (``closed_until`` as wall-clock time)."""
        ...

    def waiting(self) -> tuple[str, ...]:
        """The paths of the agents whose model call waits for admission, sorted."""
        ...


class SharedCapacity(Protocol):
    """Capacity a gate shares with other processes (a cluster's lease,
    :class:`retinue.cluster.limits.LeasedCapacity`): asked once the gate admitted a call."""

    async def acquire(self, call_id: str, matches: tuple[str, ...], tokens: int) -> None:
        """Return once call ``call_id`` (covered by the limits ``matches``, estimated at
        ``tokens``) has its share; cancelled, it takes nothing."""
        ...

    def end(self, call_id: str, tokens: int | None) -> None:
        """Call ``call_id`` ended, using ``tokens`` (None: no answer)."""
        ...


def backoff_event(
    backoff: BackOff, owner: CallOwner, rate_limited: int, now: float
) -> ProviderBackoff:
    """The event of a back-off ``backoff`` caused by ``owner``'s call, at monotonic ``now``."""
    until = backoff.until
    return ProviderBackoff(
        agent_id=owner.agent_id,
        path=owner.path,
        at=time.time(),
        model=owner.model,
        match=backoff.match,
        lowered=backoff.lowered,
        level_before=backoff.level_before,
        level=backoff.level,
        retry_after_s=None if until is None else round(max(0.0, until - now), 3),
        rate_limited=rate_limited,
    )


def wall_clock(snapshots: Iterable[LimitSnapshot], now: float) -> tuple[LimitSnapshot, ...]:
    """``snapshots`` taken at monotonic ``now``, their ``closed_until`` as wall-clock time."""
    wall = time.time()
    return tuple(
        s
        if s.closed_until is None
        else msgspec.structs.replace(s, closed_until=round(wall + s.closed_until - now, 3))
        for s in snapshots
    )


def resolve(future: asyncio.Future[None]) -> None:
    """Let the call awaiting ``future`` go, from any thread (once)."""
    loop = future.get_loop()
    if _on(loop):
        if not future.done():
            future.set_result(None)
        return

    def done() -> None:
        if not future.done():
            future.set_result(None)

    with contextlib.suppress(RuntimeError):  # its loop closed: nobody awaits it any more
        loop.call_soon_threadsafe(done)


class ProviderGate:
    """Admission of one runtime's model calls under its provider limits; thread-safe.

    ``window_s`` is the span of the per-minute windows (``Limits.provider_window_s``);
    ``bus`` gets the back-off events; ``clock`` is monotonic seconds.

    Raises:
        InvalidLimits: a limit is not a ProviderLimit, a match is named twice,
            or ``window_s`` is not a positive number.
    """

    def __init__(
        self,
        limits: Iterable[ProviderLimit],
        *,
        window_s: float = WINDOW_S,
        bus: EventBus | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        max_agents: int = 10_000,
    ) -> None:
        """A gate over ``limits``, open and empty."""
        self._controller = AdmissionController(limits, rng or random.Random(), window_s)
        self.estimator = TokenEstimator(max_agents=max_agents)
        self._bus = bus
        self._clock = clock
        self._lock = threading.Lock()
        self._futures: dict[str, asyncio.Future[None]] = {}
        self._owners: dict[str, CallOwner] = {}  # calls waiting or in flight
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._shared: SharedCapacity | None = None

    def share(self, capacity: SharedCapacity | None) -> None:
        """Ask ``capacity`` too for every call admitted from now on (None: no longer)."""
        self._shared = capacity

    @property
    def limits(self) -> tuple[ProviderLimit, ...]:
        """The limits in force."""
        return self._controller.limits

    def covers(self, model: str, api_base: str | None, provider: str | None) -> bool:
        """Whether any limit covers calls of ``model`` at ``api_base`` (``provider``: litellm's)."""
        probe = ModelCall("probe", "probe", model, api_base, provider=provider)
        with self._lock:
            return bool(self._controller.matching(probe))

    async def admit(self, call: ModelCall, owner: CallOwner) -> None:
        """Return once ``call`` is admitted; wait (fairly, on this loop) until it fits.

        Cancelled while it waits (an interrupt), the call leaves the queue; if
        it was admitted just then, it is released unused. Under a shared
        capacity (:meth:`share`) an admitted call then waits for its share too.

        Raises:
            ProviderLimitExceeded: its estimate can never fit a covering limit.
            InvalidArgument: a different call with its id is known.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            self._loop = loop
            now = self._clock()
            answer = self._controller.try_admit(call, now)
            self._owners[call.id] = owner
            future: asyncio.Future[None] | None = None
            if not isinstance(answer, Admitted):
                future = self._futures[call.id] = loop.create_future()
            self._let_go(now)
            shared = self._shared
            matches = () if shared is None else self._controller.matching(call)
        try:
            if future is not None:
                await future
            if shared is not None:
                await shared.acquire(call.id, tuple(m.match for m in matches), call.tokens)
        except BaseException:
            self._give_up(call.id)
            raise

    def _give_up(self, call_id: str) -> None:
        """A waiting call's task was cancelled: take it out, or release it if just admitted."""
        with self._lock:
            now = self._clock()
            self._futures.pop(call_id, None)
            if not self._controller.cancel(call_id) and self._controller.flying(call_id):
                self._controller.release(call_id, None, now)
            self._owners.pop(call_id, None)
            self._let_go(now)

    def release(
        self,
        call_id: str,
        usage: Usage | None,
        status: int | None = None,
        retry_after: float | None = None,
        stated: StatedLimits | None = None,
    ) -> None:
        """The admitted call ``call_id`` ended: ``usage`` its response's (None: no answer),
        ``status`` its HTTP status (None: no HTTP answer), ``retry_after`` a 429's seconds,
        ``stated`` the rate limits its answer's headers state (None: none).

        A 429 that lowers its limit's level or closes it publishes a
        :class:`~retinue.protocol.messages.ProviderBackoff`.

        Raises:
            InvalidArgument: no call ``call_id`` is in flight.
        """
        with self._lock:
            now = self._clock()
            owner = self._owners.pop(call_id, None)
            backoff = self._controller.release(call_id, usage, now, status, retry_after, stated)
            self._let_go(now)
            rate_limited = self._rate_limited(backoff)
        shared = self._shared
        if shared is not None:
            spent = None if usage is None else usage.prompt_tokens + usage.completion_tokens
            shared.end(call_id, spent)
        if usage is not None and owner is not None:
            self.estimator.observe(owner.agent_id, usage)
        shown = backoff is not None and (backoff.lowered or backoff.until is not None)
        if shown and backoff is not None and owner is not None and self._bus is not None:
            self._bus.publish([backoff_event(backoff, owner, rate_limited, now)])

    def _rate_limited(self, backoff: BackOff | None) -> int:
        """The 429s of ``backoff``'s limit so far (under the lock)."""
        if backoff is None:
            return 0
        for snap in self._controller.snapshot(self._clock()):
            if snap.match == backoff.match:
                return snap.rate_limited
        return 0

    def _let_go(self, now: float) -> None:
        """Let go the calls the controller admits now; arm the timer for the next check
        (under the lock)."""
        for call in self._controller.admit_waiting(now):
            future = self._futures.pop(call.id, None)
            if future is not None:
                resolve(future)
        at = self._controller.next_check(now)
        loop = self._loop
        if at is None or loop is None or loop.is_closed():
            return
        timer = self._timer
        if timer is not None and not timer.cancelled() and self._timer_at <= at:
            return
        if not _on(loop):  # a release from another thread: check again on the loop
            with contextlib.suppress(RuntimeError):  # it closed meanwhile
                loop.call_soon_threadsafe(self._tick)
            return
        if timer is not None:
            timer.cancel()
        self._timer_at = at
        self._timer = loop.call_later(max(0.0, at - now), self._tick)

    def _tick(self) -> None:
        """The timer: let go what fits now."""
        with self._lock:
            self._timer = None
            self._let_go(self._clock())

    def snapshot(self) -> tuple[LimitSnapshot, ...]:
        """Every limit's figures now, in the order given; ``closed_until`` is wall-clock time."""
        with self._lock:
            now = self._clock()
            return wall_clock(self._controller.snapshot(now), now)

    def waiting(self) -> tuple[str, ...]:
        """The paths of the agents whose model call waits for admission, sorted."""
        with self._lock:
            return tuple(sorted(o.path for cid, o in self._owners.items() if cid in self._futures))

    def close(self) -> None:
        """Stop the timer (the runtime closes); waiting calls are cancelled with their turns."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


def _on(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this thread runs ``loop``."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
