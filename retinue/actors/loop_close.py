"""What a runtime's event loop awaits as it closes, before it cancels what is left.

A part that leaves work on the loop which must not be cut off mid-way (the
LLM layer: litellm's logging callbacks) registers a closer with
:func:`at_close`; :class:`~retinue.actors.executor.LoopThread` awaits the
closers once its loop has stopped (:func:`run_closers`), each bounded, then
cancels every task left and waits for them.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable

__all__ = ["CLOSER_S", "Closer", "at_close", "run_closers", "runs_closers"]

log = logging.getLogger("retinue.executor")

Closer = Callable[[], Awaitable[None]]
"""An async function a closing loop awaits (see :func:`at_close`)."""

CLOSER_S = 5.0
"""The most seconds one closer may take; past it, it is cancelled and a warning logged."""

_CLOSERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Closer]] = (
    weakref.WeakKeyDictionary()
)


def runs_closers(loop: asyncio.AbstractEventLoop) -> None:
    """Mark ``loop`` as a runtime's own loop: it will run the closers registered on it."""
    _CLOSERS.setdefault(loop, [])


def at_close(loop: asyncio.AbstractEventLoop, closer: Closer) -> bool:
    """Have a runtime's ``loop`` await ``closer()`` as it closes, before it cancels its tasks.

    A closer registered again is awaited once. Only a runtime's own loop
    runs closers: for any other loop (a host's) nothing is registered and
    False is returned.
    """
    closers = _CLOSERS.get(loop)
    if closers is None:
        return False
    if closer not in closers:
        closers.append(closer)
    return True


def run_closers(loop: asyncio.AbstractEventLoop) -> None:
    """Await each closer of the stopped ``loop`` in turn, each bounded by :data:`CLOSER_S`.

    One that raises is logged and the next awaited; one that takes too long
    is cancelled, with a warning.
    """
    for closer in _CLOSERS.pop(loop, []):
        try:
            loop.run_until_complete(asyncio.wait_for(closer(), CLOSER_S))
        except TimeoutError:
            log.warning("closing the runtime's event loop: %r took over %s s", closer, CLOSER_S)
        except Exception:
            log.exception("closing the runtime's event loop: %r failed", closer)
