"""The one-shot future every request to the supervisor is answered on.

A :class:`Reply` is a :class:`concurrent.futures.Future` (so
``asyncio.wrap_future`` accepts it and every signature stays the same) without
the ``Condition`` the standard one builds: a small lock guards its state, and
a waiter blocks on a latch (a second lock, made only if someone has to wait)
that the answer opens. Each host call and each runner call makes one, and the
standard future's ``Condition`` (a Python-level ``RLock`` wrapper, a waiter
lock per ``wait``, a notify loop) cost about a tenth of a lifecycle's CPU.

Its states and rules are the standard future's: ``cancel`` succeeds only while
it is pending; ``set_running_or_notify_cancel`` claims it (a claimed reply can
no longer be cancelled) or reports the cancel; ``set_result`` and
``set_exception`` refuse a reply already done with ``InvalidStateError``; done
callbacks run once, in the thread that finished it (or at once if added
later). ``concurrent.futures.wait`` and ``as_completed`` are not supported
(they reach for the ``Condition``); nothing in retinue hands a reply to them.

A told command (:meth:`~retinue.actors.calls.Engine.tell`: a turn's settle, a
give-back) is answered on :data:`TOLD`, a reply nobody reads: its answer is
dropped where it is given, with no future built per command nor finished
per commit.

A :class:`LoopReply` is the reply of a request awaited on an event loop
(:meth:`~retinue.actors.calls.Engine.ask_async`): answered (or cancelled), it
hands its outcome to the loop future its task awaits itself, through the
loop's batched poster, with no done callback, closure or second read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from retinue.actors.calls._ready import Ready

__all__ = ["TOLD", "LoopReply", "Reply", "Told"]

log = logging.getLogger("retinue.reply")

T = TypeVar("T")

_PENDING = "PENDING"
_RUNNING = "RUNNING"
_CANCELLED = "CANCELLED"
_CANCELLED_AND_NOTIFIED = "CANCELLED_AND_NOTIFIED"
_FINISHED = "FINISHED"
_DONE = frozenset({_CANCELLED, _CANCELLED_AND_NOTIFIED, _FINISHED})
_CANCELS = frozenset({_CANCELLED, _CANCELLED_AND_NOTIFIED})

_Callbacks = tuple[Callable[[concurrent.futures.Future[T]], object], ...]


class Reply(concurrent.futures.Future[T]):
    """A thread-safe one-shot future, as :class:`concurrent.futures.Future` minus its Condition.

    A pending reply's fields but its lock are the class's (below) until it is
    answered, waited on or given a callback: one line to build, not six.
    """

    _latch: threading.Lock | None = None  # held until done, made by the first waiter
    _state = _PENDING
    _result: Any = None
    _exception: BaseException | None = None
    # Done callbacks: a shared empty tuple until one is added (nearly no reply has any).
    _callbacks: _Callbacks[Any] = ()
    # Whether a latch was made or a callback added (set under the lock): an answer looks
    # at this once, not at each of them (nearly no reply has either).
    _extras = False

    def __init__(self) -> None:  # no super().__init__(): it would build the Condition
        """Create a pending reply."""
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        """Name the class, the state and (once finished) what it holds."""
        if self._state != _FINISHED:
            return f"<Reply at {id(self):#x} state={self._state.lower()}>"
        if self._exception is not None:
            held = f"raised {type(self._exception).__name__}"
        else:
            held = f"returned {type(self._result).__name__}"
        return f"<Reply at {id(self):#x} state=finished {held}>"

    # -- reading ------------------------------------------------------------------

    def cancelled(self) -> bool:
        """Return True if the reply was cancelled."""
        return self._state in _CANCELS

    def running(self) -> bool:
        """Return True if the reply was claimed and is not answered yet."""
        return self._state == _RUNNING

    def done(self) -> bool:
        """Return True if the reply was answered or cancelled."""
        return self._state in _DONE

    def result(self, timeout: float | None = None) -> T:
        """Return the answer, waiting up to ``timeout`` seconds (None: for ever).

        Raises:
            concurrent.futures.CancelledError: the reply was cancelled.
            TimeoutError: it was not answered in time.
            BaseException: the exception it was answered with.
        """
        self._wait(timeout)
        if self._state in _CANCELS:
            raise concurrent.futures.CancelledError()
        if self._exception is not None:
            try:
                raise self._exception
            finally:
                self = None  # type: ignore[assignment]  # no cycle through the traceback
        result: T = self._result
        return result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Return the exception it was answered with (None for a result), waiting as :meth:`result`.

        Raises:
            concurrent.futures.CancelledError: the reply was cancelled.
            TimeoutError: it was not answered in time.
        """
        self._wait(timeout)
        if self._state in _CANCELS:
            raise concurrent.futures.CancelledError()
        return self._exception

    def _wait(self, timeout: float | None) -> None:
        """Block until done, or raise ``TimeoutError`` after ``timeout`` seconds."""
        if self._state in _DONE:
            return
        with self._lock:
            if self._state in _DONE:
                return
            latch = self._latch
            if latch is None:
                latch = self._latch = threading.Lock()
                latch.acquire()
                self._extras = True
        if not latch.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise TimeoutError()
        latch.release()  # the next waiter goes through too

    # -- callbacks ------------------------------------------------------------------

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[T]], object]) -> None:
        """Call ``fn(reply)`` once it is done (now, in this thread, if it already is)."""
        with self._lock:
            if self._state not in _DONE:
                self._callbacks = (*self._callbacks, fn)
                self._extras = True
                return
        self._call(fn)

    def _call(self, fn: Callable[[concurrent.futures.Future[T]], object]) -> None:
        try:
            fn(self)
        except Exception:  # a callback's failure is logged, never the finisher's
            log.exception("a callback of %r failed", self)

    def _finish(self, result: Any, exception: BaseException | None = None) -> None:
        """Answer, then open the latch and run the callbacks (if any) outside the lock.

        It is :meth:`set_result` too (``exception`` None): the store's writer
        answers through it with one Python call fewer per answer; a reply nobody
        blocks on and with no callback (nearly every one) is answered in the lock
        and one look at :attr:`_extras` after it.

        Raises:
            concurrent.futures.InvalidStateError: it is already done.
        """
        # acquire/release, not ``with``: a with statement builds two bound methods (about
        # a thousand instructions per answer, on the store's writer).
        lock = self._lock
        lock.acquire()
        try:
            if self._state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            self._result, self._exception = result, exception
            self._state = _FINISHED
        finally:
            lock.release()
        if self._extras:  # a waiter or callbacks (nearly no reply has either): one look
            self._opened()

    def _opened(self) -> None:
        """Just answered: open the latch, then run the callbacks, in this thread.

        Outside the lock: once the reply is done nothing makes a latch or adds a
        callback to it (both look at the state under the lock), so what is here
        is all there will be, and only the answering thread takes it.
        """
        if self._latch is not None:
            self._latch.release()
        callbacks, self._callbacks = self._callbacks, ()
        for fn in callbacks:
            self._call(fn)

    def _close(self, state: str) -> _Callbacks[T]:
        """Enter the done ``state``, open the latch, return the callbacks to run (lock held;
        a cancel's: an answer does the same inline, in :meth:`_finish`)."""
        self._state = state
        if self._latch is not None:
            self._latch.release()
        callbacks, self._callbacks = self._callbacks, ()
        return callbacks

    # -- writing --------------------------------------------------------------------

    def cancel(self) -> bool:
        """Cancel the reply unless it was claimed or answered; return whether it is cancelled."""
        with self._lock:
            if self._state in _CANCELS:
                return True
            if self._state != _PENDING:
                return False
            callbacks = self._close(_CANCELLED)
        for fn in callbacks:
            self._call(fn)
        return True

    def set_running_or_notify_cancel(self) -> bool:
        """Claim a pending reply (True), or acknowledge its cancel (False).

        Raises:
            RuntimeError: it was already claimed or answered.
        """
        with self._lock:
            if self._state == _PENDING:  # (nearly always: looked at first)
                self._state = _RUNNING
                return True
            if self._state == _CANCELLED:
                self._state = _CANCELLED_AND_NOTIFIED
                return False
            raise RuntimeError(f"Reply in unexpected state {self._state}")

    set_result = _finish  # (result): answer with ``result``; InvalidStateError if done

    def set_exception(self, exception: BaseException | None) -> None:
        """Answer with ``exception`` (raised to whoever reads the result).

        Raises:
            concurrent.futures.InvalidStateError: it is already done.
        """
        self._finish(None, exception)


