"""litellm's async logging on a runtime's event loop: let it finish before the loop closes.

litellm runs its success and failure callbacks (its own bookkeeping and the
host's ``litellm.callbacks``: Langfuse, a ``CustomLogger``, ...) after the
answer is returned, as tasks of its logging worker on the loop that made the
call. A runtime that shuts down right after a model turn would cancel them
with the loop's other tasks, so the host's callbacks were lost (and older
litellm versions printed ``Task was destroyed but it is pending!``).

A model turn registers :func:`finish_logging` with its loop
(:func:`~retinue.actors.turns._loop_close.at_close`): as the runtime's loop closes,
it waits up to :data:`FLUSH_S` for the callbacks queued on it, then stops
litellm's worker cleanly. Callbacks still running then are cancelled (with a
warning); callbacks not yet started stay queued, and litellm runs them on the
next loop it is used on, or at the process's exit.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

from retinue.actors.turns import at_close

__all__ = ["FLUSH_S", "finish_logging", "finish_logging_at_close"]

log = logging.getLogger("retinue.llm")

FLUSH_S = 2.0
"""The most seconds a closing runtime waits for litellm's logging callbacks.

Set ``retinue.llm.model._litellm_logging.FLUSH_S`` to wait longer (up to
:data:`~retinue.actors.turns._loop_close.CLOSER_S` in all).
"""

_WORKER_MODULE = "litellm.litellm_core_utils.logging_worker"


def _worker_on(loop: asyncio.AbstractEventLoop) -> Any:
    """Return litellm's logging worker if it works on ``loop`` (None: not loaded, or elsewhere)."""
    module = sys.modules.get(_WORKER_MODULE)
    worker = getattr(module, "GLOBAL_LOGGING_WORKER", None)
    if worker is None or getattr(worker, "_bound_loop", None) is not loop:
        return None  # never touch a worker bound to another (live) loop
    return worker


def _logging_tasks() -> list[asyncio.Task[Any]]:
    """Return the running loop's tasks that run litellm's code, but its logging worker's.

    A streamed answer's success callbacks are such tasks (litellm starts them
    with ``asyncio.create_task``); the worker is flushed on its own.
    """
    found = []
    for task in asyncio.all_tasks():
        frame = getattr(task.get_coro(), "cr_frame", None)
        module = "" if frame is None else str(frame.f_globals.get("__name__", ""))
        if module.startswith("litellm.") and module != _WORKER_MODULE:
            found.append(task)
    return found


async def finish_logging() -> None:
    """Let litellm's logging callbacks on this loop finish (up to :data:`FLUSH_S`); stop its worker.

    Callbacks still running after :data:`FLUSH_S` are left to the loop,
    which cancels them (a warning says so).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FLUSH_S
    worker = _worker_on(loop)
    late = False
    strays = _logging_tasks()
    if strays:
        _, pending = await asyncio.wait(strays, timeout=FLUSH_S)
        late = bool(pending)
    if worker is not None:
        try:
            await asyncio.wait_for(worker.flush(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            late = True
        await worker.stop()
    if late:
        log.warning(
            "litellm's logging callbacks took over %s s as the runtime closed; those still "
            "running are cancelled (raise retinue.llm.model._litellm_logging.FLUSH_S to "
            "wait longer)",
            FLUSH_S,
        )


def finish_logging_at_close() -> None:
    """Have the running loop, if it is a runtime's, finish litellm's logging as it closes."""
    at_close(asyncio.get_running_loop(), finish_logging)
