"""The cluster face's event streams: ``stream`` and ``stream_async``, as a face mixin.

:class:`StreamFace` is mixed into :class:`~retinue.cluster.face.Cluster`
with the names and semantics of ``Runtime.stream`` and ``Runtime.stream_async``;
the iterators and their pumps are in :mod:`retinue.cluster.streaming`.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from typing import Any, TypeVar

from retinue.cluster.router import Router
from retinue.cluster.streaming import (
    AsyncClusterStream,
    ClusterStream,
    Part,
    StreamBounds,
    close_op,
    open_op,
)
from retinue.cluster.transport import Transport
from retinue.errors import ArgumentTypeError, InvalidArgument
from retinue.protocol.ids import new_id

__all__ = ["StreamFace", "stream_bounds"]

S = TypeVar("S", ClusterStream, AsyncClusterStream)


def stream_bounds(poll_s: Any, batch: Any, idle_s: Any, max_streams: Any) -> StreamBounds:
    """Check ``Cluster.open``'s stream bounds; return the face's.

    Raises:
        ArgumentTypeError: a bound is not a number (an int for the counts).
        InvalidArgument: a bound is not positive, or ``idle_s`` is not above ``poll_s``.
    """
    for name, value in (("stream_poll_s", poll_s), ("stream_idle_s", idle_s)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ArgumentTypeError(f"{name} must be a number, not {type(value).__name__}")
        if not (math.isfinite(value) and value > 0):
            raise InvalidArgument(f"{name} must be a positive number of seconds, not {value!r}")
    for name, value in (("stream_batch", batch), ("max_streams", max_streams)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentTypeError(f"{name} must be an int, not {type(value).__name__}")
        if value < 1:
            raise InvalidArgument(f"{name} must be at least 1, not {value}")
    if idle_s <= poll_s:
        raise InvalidArgument(
            f"stream_idle_s ({idle_s:g}) must be above stream_poll_s ({poll_s:g}): a shard "
            "closes a stream no take reached within stream_idle_s"
        )
    return StreamBounds(poll_s=float(poll_s), batch=batch)


class StreamFace:
    """``stream`` and ``stream_async`` over the shards; the face closes them at shutdown."""

    _stream_bounds = StreamBounds(poll_s=5.0, batch=1_000)

    def _ops(self) -> tuple[Transport, Router]:  # pragma: no cover - the face's
        raise NotImplementedError

    def stream(self, ref: str | None = None) -> ClusterStream:
        """Like ``Runtime.stream``: iterate over the events of ``ref``'s subtree as they happen
        (None: every shard's), merged as they come, each shard's in order.

        Ids in the events are cluster ids. A shard that restarted (or that
        closed the stream after ``stream_idle_s`` without a take) yields one
        ``EventsDropped(dropped=0)`` where the gap is, and the stream goes on.
        Ends when the loop is left (``break``, ``close()``, a ``with`` block),
        at :meth:`shutdown`, or when every shard it listens on closes.

        Raises:
            RuntimeClosed: the cluster (or a shard's runtime) is closed.
            ArgumentTypeError, InvalidAgentPath, UnknownAgent: a bad ``ref``.
            LimitExceeded: a shard has ``max_streams`` streams open.
            ShardUnavailable: a shard did not answer within ``retry_s``.
        """
        return self._kept(ClusterStream(self._opened(ref)))

    def stream_async(self, ref: str | None = None) -> AsyncClusterStream:
        """Like :meth:`stream`, as an async iterator that never blocks the event loop while
        it waits (opening it waits for the shards' answers, one round trip)."""
        return self._kept(AsyncClusterStream(self._opened(ref)))

    def _opened(self, ref: str | None) -> Part:
        """Open a stream of ``ref`` on the shards it listens on."""
        transport, router = self._ops()
        targets = transport.run(router.stream_targets(ref))
        part = Part(transport, new_id(), targets, self._stream_bounds)
        try:
            transport.run(open_op(part.stream_id, targets))
        except BaseException:
            with contextlib.suppress(Exception):
                transport.run(close_op(part.stream_id, targets))
            raise
        return part

    def _kept(self, stream: S) -> S:
        streams = self.__dict__.setdefault("_open_streams", weakref.WeakSet())
        streams.add(stream)
        return stream

    def _close_streams(self) -> None:
        """Close every stream this face opened and still has (at shutdown)."""
        for stream in list(self.__dict__.get("_open_streams", ())):
            stream.close()
