"""Publishing transitions to subscribers, in commit order, off the writer's thread.

Every subscriber has its own bounded queue and its own dispatcher thread, so
a slow or blocked subscriber delays nobody: not the store's writer (which
publishes), not the supervisor, not the other subscribers. When a
subscriber's queue holds ``capacity`` events, each new event pushes out its
oldest one; the subscriber is then told how many it lost with one
:class:`~retinue.protocol.messages.EventsDropped` event, delivered where the
gap is. Memory per subscriber is therefore bounded whatever the subscriber does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from retinue.protocol import paths
from retinue.protocol.limits import Limits
from retinue.protocol.messages import Event, EventsDropped

__all__ = ["EventBus", "Subscriber"]

Subscriber = Callable[[Event], None]
log = logging.getLogger("retinue.events")
_BATCH = 256  # events taken off a queue at once (bounds what is in flight too)


class _Subscription:
    """One subscriber's bounded queue and the thread that feeds it."""

    def __init__(self, callback: Subscriber, capacity: int) -> None:
        self.callback = callback
        self.capacity = capacity
        self.pending: deque[Event] = deque()
        self.dropped = 0  # dropped since the last notice
        self.total_dropped = 0
        self.cond = threading.Condition(threading.Lock())
        self.busy = False  # a batch is being delivered
        self.stopped = False  # unsubscribed: deliver nothing more
        self.draining = False  # closing: deliver what is queued, then stop
        self.thread = threading.Thread(target=self._run, name="retinue-events", daemon=True)

    def offer(self, events: Sequence[Event]) -> None:
        """Queue events, pushing out the oldest beyond capacity (never blocks for long)."""
        with self.cond:
            if self.stopped or self.draining:
                return
            pending = self.pending
            pending.extend(events)
            excess = len(pending) - self.capacity
            if excess > 0:
                for _ in range(excess):
                    pending.popleft()
                self.dropped += excess
                self.total_dropped += excess
            self.cond.notify()

    def _take(self) -> list[Event] | None:
        """Wait for the next batch (a drop notice first, if any); None means stop."""
        with self.cond:
            while not (self.pending or self.dropped or self.stopped or self.draining):
                self.cond.wait()
            if self.stopped:
                return None
            batch: list[Event] = []
            if self.dropped:
                batch.append(
                    EventsDropped(
                        agent_id="", path=paths.ROOT, at=time.time(), dropped=self.dropped
                    )
                )
                self.dropped = 0
            pending = self.pending
            for _ in range(min(_BATCH, len(pending))):
                batch.append(pending.popleft())
            self.busy = bool(batch)
            return batch or None  # empty here means draining with nothing left

    def _run(self) -> None:
        callback = self.callback
        while True:
            batch = self._take()
            if batch is None:
                return
            for event in batch:
                if self.stopped:
                    return
                try:
                    callback(event)
                except Exception:
                    log.exception("event subscriber %r failed", callback)
            with self.cond:
                self.busy = False
                self.cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until everything queued was delivered; False if ``timeout`` ran out first."""
        with self.cond:
            return self.cond.wait_for(
                lambda: self.stopped or not (self.pending or self.dropped or self.busy), timeout
            )

    def stop(self, *, drain: bool) -> None:
        """Stop the thread: at once, or (``drain``) once what is queued is delivered."""
        with self.cond:
            if drain:
                self.draining = True
            else:
                self.stopped = True
                self.pending.clear()
            self.cond.notify()


class EventBus:
    """Delivers events to each subscriber on its own thread, in publish order, bounded."""

    def __init__(self, capacity: int | None = None) -> None:
        """Create a bus whose subscribers each queue at most ``capacity`` events.

        ``capacity`` defaults to ``Limits().event_queue_capacity``.

        Raises:
            ValueError: ``capacity`` is not positive.
        """
        if capacity is None:
            capacity = Limits().event_queue_capacity
        if capacity <= 0:
            raise ValueError("an event queue capacity must be positive")
        self.capacity = capacity
        self._subscriptions: list[_Subscription] = []
        self._lock = threading.Lock()
        self._closed = False

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(event)`` for every later event; return an unsubscribe function.

        After :meth:`close` nothing is delivered and the function does nothing.
        """
        subscription = _Subscription(callback, self.capacity)
        with self._lock:
            if self._closed:
                return lambda: None
            self._subscriptions = [*self._subscriptions, subscription]
            subscription.thread.start()

        def unsubscribe() -> None:
            with self._lock:
                self._subscriptions = [s for s in self._subscriptions if s is not subscription]
            subscription.stop(drain=False)

        return unsubscribe

    @property
    def active(self) -> bool:
        """True while anyone listens (publishers may skip building events otherwise)."""
        return bool(self._subscriptions)

    @property
    def dropped(self) -> int:
        """Events dropped so far for subscribers that fell behind (all of them, summed)."""
        return sum(s.total_dropped for s in self._subscriptions)

    def publish(self, events: Sequence[Event]) -> None:
        """Queue events for every subscriber (thread-safe; never waits on a subscriber)."""
        if events:
            for subscription in self._subscriptions:
                subscription.offer(events)

    def flush(self, timeout: float) -> bool:
        """Wait until every subscriber has been handed every event published so far.

        A subscriber's own thread does not wait for itself. Returns False if
        ``timeout`` ran out first.
        """
        deadline = time.monotonic() + timeout
        for subscription in self._subscriptions:
            if subscription.thread is threading.current_thread():
                continue
            if not subscription.flush(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (waiting at most ``timeout`` s in all), then stop."""
        with self._lock:
            self._closed = True
            subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            subscription.stop(drain=True)
        deadline = time.monotonic() + timeout
        for subscription in subscriptions:
            if subscription.thread is not threading.current_thread():
                subscription.thread.join(timeout=max(0.0, deadline - time.monotonic()))
