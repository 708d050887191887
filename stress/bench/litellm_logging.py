"""Settle litellm's background success logging, so a counted window holds its own calls' logging.

Every ``litellm.acompletion`` enqueues its success callback
(``Logging.async_success_handler``: the response cost, the zero-cost
diagnostic, the standard logging payload; ~2.7 million instructions under
callgrind) on litellm's logging worker (``GLOBAL_LOGGING_WORKER``), a task on
the loop that made the call, and returns without waiting for it. A long-lived
process runs each call's callback once. A window that starts right after a
call and ends right after another (and a process that ends then) does not:

- the last calls' callbacks may still be queued when the window opens, so
  some run inside it;
- when the loop is closed right after the last call, ``asyncio.run`` cancels
  the worker's tasks, and a callback the worker had taken but not started is
  lost, while one still queued is run by the worker's ``atexit`` flush on a
  new event loop.

Which of these happen depends on thread timing, so the count of callbacks in
a window of ``n`` calls was ``n - 1``, ``n`` or ``n + 1`` at random.
:func:`settle_logging` waits for litellm's enqueue tasks, then awaits the
worker's ``flush``, on the loop they are bound to. Called before a window
opens and before it closes, it makes every window hold exactly its calls'
callbacks, and the process end with none pending.
:func:`model_call_loop` finds that loop when the calls run on another
thread's loop (retinue's runtime loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["model_call_loop", "settle_logging"]

_SETTLE_TIMEOUT_S = 600.0
"""How long litellm's enqueue tasks may take to end (its default, 5 s, is short under callgrind)."""


async def settle_logging(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Wait until litellm has run the success callback of every model call made so far.

    Two steps, as litellm hands a callback on: its enqueue tasks
    (``drain_logging_tasks``), then its logging worker's queue (``flush``).
    ``loop``: the loop the model calls ran on (both are bound to it); ``None``
    or the running loop settles here, another loop there (thread-safe), and
    this waits for it.
    """
    if loop is None or loop is asyncio.get_running_loop():
        await _settle_here()
        return
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_settle_here(), loop))


async def _settle_here() -> None:
    """:func:`settle_logging` on the loop the model calls ran on."""
    from retinue.llm.model import load_litellm

    load_litellm()
    from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER
    from litellm.responses.streaming_iterator import drain_logging_tasks

    await drain_logging_tasks(timeout=_SETTLE_TIMEOUT_S)
    await GLOBAL_LOGGING_WORKER.flush()


@contextmanager
def model_call_loop() -> Iterator[list[asyncio.AbstractEventLoop]]:
    """Record the loop each ``litellm.acompletion`` runs on while the block runs.

    Yields the list the loops are appended to (one per call). The probe wraps
    ``litellm.acompletion`` and is put back as the block ends, so the calls
    made after it run litellm's own function.
    """
    from retinue.llm.model import load_litellm

    litellm = load_litellm()
    loops: list[asyncio.AbstractEventLoop] = []
    original = litellm.acompletion

    async def probe(**kwargs: Any) -> Any:
        loops.append(asyncio.get_running_loop())
        return await original(**kwargs)

    setattr(litellm, "acompletion", probe)  # noqa: B010 (a probe, put back below)
    try:
        yield loops
    finally:
        setattr(litellm, "acompletion", original)  # noqa: B010
