"""A loop's wake-up from other threads: a byte on a socket pair the loop watches.

``loop.call_soon_threadsafe(drain)`` (asyncio's way to wake a loop from
another thread) builds a ``Handle`` and writes to the loop's self-pipe in
Python on the waking thread (about 30 lines: ``_check_closed``, ``_call_soon``,
``Handle.__init__``, ``_write_to_self``), and the woken loop reads its
self-pipe in Python until it raises ``BlockingIOError`` (about 15 lines and
an exception) before it runs the handle. A :class:`Wakeup` is a socket pair
whose reading end the loop watches (``loop.add_reader``, public API, one handle
made once): the waking thread sends a byte (one C call, no Python frame), and
the loop runs the reader, which reads the byte in one C call and drains.

Callers batch their wake-ups (one per batch: a flag set under their lock until
the loop drains), so a socket never holds more than a byte or two; a full one
(never seen) still has a wake-up pending and drops the byte. A loop that cannot
watch a socket (asyncio's proactor loop on Windows) refuses with
``NotImplementedError``: the caller wakes it with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import socket
from collections.abc import Callable
from typing import Any

__all__ = ["Wakeup"]

_WAKE = b"\0"
_CLEAR = 4096  # the most bytes one read takes: every wake-up pending, in one C call


class Wakeup:
    """The wake-up of one loop: :attr:`wake` from any thread, :attr:`clear` in its reader.

    Attributes:
        wake: ``wake()`` sends the loop a wake-up (a C call; raises ``OSError`` once
            closed, ``BlockingIOError`` if the socket is full: a wake-up is pending then).
        clear: ``clear()`` takes the pending wake-ups (a C call; the reader's first
            step; raises ``BlockingIOError`` if none is pending).
    """

    __slots__ = ("_rsock", "_wsock", "clear", "wake")

    def __init__(self, loop: asyncio.AbstractEventLoop, reader: Callable[[], Any]) -> None:
        """Have ``loop`` call ``reader()`` when woken; call this on ``loop``'s thread (or
        before it runs): it registers a reader with the loop.

        ``reader`` runs in an empty context (not the one this is called in), as a
        callback another thread hands the loop would run in a context of its own.

        Raises:
            NotImplementedError: ``loop`` cannot watch a socket (nothing is left open).
            OSError: no socket pair could be made.
        """
        rsock, wsock = socket.socketpair()
        try:
            rsock.setblocking(False)
            wsock.setblocking(False)
            contextvars.Context().run(loop.add_reader, rsock.fileno(), reader)
        except BaseException:
            rsock.close()
            wsock.close()
            raise
        self._rsock, self._wsock = rsock, wsock
        self.wake: Callable[[], object] = functools.partial(wsock.send, _WAKE)
        self.clear: Callable[[], object] = functools.partial(rsock.recv, _CLEAR)

    def close(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Stop watching (with ``loop``, on its thread, if it is not closed) and close the
        sockets; a :attr:`wake` raises ``OSError`` from now on. Idempotent."""
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(Exception):  # a loop that never had it, or gone
                loop.remove_reader(self._rsock.fileno())
        self._rsock.close()
        self._wsock.close()
