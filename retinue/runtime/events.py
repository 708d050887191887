"""The host's view of the runtime's events: every committed transition, in commit order.

:class:`EventCalls` holds ``subscribe``: a callback called on the event
bus's dispatcher thread for every event the supervisor publishes.
"""

from __future__ import annotations

from collections.abc import Callable

from retinue.actors.calls import RuntimeState
from retinue.actors.events import AsyncEventStream, EventBus, EventStream, Subscriber, stream_root
from retinue.actors.supervisor import TimingSink
from retinue.actors.system import System
from retinue.errors import RuntimeClosed, StoreReadOnly
from retinue.runtime.calls import Calls

__all__ = ["EventCalls"]


class EventCalls(Calls):
    """Subscriptions to the events of committed transitions."""

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(event)`` for every committed transition; return unsubscribe.

        Events arrive on one dispatcher thread, in commit order.

        Raises:
            RuntimeClosed: the runtime is closed (or closing).
        """
        system = self._system
        if system is None or system.state is not RuntimeState.OPEN:
            raise RuntimeClosed("the runtime is closed; open it again to subscribe")
        return system.bus.subscribe(callback)

    def _attach_timings(self, sink: TimingSink) -> Callable[[], None] | None:
        """Tell ``sink`` how long each store commit and supervisor command takes; return
        detach (None: a read-only runtime, which commits and serves no command).

        Nothing is timed while no sink is attached (see :mod:`retinue.actors.supervisor._timings`).

        Raises:
            RuntimeClosed: the runtime is closed (or closing).
        """
        system = self._system
        if system is None or system.state is not RuntimeState.OPEN:
            raise RuntimeClosed("the runtime is closed; open it again to time it")
        if not isinstance(system, System) or system.timings is None:
            return None
        return system.timings.attach(sink)

    def stream(self, ref: str | None = None) -> EventStream:
        """Iterate over the events of ``ref``'s subtree as they happen (None: every agent).

        ``ref`` is an agent id or a path (absolute, or relative to ``/root``; it
        need not be live yet). Bounded like a subscriber (``event_queue_capacity``;
        one that falls behind gets ``EventsDropped``); ends when the loop is left
        (``break``, ``close()``, a ``with`` block) or the runtime shuts down.

        Raises:
            RuntimeClosed: the runtime is closed. StoreReadOnly: it is read-only
                (a reader has no events). InvalidAgentPath: a bad ``ref``.
        """
        return EventStream(*self._events_of(ref))

    def stream_async(self, ref: str | None = None) -> AsyncEventStream:
        """Like :meth:`stream`, as an async iterator that never blocks the event loop."""
        return AsyncEventStream(*self._events_of(ref))

    def _events_of(self, ref: str | None) -> tuple[EventBus, str | None]:
        """The bus a stream listens on and the root of the subtree it follows."""
        system = self._system
        if system is None or system.state is not RuntimeState.OPEN:
            raise RuntimeClosed("the runtime is closed; open it again to stream its events")
        if not isinstance(system, System):
            raise StoreReadOnly("a read-only runtime has no events; stream from the writer")
        return system.bus, stream_root(system.store, ref)
