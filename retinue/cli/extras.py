"""The commands of optional extras: ``retinue web``, ``retinue mcp`` and ``run --web``."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retinue.cli.common import OK, store_path

if TYPE_CHECKING:
    from retinue.runtime import Runtime

__all__ = ["cmd_mcp", "cmd_web", "run_web", "start_web"]


def start_web(rt: Runtime, address: str | None) -> Any:
    """Serve the run's live web view on ``address`` when ``--web`` was given."""
    if not address:
        return None
    from retinue.web import start_web as serve_run

    web = serve_run(rt, address)
    print(f"retinue: live view at {web.url}", file=sys.stderr, flush=True)
    return web


def cmd_web(args: argparse.Namespace) -> int:
    """``retinue web``: serve a store's live view in the browser, read-only."""
    return run_web(store_path(args.store, must_exist=True), args.host, args.port)


def cmd_mcp(args: argparse.Namespace) -> int:
    """``retinue mcp``: serve a store over MCP (see :mod:`retinue.mcp`)."""
    from retinue.mcp.serve import serve

    return serve(args, store_path(args.store, must_exist=False))


def run_web(store: Path, host: str, port: int) -> int:
    """Open ``store`` read-only, serve its view on ``host:port`` until SIGINT/SIGTERM; return 0.

    Works beside the store's writer in another process.

    Raises:
        InvalidArgument: the address cannot be listened on.
        StoreError: the store cannot be read.
    """
    from retinue.cli.follow import stop_on_signals
    from retinue.runtime import Runtime
    from retinue.web.server import serve

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
