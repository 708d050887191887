"""How a round of the races soak ends: the runtime closed one way or another, the store free.

The host, two threads at once, a runner, an async runner, or a coroutine on
the host's own event loop closes the runtime; whichever way, the store must
be free the moment a close returns (an immediate reopen must work).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from retinue import Runtime
from retinue.errors import StoreLocked
from stress.soak_races.ledger import Ledger

__all__ = ["ENDINGS", "end"]

ENDINGS = ["host", "two_threads", "runner", "async_runner", "loop"]


def end(rt: Runtime, how: str, path: Path, ledger: Ledger, holder: list[Runtime]) -> None:
    """Close the runtime ``how``; then the store must be free at once."""
    if how == "two_threads":
        closers = [threading.Thread(target=rt.shutdown) for _ in range(2)]
        for c in closers:
            c.start()
        closers[1].join()  # the second to return: the store must be free already
        _probe(path, ledger, how)
        closers[0].join()
        return
    if how in ("runner", "async_runner"):
        holder[0] = rt
        rt.spawn("w" if how == "runner" else "aw", "shutdown")
        deadline = time.monotonic() + 10
        while not rt.closed and time.monotonic() < deadline:
            time.sleep(0.001)
        rt.shutdown()
    elif how == "loop":

        async def close_on_loop() -> None:
            rt.shutdown()

        asyncio.run(close_on_loop())
    else:
        rt.shutdown()
    _probe(path, ledger, how)


def _probe(path: Path, ledger: Ledger, how: str) -> None:
    from retinue.persistence.lock import WriterLock

    try:
        WriterLock(path).release()
    except StoreLocked as exc:
        ledger.problem(f"close ({how}) returned before the store was released: {exc}")
