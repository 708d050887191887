"""The cluster face's event streams: ``stream`` and ``stream_async`` over the shards.

``cluster.stream(ref=None)`` has the semantics of ``Runtime.stream``: the
events of ``ref``'s subtree (None: every agent) as they happen, from the
moment it is opened. It opens one pull stream on each shard it listens on
(:mod:`retinue.cluster._shardstreams`; an id: its shard; a path: its
top-level name's shard, or every shard while that name is not placed) under
one stream id, and polls each with long-poll takes
(:class:`~retinue.cluster.eventwire.TakeEvents`): one pump per shard (a
thread for :class:`ClusterStream`, a task for :class:`AsyncClusterStream`)
hands its batches over as they come, so the shards' events are merged as
they arrive and each shard's keep their order. A pump takes again once its
last batch was handed over: at most two batches per shard are held here,
and a consumer that falls behind lets its shards' queues fill (bounded by
``Limits.event_queue_capacity``, then ``EventsDropped`` there).

A take that fails (the shard's process died; its reply was lost) or finds
its stream unknown (the shard restarted, or closed it as idle) reopens the
stream on that shard and yields one ``EventsDropped(dropped=0)`` where the
gap is (0: how many were lost is unknown); one the face itself closed
meanwhile is never reopened behind its close. A shard whose runtime closed ends
its part; the stream ends when every part has. Leaving the loop
(``break``, ``close()``, ``with``, ``aclose``) or shutting the face down
closes the shards' streams; a stream dropped without that stops polling and
its shards close it after ``stream_idle_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from retinue.cluster import wire as w
from retinue.cluster._transport import Many, One, Op, Transport
from retinue.cluster.eventwire import CloseStream, EventBatch, OpenStream, TakeEvents
from retinue.errors import RuntimeClosed, ShardUnavailable
from retinue.protocol import paths
from retinue.protocol.messages import Event, EventsDropped

__all__ = [
    "AsyncClusterStream",
    "ClusterStream",
    "Part",
    "StreamBounds",
    "close_op",
    "open_op",
    "poll_op",
]

Targets = Sequence[tuple[int, str | None]]
_END = None  # a part ended


@dataclass(frozen=True)
class StreamBounds:
    """A face's stream bounds: a take waits at most ``poll_s`` and returns at most ``batch``."""

    poll_s: float
    batch: int


def open_op(stream_id: str, targets: Targets) -> Op[None]:
    """Open ``stream_id`` on every target shard (idempotent: a retry opens nothing twice)."""
    replies = yield Many(
        tuple(
            One(k, w.encode_call(OpenStream(stream_id, ref)), "open_stream") for k, ref in targets
        )
    )
    for raw in replies:
        w.decode_reply(raw, type(None))


def close_op(stream_id: str, targets: Targets) -> Op[None]:
    """Close ``stream_id`` on the target shards; one that does not answer closes it when idle."""
    for shard, _ in targets:
        with contextlib.suppress(ShardUnavailable):
            yield One(shard, w.encode_call(CloseStream(stream_id)), "close_stream", retry=False)


def poll_op(
    shard: int,
    stream_id: str,
    ref: str | None,
    bounds: StreamBounds,
    closed: Callable[[], bool],
) -> Op[tuple[list[Event], bool]]:
    """Take the next batch of one shard's part; return ``(events, ended)``.

    A failed take or an unknown stream reopens it and answers one
    ``EventsDropped(dropped=0)`` for the gap; a shard whose runtime closed ends.
    A stream ``closed`` says its face closed is never reopened (its take may
    have found it unknown because the face's close reached the shard first; the
    face marks itself closed before it sends the close): the poll answers no
    events, and the pump, seeing the stream closed, closes its shard's part.

    Raises:
        ShardUnavailable: the shard did not come back within ``retry_s``.
    """
    take = TakeEvents(stream_id, bounds.batch, bounds.poll_s)
    try:
        raw = yield One(
            shard, w.encode_call(take), "take_events", timeout_s=bounds.poll_s, retry=False
        )
        batch = w.decode_reply(raw, EventBatch)
    except ShardUnavailable:
        batch = EventBatch(unknown=True)  # its reply, and the events it took, may be lost
    if not batch.unknown:
        return list(batch.events), batch.ended
    if closed():
        return [], False
    try:
        reopen = yield One(shard, w.encode_call(OpenStream(stream_id, ref)), "open_stream")
        w.decode_reply(reopen, type(None))
    except RuntimeClosed:
        return [], True
    return [EventsDropped(agent_id="", path=paths.ROOT, at=time.time(), dropped=0)], False


