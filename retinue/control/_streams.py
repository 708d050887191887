"""Event streams over the control socket: :class:`RemoteStream` and :class:`AsyncRemoteStream`.

Each stream has a connection of its own to the writer, read only as the
consumer asks for events: a consumer that falls behind leaves the events
queued on the writer, bounded like any stream there
(``event_queue_capacity``; the oldest go, and one ``EventsDropped`` says
where the gap is). A stream ends when the consumer leaves it (``break``,
``close()``, a ``with`` block) or the writer stops (shut down, or gone).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections import deque
from types import TracebackType
from typing import Any, Self

from retinue.control._link import Link, Session
from retinue.protocol.messages import Event

__all__ = ["AsyncRemoteStream", "RemoteStream"]


class _Base:
    """What both faces share: the link, the stream's connection, its batch, its end."""

    def __init__(self, link: Link, session: Session) -> None:
        self._link = link
        self._session = session
        self._batch: deque[Event] = deque()
        self._ended = False

    def close(self) -> None:
        """Stop listening; the iteration ends (idempotent, from any thread)."""
        if self._ended:
            return
        self._ended = True
        self._batch.clear()
        with contextlib.suppress(Exception):
            self._link.submit_coroutine(self._link.end_stream(self._session))

    def __del__(self) -> None:
        """A stream dropped without being closed closes its connection."""
        with contextlib.suppress(Exception):
            self.close()


class RemoteStream(_Base):
    """A blocking iterator over a remote writer's events (``RemoteRuntime.stream``)."""

    def __iter__(self) -> Self:
        """Return the stream itself."""
        return self

    def __next__(self) -> Event:
        """Return the next event, waiting for it.

        Raises:
            StopIteration: the stream was closed, or the writer stopped.
        """
        while not self._batch:
            if self._ended:
                raise StopIteration
            try:
                events = self._link.run(self._link.stream_batch(self._session))
            except BaseException:
                self.close()  # a read cut short leaves the connection unusable
                raise
            if events is None:
                self._ended = True
                raise StopIteration
            self._batch.extend(events)
        return self._batch.popleft()

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


class AsyncRemoteStream(_Base):
    """An async iterator over a remote writer's events that never blocks its event loop.

    A cancelled ``__anext__`` loses nothing: the read it started goes on, and
    the next ``__anext__`` takes what it brings.
    """

    def __init__(self, link: Link, session: Session) -> None:
        """Iterate over the events read from ``session``."""
        super().__init__(link, session)
        self._reading: concurrent.futures.Future[list[Event] | None] | None = None

    def __aiter__(self) -> Self:
        """Return the stream itself."""
        return self

    async def __anext__(self) -> Event:
        """Return the next event, awaiting it.

        Raises:
            StopAsyncIteration: the stream was closed, or the writer stopped.
        """
        while not self._batch:
            if self._ended:
                raise StopAsyncIteration
            if self._reading is None:
                self._reading = self._link.submit_coroutine(self._link.stream_batch(self._session))
            reading = self._reading
            events: Any = await asyncio.shield(asyncio.wrap_future(reading))
            self._reading = None
            if events is None:
                self._ended = True
                raise StopAsyncIteration
            self._batch.extend(events)
        return self._batch.popleft()

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
