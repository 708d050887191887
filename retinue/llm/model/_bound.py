"""The per-model bound on calls in flight on one loop (``Limits.max_concurrent_calls``).

:class:`CallBound` is ``asyncio.Semaphore``'s rule, first come first served, with a
synchronous fast path: a call that finds a free place and nobody waiting takes it
with no coroutine (a semaphore's ``async with`` runs ``acquire`` and its
``__aenter__``/``__aexit__`` as coroutines, and scans its waiters, on every call).
A place given back goes straight to the oldest waiter still waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

__all__ = ["CallBound"]


class CallBound:
    """At most ``size`` calls at once; used on one event loop only.

    ``take()`` either takes a place at once (None) or returns the future to
    pass to :meth:`wait`; every place taken is given back with :meth:`give`.
    """

    __slots__ = ("_waiters", "free")

    def __init__(self, size: int) -> None:
        """Make ``size`` places, all free."""
        self.free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    def take(self) -> asyncio.Future[None] | None:
        """Take a free place now (None), or queue for one: await :meth:`wait` on the future.

        Raises:
            RuntimeError: (queueing) no event loop is running.
        """
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return None
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    async def wait(self, waiter: asyncio.Future[None]) -> None:
        """Wait until ``waiter`` (from :meth:`take`) is given a place.

        Raises:
            asyncio.CancelledError: cancelled while waiting; no place is held
                (one handed over meanwhile goes on to the next waiter).
        """
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a place, then cancelled
                self.give()
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        """Give a place back: to the oldest waiter still waiting, else to the free ones."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1
