"""Publishing transitions to subscribers, in commit order, off the writer's thread."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence

from retinue.protocol.messages import Event

__all__ = ["EventBus", "Subscriber"]

Subscriber = Callable[[Event], None]
log = logging.getLogger("retinue.events")
_STOP = object()


class EventBus:
    """Delivers events to subscribers on one dispatcher thread, in publish order."""

    def __init__(self) -> None:
        """Create a bus; its thread starts with the first subscriber."""
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(event)`` for every later event; return an unsubscribe function."""
        with self._lock:
            self._subscribers = [*self._subscribers, callback]
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="retinue-events", daemon=True
                )
                self._thread.start()

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = [s for s in self._subscribers if s is not callback]

        return unsubscribe

    @property
    def active(self) -> bool:
        """True while anyone listens (publishers may skip building events otherwise)."""
        return bool(self._subscribers)

    def publish(self, events: Sequence[Event]) -> None:
        """Queue events for delivery (thread-safe, never blocks)."""
        if events and self._subscribers:
            self._queue.put(events)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            assert isinstance(item, Sequence)
            for event in item:
                for callback in self._subscribers:
                    try:
                        callback(event)
                    except Exception:
                        log.exception("event subscriber %r failed", callback)

    def close(self) -> None:
        """Deliver what is queued, then stop the dispatcher thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(timeout=10)
