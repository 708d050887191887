"""The threads that run blocking tool work: a bounded pool of its own, one per event loop.

File tools and sync host tools block (a read, a walk, the host's own code), so
they run off the event loop, but never on the loop's shared default executor:
there, seven calls stuck for good (a read of a FIFO) would take every thread
the other agents' tools need, and the interpreter would wait for them at exit.

A :class:`ToolPool` holds at most ``max_threads`` daemon threads (started on
demand, reused, and ended after :data:`IDLE_S` idle, or as soon as the
runtime's loop closes: :meth:`ToolPool.close`), so a stuck call never keeps
the process from exiting and a shut-down runtime leaves no idle thread behind.
A call that finds every thread busy waits in line without a thread; cancelling
it there (its tool timeout, an interrupt) just takes it out of the line. A call
cancelled while it runs is *abandoned*: Python cannot stop a thread, so it
keeps its thread until the function returns and is counted in
:attr:`ToolPool.abandoned` meanwhile; its ``stop`` event is set, so tools that
look at it (the file tools' walks) end early. The thread count never passes
``max_threads``.

:func:`tool_pool` returns the pool of the running event loop (the runtime's
loop thread: one pool per runtime); :func:`abandoned_tool_calls` reads its
count. ``RETINUE_TOOL_THREADS`` sets the default bound.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from retinue.actors.turns import at_loop_close
from retinue.errors import ConfigurationError

__all__ = [
    "DEFAULT_TOOL_THREADS",
    "IDLE_S",
    "ToolPool",
    "abandoned_tool_calls",
    "tool_pool",
]

DEFAULT_TOOL_THREADS = 16
"""Threads one pool may hold, unless ``RETINUE_TOOL_THREADS`` says otherwise."""
IDLE_S = 10.0
"""Seconds an idle pool thread waits for work before it ends."""
ENV_VAR = "RETINUE_TOOL_THREADS"

_T = TypeVar("_T")
_QUEUED, _RUNNING, _DONE, _WITHDRAWN = range(4)


class _Job:
    __slots__ = ("abandoned", "args", "fn", "future", "loop", "state", "stop")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
        stop: threading.Event,
    ) -> None:
        self.fn = fn
        self.args = args
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.stop = stop
        self.state = _QUEUED
        self.abandoned = False


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Hand a job's outcome to its awaiting coroutine (on the loop's thread)."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _check_size(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{what} must be a positive integer, not {value!r}")
    return value


class ToolPool:
    """At most ``max_threads`` daemon threads for blocking tool calls (see the module doc)."""

    def __init__(self, max_threads: int = DEFAULT_TOOL_THREADS) -> None:
        """Make an empty pool; threads start when calls come.

        Raises:
            ConfigurationError: ``max_threads`` is not a positive integer.
        """
        self._max = _check_size(max_threads, "max_threads")
        self._cond = threading.Condition(threading.Lock())
        self._queue: collections.deque[_Job] = collections.deque()
        self._threads = 0
        self._idle = 0
        self._abandoned = 0
        self._closed = False

    def __repr__(self) -> str:
        """Show the bound and the counts."""
        return (
            f"ToolPool(max_threads={self._max}, threads={self.threads}, "
            f"waiting={self.waiting}, abandoned={self.abandoned})"
        )

    @property
    def max_threads(self) -> int:
        """The most threads this pool holds at once."""
        return self._max

    @max_threads.setter
    def max_threads(self, value: int) -> None:
        """Change the bound; a lower one takes effect as threads end.

        Raises:
            ConfigurationError: not a positive integer.
        """
        with self._cond:
            self._max = _check_size(value, "max_threads")
            self._grow()

    @property
    def threads(self) -> int:
        """Threads alive now (busy or idle)."""
        with self._cond:
            return self._threads

    @property
    def waiting(self) -> int:
        """Calls waiting in line for a thread."""
        with self._cond:
            return len(self._queue)

    @property
    def abandoned(self) -> int:
        """Calls given up (timed out or cancelled) that still hold their thread."""
        with self._cond:
            return self._abandoned

    async def run(
        self, fn: Callable[..., _T], /, *args: Any, stop: threading.Event | None = None
    ) -> _T:
        """Run ``fn(*args)`` on a pool thread and return (or raise) what it does.

        ``stop`` (optional) is set if the call is given up while it runs, so
        ``fn`` may check it and end early. Any ``BaseException`` ``fn`` raises
        comes back here as it is.

        Raises:
            asyncio.CancelledError: the call was cancelled (waiting: it never
                runs; running: it is abandoned and counted until it returns).
        """
        job = _Job(fn, args, asyncio.get_running_loop(), stop or threading.Event())
        with self._cond:
            self._queue.append(job)
            self._grow()
            self._cond.notify()
        try:
            result: _T = await job.future
            return result
        except asyncio.CancelledError:
            self._give_up(job)
            raise

    def close(self) -> None:
        """End the idle threads now, and each busy one once its call returns.

        Called when the pool's event loop (a runtime's) closes. A call made
        afterwards still runs, on a thread that ends once it is idle.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _give_up(self, job: _Job) -> None:
        with self._cond:
            if job.state == _QUEUED:
                self._queue.remove(job)
                job.state = _WITHDRAWN
            elif job.state == _RUNNING and not job.abandoned:
                job.abandoned = True
                self._abandoned += 1
                job.stop.set()

    def _grow(self) -> None:
        """Start a thread if calls wait beyond the idle threads and the bound allows (locked)."""
        while len(self._queue) > self._idle and self._threads < self._max:
            thread = threading.Thread(target=self._work, name="retinue-tool", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # the process is out of threads: the line waits
                return
            self._threads += 1
            self._idle += 1  # counted idle until it takes a job

    def _next(self) -> _Job | None:
        """Take the next job, or None when this thread should end (locked by the caller)."""
        while not self._queue or self._threads > self._max:
            if self._threads > self._max or (self._closed and not self._queue):
                return None
            if not self._cond.wait(IDLE_S) and not self._queue:
                return None
        job = self._queue.popleft()
        job.state = _RUNNING
        return job

    def _work(self) -> None:
        while True:
            with self._cond:
                job = self._next()
                self._idle -= 1
                if job is None:
                    self._threads -= 1
                    return
            try:
                value, ok = job.fn(*job.args), True
            except BaseException as exc:  # handed to the caller, whatever it is
                value, ok = exc, False
            with self._cond:
                job.state = _DONE
                if job.abandoned:
                    self._abandoned -= 1
                self._idle += 1
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for it
                job.loop.call_soon_threadsafe(_settle, job.future, ok, value)
            del job, value


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ToolPool]
_pools = weakref.WeakKeyDictionary()
_pools_lock = threading.Lock()


def _default_size() -> int:
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_TOOL_THREADS
    try:
        return _check_size(int(raw, 10), ENV_VAR)
    except ValueError:
        raise ConfigurationError(
            f"{ENV_VAR} must be a positive integer, got {raw!r}; fix or unset it"
        ) from None


def tool_pool(loop: asyncio.AbstractEventLoop | None = None) -> ToolPool:
    """Return the tool pool of ``loop`` (default: the running loop), made on first use.

    Raises:
        RuntimeError: no loop given and none running.
        ConfigurationError: ``RETINUE_TOOL_THREADS`` is set but not a positive integer.
    """
    key = loop if loop is not None else asyncio.get_running_loop()
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ToolPool(_default_size())
            at_loop_close(key, pool.close)  # a runtime's loop: its threads end with it
        return pool


def abandoned_tool_calls(loop: asyncio.AbstractEventLoop) -> int:
    """Return the abandoned tool calls still holding a thread of ``loop``'s pool (0: no pool)."""
    with _pools_lock:
        pool = _pools.get(loop)
    return 0 if pool is None else pool.abandoned