def _settle(ready: asyncio.Future[Any] | Ready[Any], reply: LoopReply[Any]) -> None:
    """On the awaiting loop: hand ``reply``'s outcome to ``ready`` (unless its await was
    cancelled: nobody reads it then)."""
    if type(ready) is Ready and reply._exception is None and reply._state == _FINISHED:
        ready.resume(reply._result)  # a host's await with its answer (nearly always)
        return
    if ready.done():
        return
    if reply._state in _CANCELS:
        ready.set_exception(concurrent.futures.CancelledError())
    elif reply._exception is not None:
        ready.set_exception(reply._exception)
    else:
        ready.set_result(reply._result)


class LoopReply(Reply[T]):
    """A :class:`Reply` awaited on an event loop: done, it settles the loop future ``ready``.

    ``post(callback, *args)`` runs a callback on that loop from any thread (its
    batched poster, :func:`~retinue.actors.calls._waiting.poster`). Answered or
    cancelled, the reply posts :func:`_settle` once, which gives ``ready`` the
    result or the exception (a cancelled reply: ``CancelledError``), unless
    ``ready`` is done already (its awaiting task was cancelled). A closed loop
    is posted nothing (nobody awaits). Everything else is :class:`Reply`'s.
    """

    def __init__(self, ready: asyncio.Future[T] | Ready[T], post: Callable[..., Any]) -> None:
        """Create a pending reply that settles ``ready`` through ``post``.

        (Reply's one field is set here, not through ``super().__init__()``: a Python
        call fewer per request.)
        """
        self._lock = threading.Lock()
        self._ready = ready
        self._post = post

    def _wake(self) -> None:
        try:
            self._post(_settle, self._ready, self)
        except RuntimeError:  # the loop is closed: nobody awaits
            return

    def _finish(self, result: Any, exception: BaseException | None = None) -> None:
        """Answer, settle the loop's future, then run the callbacks (as :meth:`Reply._finish`).

        It is :meth:`set_result` too (``exception`` None): the store's writer
        answers through it with one Python call fewer per answer.

        Raises:
            concurrent.futures.InvalidStateError: it is already done.
        """
        lock = self._lock  # acquire/release, not ``with``: see Reply._finish
        lock.acquire()
        try:
            if self._state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            self._result, self._exception = result, exception
            self._state = _FINISHED
        finally:
            lock.release()
        ready = self._ready
        try:
            if exception is None and type(ready) is Ready:  # a host's await (nearly always)
                # Its answer is resumed on the loop as it is (no _settle there to read it
                # back): a result is final, and a Ready whose await was cancelled takes none.
                self._post(ready.resume, result)
            else:
                self._post(_settle, ready, self)
        except RuntimeError:  # the loop is closed: nobody awaits
            pass
        if self._extras:  # as Reply._finish
            self._opened()

    set_result = _finish  # (result): answer with ``result``; InvalidStateError if done

    def cancel(self) -> bool:
        """Cancel as :meth:`Reply.cancel`; cancelled, it settles the loop's future (once:
        :func:`_settle` leaves a done future alone)."""
        cancelled = super().cancel()
        if cancelled:
            self._wake()
        return cancelled


