"""The loop future a host's async call awaits: answered on its loop, it resumes its task at once.

An ``asyncio.Future`` that is set schedules its task's wake-up with
``call_soon``: the task runs one pass of the loop later (one more ``select``,
one more ``_run_once``: about 45 lines of asyncio's Python, ~20,000
instructions), after the pass whose callback (the reply's
:func:`~retinue.actors.calls._reply._settle`, posted by the store's writer) set
it. A :class:`Ready` is asyncio-compatible (a task awaits it as it awaits any
future: ``_asyncio_future_blocking``, ``get_loop``, ``add_done_callback`` with
a context, ``result``, ``cancel``) but calls its done callbacks at once when it
is set, in their contexts: the awaiting task resumes in the same pass, in the
callback that answered it.

Only its loop's thread touches it, from a loop callback (the posted answer,
the deadlines' timer). A task's step is never entered from another's: set
while a task runs on its loop, or cancelled (its task's cancel runs inside
another task), it schedules its callbacks as asyncio does.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

_current_task = asyncio.current_task  # in C from Python 3.12 (a Python function in 3.11)

__all__ = ["Ready"]

T = TypeVar("T")

_PENDING = 0
_FINISHED = 1
_CANCELLED = 2

_Callback = tuple[Callable[["Ready[Any]"], object], contextvars.Context | None]


class Ready(Generic[T]):
    """A one-shot loop future whose done callbacks run as it is set (see the module).

    Its loop's thread only. Set once (``set_result``, ``set_exception``) or
    cancelled; what asyncio's own future refuses, it refuses
    (``InvalidStateError``). A pending one's fields but its loop are the class's
    until set (one line to build), and its first callback (its task's wake-up)
    has fields of its own (no list).
    """

    _state = _PENDING
    _result: Any = None
    _exception: BaseException | None = None
    _cancel_message: Any = None
    _fn: Callable[[Ready[Any]], object] | None = None  # the first done callback
    _context: contextvars.Context | None = None  # ... and its context
    _more: list[_Callback] | None = None  # the others, in order
    _asyncio_future_blocking = False  # asyncio's mark: a task awaits it as a future

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Create a pending future of ``loop``."""
        self._loop = loop

    def __repr__(self) -> str:
        """Name the class and the state."""
        state = ("pending", "finished", "cancelled")[self._state]
        return f"<Ready {state}>"

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """Return the loop it belongs to."""
        return self._loop

    def done(self) -> bool:
        """Return True once it is set or cancelled."""
        return self._state != _PENDING

    def cancelled(self) -> bool:
        """Return True if it was cancelled."""
        return self._state == _CANCELLED

    def result(self) -> T:
        """Return what it was set to.

        Raises:
            asyncio.CancelledError: it was cancelled.
            asyncio.InvalidStateError: it is not done.
            BaseException: the exception it was set to.
        """
        if self._state == _FINISHED and self._exception is None:
            return self._result  # type: ignore[no-any-return]  # (no local: a line fewer)
        if self._exception is not None:
            raise self._exception
        if self._state == _CANCELLED:
            raise asyncio.CancelledError(self._cancel_message)
        raise asyncio.InvalidStateError("Result is not ready.")

    def exception(self) -> BaseException | None:
        """Return the exception it was set to (None for a result).

        Raises:
            asyncio.CancelledError: it was cancelled.
            asyncio.InvalidStateError: it is not done.
        """
        if self._state == _FINISHED:
            return self._exception
        if self._state == _CANCELLED:
            raise asyncio.CancelledError(self._cancel_message)
        raise asyncio.InvalidStateError("Exception is not set.")

    def add_done_callback(
        self,
        fn: Callable[[Ready[T]], object],
        *,
        context: contextvars.Context | None = None,
    ) -> None:
        """Call ``fn(self)`` in ``context`` (None: a copy of the current one) once it is
        done; soon, on its loop, if it is."""
        if self._state != _PENDING:
            self._loop.call_soon(fn, self, context=context)
        elif self._fn is None and self._more is None:
            self._fn, self._context = fn, context or contextvars.copy_context()
        else:
            self._more = [*(self._more or ()), (fn, context or contextvars.copy_context())]

    def remove_done_callback(self, fn: Callable[[Ready[T]], object]) -> int:
        """Forget every ``fn`` added; return how many there were."""
        callbacks = self._callbacks()
        kept = [entry for entry in callbacks if entry[0] != fn]
        self._fn, self._context, self._more = None, None, kept or None
        return len(callbacks) - len(kept)

    def _callbacks(self) -> list[_Callback]:
        """Every done callback not called yet, in order, with its context."""
        first: list[_Callback] = [] if self._fn is None else [(self._fn, self._context)]
        return first + (self._more or [])

    def set_result(self, result: T) -> None:
        """Set it to ``result`` and call its done callbacks now.

        Raises:
            asyncio.InvalidStateError: it is done already.
        """
        if self._state != _PENDING:
            raise asyncio.InvalidStateError(f"invalid state: {self!r}")
        self._result, self._state = result, _FINISHED
        fn = self._fn
        if _current_task(self._loop) is not None:  # set inside a task: its callbacks soon
            self._call_soon()
        elif fn is not None and self._more is None:  # its task's wake-up alone (nearly always)
            self._fn = None
            try:
                self._context.run(fn, self)  # type: ignore[union-attr]  # set with fn
            except Exception as exc:  # as a loop callback's: reported
                self._report(exc)
        else:
            self._call_now()

    def resume(self, result: T) -> bool:
        """Set it to ``result`` from a loop callback (never inside a task): its done
        callbacks run now. False (nothing done) if it is done already.

        :meth:`set_result` without its look at the current task (a Python call in
        Python 3.11), for who knows it runs between tasks: a reply's answer, posted
        to the loop (:func:`~retinue.actors.calls._reply._settle`).
        """
        if self._state != _PENDING:
            return False
        self._result, self._state = result, _FINISHED
        fn = self._fn
        if fn is not None and self._more is None:  # its task's wake-up alone (nearly always)
            self._fn = None
            try:
                self._context.run(fn, self)  # type: ignore[union-attr]  # set with fn
            except Exception as exc:  # as a loop callback's: reported
                self._report(exc)
        else:
            self._call_now()
        return True

    def set_exception(self, exception: BaseException) -> None:
        """Set it to ``exception`` (raised to the awaiting task) and call its done callbacks now.

        Raises:
            asyncio.InvalidStateError: it is done already.
        """
        if self._state != _PENDING:
            raise asyncio.InvalidStateError(f"invalid state: {self!r}")
        self._exception, self._state = exception, _FINISHED
        if _current_task(self._loop) is not None:  # set inside a task: its callbacks soon
            self._call_soon()
        else:
            self._call_now()

    def cancel(self, msg: Any | None = None) -> bool:
        """Cancel it unless it is done; its callbacks are scheduled (as asyncio's are)."""
        if self._state != _PENDING:
            return False
        self._state = _CANCELLED
        self._cancel_message = msg
        self._call_soon()
        return True

    def _call_soon(self) -> None:
        """Schedule the done callbacks on its loop, each in its context (as asyncio does)."""
        callbacks = self._callbacks()
        self._fn, self._context, self._more = None, None, None
        for fn, context in callbacks:
            self._loop.call_soon(fn, self, context=context)

    def _call_now(self) -> None:
        """Call the done callbacks here, each in its context (its task resumes now)."""
        callbacks = self._callbacks()
        self._fn, self._context, self._more = None, None, None
        for fn, context in callbacks:
            try:
                if context is None:
                    fn(self)
                else:
                    context.run(fn, self)
            except Exception as exc:  # as a loop callback's: reported, the others run
                self._report(exc)

    def _report(self, exc: Exception) -> None:
        """Report a failed done callback as the loop reports a failed callback."""
        self._loop.call_exception_handler(
            {"message": "a done callback of a Ready failed", "exception": exc, "future": self}
        )

    def __await__(self) -> Generator[Any, None, T]:
        """Wait for it in a task, as for an asyncio future.

        Raises:
            asyncio.InvalidStateError: resumed while still pending (not awaited from a task).
        """
        if self._state == _PENDING:
            self._asyncio_future_blocking = True
            yield self
        if self._exception is None and self._state == _FINISHED:  # result(), inline
            return self._result  # type: ignore[no-any-return]  # (no local: a line fewer)
        return self.result()

    __iter__ = __await__
