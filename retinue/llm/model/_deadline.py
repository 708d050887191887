"""A model call attempt's deadline: ``asyncio.timeout``'s rule, as a plain context manager.

``with Deadline(seconds):`` in a task cancels the task once ``seconds`` have
passed on its loop and turns that cancellation into ``TimeoutError`` as the
block ends, exactly as ``async with asyncio.timeout(seconds):`` does (the same
``cancelling``/``uncancel`` count: a cancellation of the task's own, an
interrupt, that lands meanwhile stays a ``CancelledError``). It is entered and
left without the two coroutines ``asyncio.timeout``'s ``__aenter__`` and
``__aexit__`` are, nor its state machine.

The deadlines of one loop's attempts share one timer (:class:`_Deadlines`): a
timer handle per attempt, set as it starts and cancelled as it ends (nearly
every attempt ends long before its deadline), cost a handle, a heap push, its
cancel and a heap pop; an attempt now only notes its deadline and drops it as it
ends. The one timer is set for the earliest deadline noted while none is set
for an earlier time, and when it fires it cancels the tasks whose deadline
passed and is set again for the earliest of the rest.
"""

from __future__ import annotations

import asyncio
import weakref
from types import TracebackType

__all__ = ["Deadline"]

_NONE = float("inf")
"""No timer set."""


class _Deadlines:
    """The deadlines of the attempts running on one loop, under one timer at a time.

    Loop thread only. It holds no reference to its loop (the loop's timer holds it),
    so a loop that is gone leaves nothing behind.
    """

    __slots__ = ("armed", "running")

    def __init__(self) -> None:
        """No deadline, no timer."""
        self.running: dict[Deadline, float] = {}  # each running attempt's deadline
        self.armed = _NONE  # the time the timer is set for

    def arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        """Set a timer for ``when`` (one set for later still fires, and finds nothing due)."""
        self.armed = when
        loop.call_at(when, self._fire, when)

    def _fire(self, when: float) -> None:
        """A timer set for ``when`` fired: expire each attempt whose deadline is past, then
        set the timer for the earliest deadline left (none left: no timer)."""
        if when != self.armed:  # one set for later than the one set since: that one sweeps
            return
        loop = asyncio.get_running_loop()
        now = max(loop.time(), when)  # the loop runs a timer at most its resolution early
        earliest = _NONE
        for deadline, due in list(self.running.items()):
            if due <= now:
                del self.running[deadline]
                deadline.expire()
            elif due < earliest:
                earliest = due
        self.armed = _NONE
        if earliest is not _NONE:
            self.arm(loop, earliest)


_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines]
_loops = weakref.WeakKeyDictionary()

_last: tuple[weakref.ref[asyncio.AbstractEventLoop], _Deadlines] | None = None
"""The last loop asked about and its deadlines (every model call of a runtime runs on its
one loop: they are found without a weak key built per attempt)."""


def _deadlines_of(loop: asyncio.AbstractEventLoop) -> _Deadlines:
    """The deadlines of ``loop``'s attempts (made on first use)."""
    global _last
    last = _last
    if last is not None and last[0]() is loop:
        return last[1]
    deadlines = _loops.get(loop)
    if deadlines is None:
        deadlines = _loops[loop] = _Deadlines()
    _last = (weakref.ref(loop), deadlines)
    return deadlines


class Deadline:
    """Cancel the running task after ``seconds``; its block then raises ``TimeoutError``.

    Made and entered in the task it bounds (on its running loop).

    Raises:
        RuntimeError: (made) outside a task.
    """

    __slots__ = ("_cancelling", "_deadlines", "_expired", "_task")

    def __init__(self, seconds: float) -> None:
        """Arm the deadline ``seconds`` from now, for the running task."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a Deadline is set inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._expired = False
        deadlines = self._deadlines = _deadlines_of(loop)
        when = loop.time() + seconds
        deadlines.running[self] = when
        if when < deadlines.armed:
            deadlines.arm(loop, when)

    def expire(self) -> None:
        """The deadline passed: cancel the task (its block raises ``TimeoutError``)."""
        self._task.cancel()
        self._expired = True

    def __enter__(self) -> Deadline:
        """Enter the bounded block (the deadline runs from when it was made)."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Disarm the deadline; a cancellation it caused, and only that, becomes
        ``TimeoutError``.

        Raises:
            TimeoutError: the deadline passed and cancelled the block.
        """
        if not self._expired:
            self._deadlines.running.pop(self, None)
        elif self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc
