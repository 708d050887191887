"""A shard's event streams: pull streams on its runtime, served to faces by long-poll takes.

A face opens a stream under an id it makes (:class:`~retinue.cluster.eventwire.OpenStream`,
idempotent), then takes its events in batches
(:class:`~retinue.cluster.eventwire.TakeEvents`: at most ``max_events``,
waiting at most ``wait_s`` for the first) and closes it when its consumer
leaves. Each stream is an ordinary ``Runtime.stream_async`` (bounded by
``Limits.event_queue_capacity``; one that falls behind gets ``EventsDropped``).
A stream no take has reached for ``stream_idle_s`` is closed by the shard
(its face is gone: no leak if a driver dies); at most ``max_streams`` are open
at once. A take of an id the shard does not know (it restarted, or closed the
stream as idle) answers ``unknown``, and the face reopens it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from retinue.actors.events import AsyncEventStream
from retinue.cluster.eventwire import EventBatch
from retinue.cluster.ids import map_event
from retinue.errors import LimitExceeded
from retinue.runtime import Runtime

__all__ = ["ShardStreams"]


@dataclass
class _Open:
    """One open stream: its iterator, when a take last reached it, takes running now."""

    stream: AsyncEventStream
    at: float
    busy: int = 0


class ShardStreams:
    """The event streams faces opened on one shard (thread-safe: the sweeper closes idle ones)."""

    def __init__(self, rt: Runtime, shard: int, *, idle_s: float, max_streams: int) -> None:
        """Serve streams of ``rt`` (shard ``shard``): close idle ones after ``idle_s``."""
        self.rt = rt
        self.shard = shard
        self.idle_s = idle_s
        self.max_streams = max_streams
        self._streams: dict[str, _Open] = {}
        self._lock = threading.Lock()

    def open(self, stream_id: str, ref: str | None) -> None:
        """Open ``stream_id`` on ``ref``'s subtree (None: every agent); idempotent.

        Raises:
            LimitExceeded: ``max_streams`` streams are open on this shard.
            RuntimeClosed, InvalidAgentPath, ArgumentTypeError: as ``Runtime.stream``.
        """
        with self._lock:
            known = self._streams.get(stream_id)
            if known is not None:
                known.at = time.monotonic()
                return
            if len(self._streams) >= self.max_streams:
                raise LimitExceeded(
                    f"shard {self.shard} has {len(self._streams)} event streams open; max is "
                    f"{self.max_streams} (Cluster.open(max_streams=...)); close streams you "
                    "left (break, close(), a with block)",
                    limit=self.max_streams,
                    value=len(self._streams),
                )
        stream = self.rt.stream_async(ref)
        with self._lock:
            self._streams[stream_id] = _Open(stream, time.monotonic())

    async def take(self, stream_id: str, max_events: int, wait_s: float) -> EventBatch:
        """Take up to ``max_events`` events of ``stream_id``, waiting up to ``wait_s``."""
        with self._lock:
            entry = self._streams.get(stream_id)
            if entry is None:
                return EventBatch(unknown=True)
            entry.busy += 1
            entry.at = time.monotonic()
        try:
            events = await entry.stream.take(max_events, wait_s)
        finally:
            with self._lock:
                entry.busy -= 1
                entry.at = time.monotonic()
        if events is None:
            self.close(stream_id)
            return EventBatch(ended=True)
        return EventBatch(events=tuple(map_event(self.shard, e) for e in events))

    def close(self, stream_id: str) -> None:
        """Close ``stream_id`` (a waiting take returns, ended); an unknown id is a no-op."""
        with self._lock:
            entry = self._streams.pop(stream_id, None)
        if entry is not None:
            entry.stream.close()

    def sweep(self) -> int:
        """Close the streams no take has reached for ``idle_s``; return how many."""
        now = time.monotonic()
        with self._lock:
            idle = [
                sid
                for sid, entry in self._streams.items()
                if not entry.busy and now - entry.at > self.idle_s
            ]
            entries = [self._streams.pop(sid) for sid in idle]
        for entry in entries:
            entry.stream.close()
        return len(entries)

    def __len__(self) -> int:
        """Return how many streams are open."""
        with self._lock:
            return len(self._streams)
