"""``retinue web [--store DIR] [--host H] [--port P]``: serve a store's live view until Ctrl-C."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from retinue.view import OK, stop_on_signals
from retinue.web.server import serve

__all__ = ["run_web"]


def run_web(store: Path, host: str, port: int) -> int:
    """Open ``store`` read-only, serve its view on ``host:port`` until SIGINT/SIGTERM; return 0.

    Works beside the store's writer in another process.

    Raises:
        InvalidArgument: the address cannot be listened on.
        StoreError: the store cannot be read.
    """
    from retinue.runtime import Runtime

    stop = threading.Event()
    rt = Runtime.open(store, readonly=True)
    try:
        with stop_on_signals(stop), serve(rt, host, port) as web:
            print(
                f"retinue: live view of {store} at {web.url} (read-only; Ctrl-C stops)",
                file=sys.stderr,
                flush=True,
            )
            while not stop.wait(1.0):
                pass
    finally:
        rt.shutdown()
    return OK
