"""The host's view of the runtime's events: every committed transition, in commit order.

:class:`EventCalls` holds ``subscribe``: a callback called on the event
bus's dispatcher thread for every event the supervisor publishes.
"""

from __future__ import annotations

from collections.abc import Callable

from retinue.actors.channel import RuntimeState
from retinue.actors.events import Subscriber
from retinue.errors import RuntimeClosed
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
