"""What a runtime's event loop does as it closes, in two phases.

A runtime's own loop (marked with :func:`runs_closers` when
:class:`~retinue.actors.turns._executor.LoopThread` makes it) closes in two steps
once it has stopped:

1. it awaits each *closer* registered with :func:`at_close`, each bounded by
   :data:`CLOSER_S` (:func:`run_closers`): work that must not be cut off
   mid-way (the LLM layer's: litellm's logging callbacks);
2. it cancels every task left and waits for them, then calls each callback
   registered with :func:`at_loop_close` (:func:`run_after_tasks`): what
   serves the loop's tasks and must end with it (the tool pool's threads).

Any other loop (a host's) runs neither: registering on it returns False.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = [
    "CLOSER_S",
    "Closer",
    "at_close",
    "at_loop_close",
    "run_after_tasks",
    "run_closers",
    "runs_closers",
]

log = logging.getLogger("retinue.executor")

Closer = Callable[[], Awaitable[None]]
"""An async function a closing loop awaits (see :func:`at_close`)."""

CLOSER_S = 5.0
"""The most seconds one closer may take; past it, it is cancelled and a warning logged."""


class _Closing:
    """What one runtime loop runs as it closes: closers first, callbacks after its tasks."""

    __slots__ = ("after_tasks", "closers")

    def __init__(self) -> None:
        self.closers: list[Closer] = []
        self.after_tasks: list[Callable[[], Any]] = []


_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Closing] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_last: tuple[weakref.ref[asyncio.AbstractEventLoop], _Closing] | None = None
"""The loop :func:`at_close` last registered on, and what it runs as it closes: a closer
registered on it again (every model turn registers litellm's logging on its runtime's one
loop) is found there, with no lock taken nor weak key built (forgotten as the loop closes)."""


def runs_closers(loop: asyncio.AbstractEventLoop) -> None:
    """Mark ``loop`` as a runtime's own loop: it will run what is registered on it."""
    with _lock:
        _LOOPS.setdefault(loop, _Closing())


def at_close(loop: asyncio.AbstractEventLoop, closer: Closer) -> bool:
    """Have a runtime's ``loop`` await ``closer()`` as it closes, before it cancels its tasks.

    A closer registered again is awaited once. Only a runtime's own loop
    runs closers: for any other loop (a host's), or one already closing,
    nothing is registered and False is returned.
    """
    global _last
    last = _last
    if last is not None and last[0]() is loop and closer in last[1].closers:
        return True  # registered already
    with _lock:
        closing = _LOOPS.get(loop)
        if closing is None:
            return False
        if closer not in closing.closers:
            closing.closers.append(closer)
        _last = (weakref.ref(loop), closing)
    return True


def at_loop_close(loop: asyncio.AbstractEventLoop, callback: Callable[[], Any]) -> bool:
    """Call ``callback()`` when ``loop``, a runtime's event loop, closes; False for another loop.

    It runs on the loop's thread once every task has ended, before the loop
    closes (so what serves the loop's tasks, the tool pool's threads, ends
    with the runtime); an exception it raises is logged.
    """
    with _lock:
        closing = _LOOPS.get(loop)
        if closing is None or loop.is_closed():
            return False
        closing.after_tasks.append(callback)
    return True


def run_closers(loop: asyncio.AbstractEventLoop) -> None:
    """Await each closer of the stopped ``loop`` in turn, each bounded by :data:`CLOSER_S`.

    One that raises is logged and the next awaited; one that takes too long
    is cancelled, with a warning.
    """
    with _lock:
        closing = _LOOPS.get(loop)
        closers = [] if closing is None else list(closing.closers)
    for closer in closers:
        try:
            loop.run_until_complete(asyncio.wait_for(closer(), CLOSER_S))
        except TimeoutError:
            log.warning("closing the runtime's event loop: %r took over %s s", closer, CLOSER_S)
        except Exception:
            log.exception("closing the runtime's event loop: %r failed", closer)


def run_after_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Call each callback registered with :func:`at_loop_close`, then forget ``loop``.

    Runs on the loop's thread once its tasks have ended; one that raises is
    logged and the next called.
    """
    global _last
    with _lock:
        closing = _LOOPS.pop(loop, None)
        if _last is not None and _last[1] is closing:
            _last = None
    for callback in [] if closing is None else closing.after_tasks:
        try:
            callback()
        except Exception:
            log.exception("a callback at the close of the runtime's event loop failed")
