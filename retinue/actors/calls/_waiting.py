"""Waiting for a supervisor's answer: blocking, from asyncio, and giving a wait up in time.

The supervisor answers every request on a reply future. A wait that can run
out of time (a host ``wait``, a turn's ``wait`` or ``run_many``) is given up
by asking the supervisor to end it (``GiveUpWait``): the supervisor settles
the race on its own thread, so the future ends with the event if one was
taken in time, or with ``WaitTimeout`` and nothing consumed. So a wait with
``timeout=0`` still returns an event that was already there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from retinue.actors.calls._ready import Ready
from retinue.actors.calls._wakeup import Wakeup
from retinue.errors import InvalidArgument, WaitTimeout
from retinue.protocol.checks import check_seconds
from retinue.protocol.limits import Limits

__all__ = [
    "EXPIRED",
    "await_answer",
    "deadlines_of",
    "expire_after",
    "fail_pending",
    "poster",
    "register_poster",
    "resolve_timeout",
    "runtime_poster",
    "timed_out",
    "unregister_poster",
    "wait_answer",
    "when_done",
]

log = logging.getLogger("retinue.calls")

# The batched cross-thread call of each host's loop (a _Batched, made on first use), held
# weakly: a host's loop that is gone takes its poster with it.
_POSTERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Callable[..., bool]] = (
    weakref.WeakKeyDictionary()
)
_POSTERS_LOCK = threading.Lock()
# The batched call of each runtime's loop (see LoopThread.call_soon), held strongly until its
# runtime closes the loop: found with one dict lookup in C (a WeakKeyDictionary's get is a
# Python call and a new weak reference).
_RUNTIME_POSTERS: dict[asyncio.AbstractEventLoop, Callable[..., bool]] = {}


_INF = float("inf")
EXPIRED: Any = object()
"""What :func:`expire_after` sets a loop future to once its time ran out."""


runtime_poster: Callable[[asyncio.AbstractEventLoop], Callable[..., bool] | None] = (
    _RUNTIME_POSTERS.get
)
"""``runtime_poster(loop)``: the batched call of a runtime's own ``loop`` (None: a host's
loop, see :func:`poster`), found in C with no Python call."""


def register_poster(loop: asyncio.AbstractEventLoop, post: Callable[..., bool]) -> None:
    """Make ``post`` the way :func:`poster` reaches ``loop`` (a runtime's batched call_soon),
    until :func:`unregister_poster`."""
    with _POSTERS_LOCK:
        _RUNTIME_POSTERS[loop] = post


def unregister_poster(loop: asyncio.AbstractEventLoop) -> None:
    """Forget ``loop``'s poster (its runtime closed it): a registered ``post`` that holds
    the loop would otherwise keep it alive as long as the process."""
    with _POSTERS_LOCK:
        _RUNTIME_POSTERS.pop(loop, None)


def poster(loop: asyncio.AbstractEventLoop) -> Callable[..., Any]:
    """Return how to run a callback on ``loop`` from another thread.

    A runtime's own loop gets its batched :meth:`LoopThread.call_soon`; any
    other loop (a host's) a :class:`_Batched` poster of its own, made once.
    """
    post = _RUNTIME_POSTERS.get(loop)
    if post is not None:
        return post
    post = _POSTERS.get(loop)
    if post is None:
        with _POSTERS_LOCK:
            post = _POSTERS.get(loop)
            if post is None:
                post = _POSTERS[loop] = _Batched(loop)
    return post


class _Batched:
    """Runs callbacks on a loop that is not a runtime's (a host's), one wake-up per batch.

    Calls from any thread run in the order they were made. The first call
    since the loop last ran them wakes it; the calls made before it gets to
    them join that batch without another wake-up. A commit that answers many
    of the host's awaits (a burst of ``spawn_async``) so wakes the host's loop
    once, and the store's writer, which answers them, releases the GIL at one
    write instead of at each.

    Made on the loop's own thread (as every host call makes it), it wakes the
    loop through a :class:`~retinue.actors.calls._wakeup.Wakeup` (a byte on a
    socket the loop watches: no ``Handle`` built nor self-pipe written in Python
    per wake-up, on either side); made elsewhere, or on a loop that cannot
    watch a socket, with ``call_soon_threadsafe``.
    """

    __slots__ = ("_calls", "_deadlines", "_lock", "_loop", "_scheduled", "_wake", "_wakeup")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Post to ``loop`` (held weakly: the poster is the loop's value in ``_POSTERS``,
        whose weak key a strong reference would keep alive for ever)."""
        self._loop = weakref.ref(loop)
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._scheduled = False
        self._deadlines: _Deadlines | None = None  # the host's waits' deadlines, made on use
        self._wakeup: Wakeup | None = None
        self._wake: Callable[[], object] = self._wake_threadsafe
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # on the loop's thread: it may watch a socket of ours
            try:
                wakeup = Wakeup(loop, self._woken)
            except (NotImplementedError, OSError):  # call_soon_threadsafe, then
                return
            self._wakeup, self._wake = wakeup, wakeup.wake
            weakref.finalize(loop, wakeup.close)  # its sockets go with the loop

    def __call__(self, callback: Callable[..., Any], *args: Any) -> bool:
        """Run ``callback(*args)`` on the loop soon.

        Raises:
            RuntimeError: the loop is closed.
        """
        loop = self._loop()
        if loop is None or loop.is_closed():
            raise RuntimeError("Event loop is closed")
        # acquire/release, not ``with``: a with statement binds __enter__ and __exit__ (two
        # bound methods) per call, and the store's writer answers every host await here.
        lock = self._lock
        lock.acquire()
        try:
            self._calls.append((callback, args))
            if self._scheduled:
                return True
            self._scheduled = True
        finally:
            lock.release()
        try:
            self._wake()
        except BlockingIOError:  # a full socket: a wake-up is pending already
            pass
        except (RuntimeError, OSError):  # closed meanwhile: nobody will run them
            with self._lock:
                self._calls.clear()
                self._scheduled = False
            raise RuntimeError("Event loop is closed") from None
        return True

    def _wake_threadsafe(self) -> None:
        """Wake the loop with ``call_soon_threadsafe`` (no :class:`Wakeup`).

        Raises:
            RuntimeError: the loop is closed or gone.
        """
        loop = self._loop()
        if loop is None:
            raise RuntimeError("Event loop is closed")
        loop.call_soon_threadsafe(self._drain)

    def _woken(self) -> None:
        """The :class:`Wakeup`'s reader: take the wake-up, then run the batch."""
        # First: a wake-up sent after this read stays pending, for calls this drain misses.
        try:  # noqa: SIM105  # not contextlib.suppress: three Python calls per wake-up
            self._wakeup.clear()  # type: ignore[union-attr]  # set with this reader
        except OSError:  # none pending (a byte taken by an earlier read), or closed
            pass
        self._drain()

    def _drain(self) -> None:
        lock = self._lock  # acquire/release, not ``with``: two bound methods fewer
        lock.acquire()
        try:
            calls, self._calls = self._calls, []
            self._scheduled = False
        finally:
            lock.release()
        for callback, args in calls:
            try:
                callback(*args)
            except Exception:  # one broken callback must not starve the others
                log.exception("a callback posted to an event loop failed")


_Awaited = Ready[Any] | asyncio.Future[Any]
"""A host wait's loop future: a :class:`Ready`, or asyncio's own."""


class _Deadlines:
    """The deadlines of the waits awaited on one loop, under one timer at a time.

    A timer per wait (``call_later`` and its cancel once the answer is in: about twenty
    Python calls on the waiting loop per wait) is replaced by one timer for the earliest
    deadline: a wait adds its future and deadline to a queue, and the timer, when it
    fires, ends each future whose time ran out (:data:`EXPIRED`), drops the ones that
    are done, and is set again for the earliest of the rest. Waits of the same timeout
    one after another set no timer of their own: the one set for the first covers them.

    Loop thread only. The futures are held weakly, and the loop not at all (the
    timer holds this, not the other way round): a host's loop that is gone leaves
    nothing behind in its poster.
    """

    __slots__ = ("_armed", "_bound", "_entries")

    _BOUND = 64  # the queue's length past which the done entries are swept out at once

    def __init__(self) -> None:
        """Start with no deadline and no timer."""
        self._entries: deque[tuple[float, weakref.ref[_Awaited]]] = deque()
        self._armed = float("inf")  # the earliest time a timer is set for
        self._bound = self._BOUND

    def add(self, loop: asyncio.AbstractEventLoop, ready: _Awaited, seconds: float) -> None:
        """End ``ready`` with :data:`EXPIRED` after ``seconds`` unless it is done by then."""
        when = time.monotonic() + seconds
        entries = self._entries
        while entries:  # forget the waits before it that are done (nearly always: all)
            first = entries[0][1]()
            if first is not None and not first.done():
                break
            entries.popleft()
        entries.append((when, weakref.ref(ready)))
        if len(entries) > self._bound:  # a long wait in front holds done ones behind it
            self._entries = deque(entry for entry in entries if not _gone(entry[1]))
            self._bound = max(self._BOUND, 2 * len(self._entries))
        if when < self._armed:
            self._arm(loop, when)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        """Set a timer for ``when`` (an earlier one set before still fires: it sweeps)."""
        self._armed = when
        loop.call_later(max(0.0, when - time.monotonic()), self._sweep, loop, when)

    def _sweep(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        """A timer fired: end the futures whose time ran out, forget the done ones, and
        set the timer again for the earliest deadline left."""
        if when == self._armed:
            self._armed = float("inf")
        now = time.monotonic()
        kept: deque[tuple[float, weakref.ref[_Awaited]]] = deque()
        expired: list[_Awaited] = []
        earliest = float("inf")
        for entry in self._entries:
            ready = entry[1]()
            if ready is None or ready.done():
                continue
            if entry[0] <= now:
                expired.append(ready)
            else:
                kept.append(entry)
                earliest = min(earliest, entry[0])
        self._entries = kept
        self._bound = max(self._BOUND, 2 * len(kept))
        if earliest < self._armed:
            self._arm(loop, earliest)
        # Ended once the queue is in order: each ends its wait's task here and now (a
        # Ready resumes it at once), and that task may wait again, adding to the queue.
        for ready in expired:
            if not ready.done():
                ready.set_result(EXPIRED)


def _gone(ref: weakref.ref[_Awaited]) -> bool:
    """True if the future ``ref`` names is done or gone."""
    ready = ref()
    return ready is None or ready.done()


def expire_after(
    post: Callable[..., Any],
    loop: asyncio.AbstractEventLoop,
    ready: _Awaited,
    seconds: float,
) -> None:
    """End ``ready`` with :data:`EXPIRED` after ``seconds`` unless it is done by then.

    ``post`` is ``loop``'s poster (:func:`poster`), a host's loop's: the loop keeps its
    waits' deadlines under one timer (see :class:`_Deadlines`). Called on ``loop``.
    (A turn's wait, on a runtime's loop, is timed by :func:`await_answer`.)

    Raises:
        TypeError: ``post`` is not a host loop's poster.
    """
    deadlines_of(post)(loop, ready, seconds)


def deadlines_of(
    post: Callable[..., Any],
) -> Callable[[asyncio.AbstractEventLoop, _Awaited, float], None]:
    """Return ``expire`` for the loop whose poster is ``post`` (a host's loop's):
    ``expire(loop, ready, seconds)`` is :func:`expire_after` with its poster found
    already (the engine keeps it with the poster: no Python call of its own per wait).

    Raises:
        TypeError: ``post`` is not a host loop's poster.
    """
    if type(post) is not _Batched:
        raise TypeError("expire_after times waits on a host's loop (its poster is a _Batched)")
    deadlines = post._deadlines
    if deadlines is None:
        deadlines = post._deadlines = _Deadlines()
    return deadlines.add


def resolve_timeout(timeout: float | None, limits: Limits) -> float:
    """Return the wait time to use: ``wait_default_s`` for None.

    Raises:
        ArgumentTypeError: not a number.
        InvalidArgument: NaN, infinite, negative, or above ``wait_max_s``.
    """
    if timeout is None:
        return limits.wait_default_s
    kind = type(timeout)  # a plain number in range (nearly always): no check_seconds call
    if (kind is float or kind is int) and 0 <= timeout <= limits.wait_max_s and timeout < _INF:
        return float(timeout)
    seconds = check_seconds(timeout, "timeout")
    if seconds > limits.wait_max_s:
        raise InvalidArgument(
            f"timeout {timeout} exceeds wait_max_s {limits.wait_max_s}; raise the limit"
        )
    return seconds


def timed_out(path: str, seconds: float) -> WaitTimeout:
    """The error of a wait on ``path`` that ran out of time: the same words for a host's
    wait and a turn's (the awaited agent keeps running)."""
    return WaitTimeout(
        f"nothing came from {path} within {seconds:g} s; it keeps running", path=path
    )


def fail_pending(future: concurrent.futures.Future[Any], error: BaseException) -> None:
    """End ``future`` with ``error`` unless someone claimed or answered it first."""
    with contextlib.suppress(RuntimeError, concurrent.futures.InvalidStateError):
        if future.set_running_or_notify_cancel():
            future.set_exception(error)


def wait_answer(
    future: concurrent.futures.Future[Any], timeout: float, give_up: Callable[[], None]
) -> Any:
    """Block for a wait's answer; past ``timeout`` give the wait up and take what it ends with.

    Raises:
        WaitTimeout: nothing arrived in time; and whatever the wait ended with.
    """
    try:
        return future.result(timeout=timeout)
    except TimeoutError:
        if not future.done():
            give_up()
        return future.result()


async def await_answer(
    future: concurrent.futures.Future[Any], timeout: float | None, give_up: Callable[[], None]
) -> Any:
    """Await a wait's answer from asyncio, as :func:`wait_answer` does, never blocking the loop.

    The loop is only told that ``future`` is done; its value is read here, so
    nothing is left in an asyncio future if the awaiting task is cancelled
    (the caller decides what a cancelled wait gives back). ``timeout`` None
    waits for ever (a request that is not a wait).

    Raises:
        WaitTimeout: nothing arrived in time; and whatever the wait ended with.
    """
    loop = asyncio.get_running_loop()
    answered = await when_done(loop, future, timeout)
    if not answered:
        if not future.done():
            give_up()
        await when_done(loop, future, None)
    return future.result()


def when_done(
    loop: asyncio.AbstractEventLoop, future: concurrent.futures.Future[Any], timeout: float | None
) -> asyncio.Future[bool]:
    """Return a loop future that turns True once ``future`` is done, False after ``timeout``."""
    ready: asyncio.Future[bool] = loop.create_future()

    def mark(answered: bool) -> None:
        if not ready.done():
            ready.set_result(answered)

    post = poster(loop)

    def on_done(_: concurrent.futures.Future[Any]) -> None:
        try:  # not contextlib.suppress: three Python calls per answer on the writer
            post(mark, True)
        except RuntimeError:  # the loop is closed: nobody awaits
            return

    if timeout is not None:  # the timer goes once the answer is in or the await is cancelled
        timer = loop.call_later(timeout, mark, False)
        ready.add_done_callback(lambda _: timer.cancel())
    future.add_done_callback(on_done)
    return ready
