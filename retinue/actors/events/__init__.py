"""Events: the bus every committed transition publishes to, turns' live watches, and streams.

``EventBus`` (a bounded queue and thread per subscriber), the ``Observer``
that gives each turn its watch (live tool and model calls, and the tracing
hook ``Spans``), and the pull streams over the bus (``EventStream``,
``AsyncEventStream``).

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.actors.events._bus import EventBus, Subscriber
from retinue.actors.events._observer import (
    QUIET,
    ModelCallWatch,
    Observer,
    Spans,
    TurnWatch,
    Watched,
)
from retinue.actors.events._streams import AsyncEventStream, EventStream, stream_root

__all__ = [
    "QUIET",
    "AsyncEventStream",
    "EventBus",
    "EventStream",
    "ModelCallWatch",
    "Observer",
    "Spans",
    "Subscriber",
    "TurnWatch",
    "Watched",
    "stream_root",
]