class Told(concurrent.futures.Future[Any]):
    """The reply of a told command: nobody reads it, so it keeps nothing (see :data:`TOLD`).

    It claims and takes every answer and drops it (``set_running_or_notify_cancel``
    True, ``set_result`` and ``set_exception`` do nothing), is never done and
    cannot be cancelled. Reading it is a bug: ``result``, ``exception`` and
    ``add_done_callback`` raise ``TypeError``.
    """

    def __init__(self) -> None:  # no super().__init__(): nothing to guard or wait on
        """Create the one told reply (:data:`TOLD`)."""

    def __repr__(self) -> str:
        """Say what it is."""
        return "<Told reply: answers dropped>"

    def cancel(self) -> bool:
        """Refuse: a told command is served, never withdrawn (False)."""
        return False

    def cancelled(self) -> bool:
        """Return False: it is never cancelled."""
        return False

    def running(self) -> bool:
        """Return False: it holds no state."""
        return False

    def done(self) -> bool:
        """Return False: it is never done (every answer is dropped)."""
        return False

    def result(self, timeout: float | None = None) -> Any:
        """Refuse: a told command's answer is not kept.

        Raises:
            TypeError: always.
        """
        raise TypeError("a told command's answer is not kept")

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Refuse, as :meth:`result`.

        Raises:
            TypeError: always.
        """
        raise TypeError("a told command's answer is not kept")

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
        """Refuse: it is never done, so ``fn`` would never run.

        Raises:
            TypeError: always.
        """
        raise TypeError("a told command's answer is not kept")

    def set_running_or_notify_cancel(self) -> bool:
        """Claim it for an answer: always True (it is never cancelled)."""
        return True

    def set_result(self, result: Any) -> None:
        """Drop ``result``: nobody reads it."""

    def set_exception(self, exception: BaseException | None) -> None:
        """Drop ``exception``: nobody reads it."""


TOLD = Told()
"""The reply every told command is answered on (:class:`Told`): one for all, as it keeps
nothing. :meth:`~retinue.actors.calls.Engine.tell` hands it over."""
