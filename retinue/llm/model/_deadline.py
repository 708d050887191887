"""A model call attempt's deadline: ``asyncio.timeout``'s rule, as a plain context manager.

``with Deadline(seconds):`` in a task cancels the task once ``seconds`` have
passed on its loop and turns that cancellation into ``TimeoutError`` as the
block ends, exactly as ``async with asyncio.timeout(seconds):`` does (the same
``cancelling``/``uncancel`` count: a cancellation of the task's own, an
interrupt, that lands meanwhile stays a ``CancelledError``). It is entered and
left without the two coroutines ``asyncio.timeout``'s ``__aenter__`` and
``__aexit__`` are, nor its state machine: one timer handle per attempt, set as it
starts and cancelled as it ends.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

__all__ = ["Deadline"]


class Deadline:
    """Cancel the running task after ``seconds``; its block then raises ``TimeoutError``.

    Made and entered in the task it bounds (on its running loop).

    Raises:
        RuntimeError: (made) outside a task.
    """

    __slots__ = ("_cancelling", "_expired", "_handle", "_task")

    def __init__(self, seconds: float) -> None:
        """Arm the deadline ``seconds`` from now, for the running task."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a Deadline is set inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._expired = False
        self._handle = loop.call_at(loop.time() + seconds, self._expire)

    def _expire(self) -> None:
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
        self._handle.cancel()
        if (
            self._expired
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc
