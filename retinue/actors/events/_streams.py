"""Live event streams: the events of a subtree (or of every agent) as an iterator.

A stream is a pull listener on the runtime's :class:`~retinue.actors.events.EventBus`:
an :class:`~retinue.actors.events.EventQueue` bounded like a subscriber's
(``Limits.event_queue_capacity``; one that falls behind loses its oldest events
and gets one ``EventsDropped`` where the gap is), with no thread of its own:
the consumer takes the events. It listens from the moment it is opened, and
ends when the consumer leaves it (``break``, :meth:`EventStream.close`,
``aclose``) or when the runtime shuts down (after the events queued before).

:class:`EventStream` is the blocking iterator; :class:`AsyncEventStream` the
async one, which never blocks its event loop: the bus wakes it through
``loop.call_soon_threadsafe`` when events arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Self

import msgspec

from retinue.actors.events._bus import EventBus, EventQueue
from retinue.errors import ArgumentTypeError
from retinue.persistence.store import Store
from retinue.protocol import paths
from retinue.protocol.messages import Event
from retinue.protocol.records import AgentRecord

__all__ = ["AsyncEventStream", "EventStream", "stream_root", "subtree"]

_BATCH = 256  # events taken off the queue at once
_AGENT = msgspec.msgpack.Decoder(AgentRecord)


def subtree(root: str | None) -> Callable[[Event], bool] | None:
    """Return the filter of the events of ``root``'s subtree (None: every event)."""
    if root is None:
        return None
    below = root + "/"

    def accept(event: Event) -> bool:
        path = event.path
        return path == root or path.startswith(below)

    return accept


def stream_root(store: Store, ref: str | None) -> str | None:
    """Return the path whose subtree a stream of ``ref`` follows (None: every agent).

    ``ref`` is an agent id (its path is read from the store: no supervisor
    round trip, so an event loop never waits on one), or a path: absolute, or
    relative to ``/root``. A path need not name a live agent yet: a stream of
    ``/root/lead`` opened before ``lead`` is spawned sees it spawn.

    Raises:
        ArgumentTypeError: ``ref`` is not a str or None.
        InvalidAgentPath: ``ref`` is neither a known id nor a valid path.
    """
    if ref is None:
        return None
    if not isinstance(ref, str):
        raise ArgumentTypeError(
            f"ref must be an agent id, a path or None, not {type(ref).__name__}"
        )
    if ref and "/" not in ref:
        raw = store.get("agents", ref.encode("utf-8", "surrogatepass"))
        if raw is not None:
            path = _stored_path(raw)
            if path is not None:
                return path
    return paths.resolve(paths.ROOT, ref, field="ref")


def _stored_path(raw: bytes) -> str | None:
    """The path of a stored agent record, or None if it does not decode."""
    try:
        return _AGENT.decode(raw).path
    except msgspec.DecodeError:
        return None


class _Stream:
    """What both faces share: the queue on the bus, its batch, its end."""

    def __init__(self, bus: EventBus, root: str | None) -> None:
        self._queue = EventQueue(bus.capacity, subtree(root))
        self._batch: deque[Event] = deque()
        self._detach = bus.attach(self._queue)
        self._ended = False

    def _next_batch(self) -> bool | None:
        """Move queued events into the batch: True if some came, None if the stream ended.

        The caller holds the queue's lock.
        """
        queue = self._queue
        if queue.stopped:
            return None
        taken = queue.take_locked(_BATCH)
        if taken:
            self._batch.extend(taken)
            return True
        return None if queue.draining else False

    def close(self) -> None:
        """Stop listening; the iteration ends (idempotent, from any thread)."""
        self._ended = True
        self._batch.clear()
        self._detach()

    def __del__(self) -> None:
        """A stream dropped without being closed stops listening."""
        with contextlib.suppress(Exception):
            self._detach()


class EventStream(_Stream):
    """A blocking iterator over the runtime's events (see the module docstring)."""

    def __iter__(self) -> Self:
        """Return the stream itself."""
        return self

    def __next__(self) -> Event:
        """Return the next event, waiting for it.

        Raises:
            StopIteration: the stream was closed, or the runtime shut down.
        """
        if self._batch:
            return self._batch.popleft()
        queue = self._queue
        with queue.cond:
            while not self._ended:
                got = self._next_batch()
                if got is None:
                    break
                if got:
                    return self._batch.popleft()
                queue.cond.wait()
        self._ended = True
        raise StopIteration

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


class AsyncEventStream(_Stream):
    """An async iterator over the runtime's events that never blocks its event loop."""

    def __init__(self, bus: EventBus, root: str | None) -> None:
        """Listen on ``bus`` from now on; the loop is the one of the first ``__anext__``."""
        super().__init__(bus, root)
        self._ready: asyncio.Event | None = None

    def __aiter__(self) -> Self:
        """Return the stream itself."""
        return self

    def _arm(self) -> asyncio.Event:
        """Bind the stream to the running loop: the bus wakes it there."""
        ready = asyncio.Event()
        loop = asyncio.get_running_loop()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(ready.set)

        self._ready = ready
        self._queue.on_ready = wake
        return ready

    async def __anext__(self) -> Event:
        """Return the next event, awaiting it.

        Raises:
            StopAsyncIteration: the stream was closed, or the runtime shut down.
        """
        if self._batch:
            return self._batch.popleft()
        ready = self._ready if self._ready is not None else self._arm()
        queue = self._queue
        while not self._ended:
            ready.clear()
            with queue.cond:
                got = self._next_batch()
            if got is None:
                break
            if got:
                return self._batch.popleft()
            await ready.wait()
        self._ended = True
        raise StopAsyncIteration

    async def take(self, limit: int, wait_s: float) -> list[Event] | None:
        """Return up to ``limit`` events, waiting up to ``wait_s`` for the first.

        An empty list: none came in time; None: the stream ended (closed, or
        the runtime shut down). Events not returned stay queued for the next
        take (a take cancelled while it waits loses nothing).
        """
        ready = self._ready if self._ready is not None else self._arm()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait_s)
        batch = self._batch
        while not self._ended:
            if batch:
                return [batch.popleft() for _ in range(min(max(1, limit), len(batch)))]
            ready.clear()
            with self._queue.cond:
                got = self._next_batch()
            if got is None:
                break
            if got:
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), remaining)
        self._ended = True
        return None

    async def aclose(self) -> None:
        """Stop listening; the iteration ends."""
        self.close()

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
        self.close()