class Part:
    """What a face's stream and its pumps share (the pumps hold this, not the stream)."""

    def __init__(
        self, transport: Transport, stream_id: str, targets: Targets, bounds: StreamBounds
    ) -> None:
        self.transport = transport
        self.stream_id = stream_id
        self.targets = tuple(targets)
        self.bounds = bounds
        self.closed = False
        self.lock = threading.Lock()

    def poll(self, i: int) -> Op[tuple[list[Event], bool]]:
        shard, ref = self.targets[i]
        return poll_op(shard, self.stream_id, ref, self.bounds, self.is_closed)

    def close(self, i: int) -> Op[None]:
        """Close the stream on part ``i``'s shard."""
        return close_op(self.stream_id, self.targets[i : i + 1])

    def is_closed(self) -> bool:
        """True once the stream was closed (its pumps stop; a shard's part is not reopened)."""
        return self.closed

    def mark_closed(self) -> bool:
        """Mark the stream closed; False if it was already."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
            return True


class _Face:
    """What both iterators share: the batch being handed out, the parts still live."""

    def __init__(self, part: Part) -> None:
        self._part = part
        self._batch: deque[Event] = deque()
        self._live = len(part.targets)

    @property
    def stream_id(self) -> str:
        """The id this stream has on its shards."""
        return self._part.stream_id

    def _ended(self) -> bool:
        return self._part.closed or self._live == 0

    def _received(self, item: list[Event] | BaseException | None) -> None:
        """Take in one pump's item: a batch, its part's end, or its failure (raised)."""
        if item is _END:
            self._live -= 1
        elif isinstance(item, BaseException):
            self.close()
            raise item
        else:
            self._batch.extend(item)

    def close(self) -> None:  # pragma: no cover - each iterator has its own
        raise NotImplementedError

    def _close_shards(self) -> None:
        part = self._part
        with contextlib.suppress(Exception):
            part.transport.run(close_op(part.stream_id, part.targets))


class ClusterStream(_Face):
    """A blocking iterator over a cluster's events (see the module docstring)."""

    def __init__(self, part: Part) -> None:
        """Start one pump thread per shard the (opened) stream ``part`` listens on."""
        super().__init__(part)
        self._items: queue.Queue[tuple[int, list[Event] | BaseException | None]] = queue.Queue()
        self._turns = [threading.Event() for _ in part.targets]
        for i in range(len(part.targets)):
            threading.Thread(
                target=_pump,
                args=(part, i, self._items, self._turns[i]),
                daemon=True,
                name="retinue-cluster-stream",
            ).start()

    def __iter__(self) -> Self:
        """Return the stream itself."""
        return self

    def __next__(self) -> Event:
        """Return the next event, waiting for it.

        Raises:
            StopIteration: the stream was closed, the cluster shut down, or every
                shard's runtime closed.
            ShardUnavailable: a shard did not come back within ``retry_s``.
        """
        while not self._batch:
            if self._ended():
                raise StopIteration
            i, item = self._items.get()
            if i < 0:
                continue  # closed from another thread: woken
            self._received(item)
            self._turns[i].set()
        return self._batch.popleft()

    def close(self) -> None:
        """Stop listening and close the shards' streams; the iteration ends (idempotent)."""
        if not self._part.mark_closed():
            return
        self._batch.clear()
        self._wake()
        self._close_shards()

    def _wake(self) -> None:
        for turn in self._turns:
            turn.set()
        self._items.put((-1, None))

    def __del__(self) -> None:
        """A stream dropped without being closed: its pumps close their shards' streams
        after their takes (at most ``stream_poll_s``)."""
        with contextlib.suppress(Exception):
            if self._part.mark_closed():
                self._wake()

    def __enter__(self) -> Self:
        """Return the stream; leaving the block closes it."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the stream."""
        self.close()


