"""Publishing transitions to subscribers, in commit order, off the writer's thread.

Every subscriber has its own bounded queue and its own dispatcher thread, so
a slow or blocked subscriber delays nobody: not the store's writer (which
publishes), not the supervisor, not the other subscribers. When a
subscriber's queue holds ``capacity`` events, each new event pushes out its
oldest one; the subscriber is then told how many it lost with one
:class:`~retinue.protocol.messages.EventsDropped` event, delivered where the
gap is. Memory per subscriber is therefore bounded whatever the subscriber does.

A pull listener (a stream, :mod:`retinue.actors.events._streams`) is an
:class:`EventQueue` attached with :meth:`EventBus.attach`: the same bound and
drop notice, with no thread; its consumer takes the events.
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

__all__ = ["EventBus", "EventQueue", "Subscriber"]

Subscriber = Callable[[Event], None]
log = logging.getLogger("retinue.events")
_BATCH = 256  # events taken off a queue at once (bounds what is in flight too)


class EventQueue:
    """One listener's bounded queue of events, with its drop count and its end.

    ``accept(event)`` (None: every event) picks what the listener wants, before
    it takes a place. Beyond ``capacity`` each new event pushes out the oldest;
    the next batch taken then starts with one ``EventsDropped`` saying how many
    went. ``on_ready()`` (optional, set by a consumer) is called, outside the
    lock, when the queue goes from empty to not empty and when it ends.
    """

    def __init__(self, capacity: int, accept: Callable[[Event], bool] | None = None) -> None:
        """An empty queue of at most ``capacity`` events, keeping those ``accept`` accepts."""
        self.capacity = capacity
        self.accept = accept
        self.pending: deque[Event] = deque()
        self.dropped = 0  # dropped since the last notice
        self.total_dropped = 0
        self.cond = threading.Condition(threading.Lock())
        self.stopped = False  # unsubscribed: deliver nothing more
        self.draining = False  # closing: deliver what is queued, then stop
        self.on_ready: Callable[[], None] | None = None

    def offer(self, events: Sequence[Event]) -> None:
        """Queue events, pushing out the oldest beyond capacity (never blocks for long)."""
        accept = self.accept
        if accept is not None:
            events = [e for e in events if accept(e)]
            if not events:
                return
        with self.cond:
            if self.stopped or self.draining:
                return
            pending = self.pending
            was_empty = not pending and not self.dropped
            pending.extend(events)
            excess = len(pending) - self.capacity
            if excess > 0:
                for _ in range(excess):
                    pending.popleft()
                self.dropped += excess
                self.total_dropped += excess
            self.cond.notify()
            ready = self.on_ready if was_empty else None
        if ready is not None:
            ready()

    def take_locked(self, limit: int) -> list[Event]:
        """Return the next batch (a drop notice first, if any) of at most ``limit`` events.

        The caller holds :attr:`cond`.
        """
        batch: list[Event] = []
        if self.dropped:
            batch.append(
                EventsDropped(agent_id="", path=paths.ROOT, at=time.time(), dropped=self.dropped)
            )
            self.dropped = 0
        pending = self.pending
        for _ in range(min(limit, len(pending))):
            batch.append(pending.popleft())
        return batch

    def stop(self, *, drain: bool) -> None:
        """End the queue: at once, or (``drain``) once what is queued is taken."""
        with self.cond:
            if drain:
                self.draining = True
            else:
                self.stopped = True
                self.pending.clear()
            self.cond.notify_all()
            ready = self.on_ready
        if ready is not None:
            ready()


class _Subscription(EventQueue):
    """One subscriber's bounded queue and the thread that feeds it."""

    def __init__(self, callback: Subscriber, capacity: int) -> None:
        super().__init__(capacity)
        self.callback = callback
        self.busy = False  # a batch is being delivered
        self.thread = threading.Thread(target=self._run, name="retinue-events", daemon=True)

    def _take(self) -> list[Event] | None:
        """Wait for the next batch (a drop notice first, if any); None means stop."""
        with self.cond:
            while not (self.pending or self.dropped or self.stopped or self.draining):
                self.cond.wait()
            if self.stopped:
                return None
            batch = self.take_locked(_BATCH)
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
        self._subscriptions: list[EventQueue] = []
        # True while anyone listens (publishers may skip building events otherwise): a
        # field kept with the subscriptions, as the supervisor reads it for every command.
        self.active = False
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
            self._listen([*self._subscriptions, subscription])
            subscription.thread.start()

        def unsubscribe() -> None:
            with self._lock:
                self._listen([s for s in self._subscriptions if s is not subscription])
            subscription.stop(drain=False)

        return unsubscribe

    def attach(self, queue: EventQueue) -> Callable[[], None]:
        """Queue every later event in ``queue`` (a pull listener, such as a stream).

        Returns the function that detaches it (and ends it). After :meth:`close`
        the queue is ended at once.
        """
        with self._lock:
            if not self._closed:
                self._listen([*self._subscriptions, queue])
                closed = False
            else:
                closed = True
        if closed:
            queue.stop(drain=True)

        def detach() -> None:
            with self._lock:
                self._listen([s for s in self._subscriptions if s is not queue])
            queue.stop(drain=False)

        return detach

    def _listen(self, subscriptions: list[EventQueue]) -> None:
        """Deliver to ``subscriptions`` from now on (lock held)."""
        self._subscriptions = subscriptions
        self.active = bool(subscriptions)

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
            if not isinstance(subscription, _Subscription):  # a pull listener takes its own
                continue
            if subscription.thread is threading.current_thread():
                continue
            if not subscription.flush(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (waiting at most ``timeout`` s in all), then stop."""
        with self._lock:
            self._closed = True
            subscriptions = self._subscriptions
            self._listen([])
        for subscription in subscriptions:
            subscription.stop(drain=True)
        deadline = time.monotonic() + timeout
        for subscription in subscriptions:
            if not isinstance(subscription, _Subscription):
                continue
            if subscription.thread is not threading.current_thread():
                subscription.thread.join(timeout=max(0.0, deadline - time.monotonic()))