def _pump(
    part: Part,
    i: int,
    items: queue.Queue[tuple[int, list[Event] | BaseException | None]],
    turn: threading.Event,
) -> None:
    """Poll part ``i`` and hand its batches over, one at a time, until it ends or closes."""
    while not part.closed:
        try:
            events, ended = part.transport.run(part.poll(i))
        except Exception as exc:
            items.put((i, exc))
            return
        if ended:
            items.put((i, _END))
            return
        if events:
            turn.clear()
            items.put((i, events))
            turn.wait()
    with contextlib.suppress(Exception):  # a stream dropped unclosed: close its shard's
        part.transport.run(part.close(i))


class AsyncClusterStream(_Face):
    """An async iterator over a cluster's events whose pumps never block its event loop."""

    def __init__(self, part: Part) -> None:
        """Pump the (opened) stream ``part`` from the loop of the first ``__anext__``."""
        super().__init__(part)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._items: asyncio.Queue[tuple[int, list[Event] | BaseException | None]] | None = None
        self._turns: list[asyncio.Event] = []
        self._tasks: list[asyncio.Task[None]] = []

    def _start(self) -> asyncio.Queue[tuple[int, list[Event] | BaseException | None]]:
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[tuple[int, list[Event] | BaseException | None]] = asyncio.Queue()
        self._loop, self._items = loop, items
        self._turns = [asyncio.Event() for _ in self._part.targets]
        self._tasks = [
            loop.create_task(_pump_async(self._part, i, items, turn))
            for i, turn in enumerate(self._turns)
        ]
        return items

    def __aiter__(self) -> Self:
        """Return the stream itself."""
        return self

    async def __anext__(self) -> Event:
        """Return the next event, awaiting it.

        Raises:
            StopAsyncIteration: the stream was closed, the cluster shut down, or
                every shard's runtime closed.
            ShardUnavailable: a shard did not come back within ``retry_s``.
        """
        items = self._items if self._items is not None else self._start()
        while not self._batch:
            if self._ended():
                raise StopAsyncIteration
            i, item = await items.get()
            if i < 0:
                continue
            self._received(item)
            self._turns[i].set()
        return self._batch.popleft()

    def _stop_pumps(self) -> None:
        """Cancel the pumps and wake the consumer (on the stream's loop)."""
        for task in self._tasks:
            task.cancel()
        if self._items is not None:
            self._items.put_nowait((-1, None))

    def _stop_from_anywhere(self) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nothing runs
            loop.call_soon_threadsafe(self._stop_pumps)

    def close(self) -> None:
        """Stop listening and close the shards' streams (blocking; idempotent)."""
        if not self._part.mark_closed():
            return
        self._batch.clear()
        self._stop_from_anywhere()
        self._close_shards()

    async def aclose(self) -> None:
        """Stop listening and close the shards' streams, without blocking the loop."""
        if not self._part.mark_closed():
            return
        self._batch.clear()
        self._stop_pumps()
        part = self._part
        with contextlib.suppress(Exception):
            await part.transport.run_async(close_op(part.stream_id, part.targets))

    def __del__(self) -> None:
        """A stream dropped without being closed: its pumps close their shards' streams
        after their takes (at most ``stream_poll_s``)."""
        with contextlib.suppress(Exception):
            if self._part.mark_closed() and self._loop is not None:
                self._loop.call_soon_threadsafe(self._release_pumps)

    def _release_pumps(self) -> None:
        for turn in self._turns:
            turn.set()

    async def __aenter__(self) -> Self:
        """Return the stream; leaving the block closes it."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the stream."""
        await self.aclose()


async def _pump_async(
    part: Part,
    i: int,
    items: asyncio.Queue[tuple[int, list[Event] | BaseException | None]],
    turn: asyncio.Event,
) -> None:
    """Poll part ``i`` on the loop and hand its batches over, one at a time."""
    while not part.closed:
        try:
            events, ended = await part.transport.run_async(part.poll(i))
        except Exception as exc:
            items.put_nowait((i, exc))
            return
        if ended:
            items.put_nowait((i, _END))
            return
        if events:
            turn.clear()
            items.put_nowait((i, events))
            await turn.wait()
    with contextlib.suppress(Exception):  # a stream dropped unclosed: close its shard's
        await part.transport.run_async(part.close(i))
