"""The commands of optional extras: ``retinue web``, ``retinue mcp`` and ``run --web``."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retinue.cli.common import OK, UsageError, store_path

if TYPE_CHECKING:
    from retinue.runtime import Runtime

__all__ = [
    "WEB_TOKEN_ENV",
    "WebRequest",
    "cmd_mcp",
    "cmd_web",
    "run_web",
    "start_web",
    "web_request",
]

WEB_TOKEN_ENV = "RETINUE_WEB_TOKEN"
"""The bearer token of ``retinue web`` and ``run --web`` (also ``retinue web --token``)."""


@dataclass(frozen=True)
class WebRequest:
    """What ``--web``, ``--actions`` and ``--trace-url`` asked of a run's web view."""

    address: str
    actions: bool = False
    trace_url: str | None = None


def web_request(args: argparse.Namespace) -> WebRequest | None:
    """Return the web view a run's arguments ask for (None: no ``--web``), checked.

    Raises:
        UsageError: ``--actions`` or ``--trace-url`` without ``--web``, or a bad trace URL.
    """
    address = getattr(args, "web", None)
    actions = bool(getattr(args, "actions", False))
    trace_url = getattr(args, "trace_url", None)
    if not address:
        if actions or trace_url:
            raise UsageError("--actions and --trace-url are options of the web view: add --web")
        return None
    return WebRequest(address, actions, _trace_url(trace_url))


def _trace_url(template: str | None) -> str | None:
    """``--trace-url`` checked before anything starts.

    Raises:
        UsageError: it is not an http(s) address with ``{trace_id}`` in it.
    """
    from retinue.errors import InvalidArgument
    from retinue.web.traces import check_trace_url

    try:
        return check_trace_url(template)
    except InvalidArgument as exc:
        raise UsageError(f"--trace-url: {exc}") from None


def start_web(rt: Runtime, request: WebRequest | None) -> Any:
    """Serve the run's live web view as ``--web`` (and ``--actions``, ``--trace-url``) asked.

    The token is ``$RETINUE_WEB_TOKEN`` (needed off loopback). Every interface
    needs the names clients use, which ``retinue web --allowed-host`` takes:
    ``--web`` refuses a wildcard address and says so. With ``--actions`` the
    page acts on the run in this process.

    Raises:
        UsageError: a wildcard address.
        InvalidArgument: a bad or unsafe address, or one that cannot be listened on.
    """
    if request is None:
        return None
    from retinue.serving import is_wildcard
    from retinue.web.server import parse_address
    from retinue.web.server import serve as serve_view

    address = request.address
    host, port = parse_address(address)
    if is_wildcard(host):
        raise UsageError(
            f"--web {address}: to serve every interface, run 'retinue web --store STORE "
            "--host 0.0.0.0 --allowed-host NAME' beside the run (it needs the names clients use)"
        )
    token = os.environ.get(WEB_TOKEN_ENV) or None
    _check_policy(host, port, token, ())
    web = serve_view(
        rt, host, port, token=token, actions=request.actions, trace_url=request.trace_url
    )
    acting = "; actions on" if request.actions else ""
    print(f"retinue: live view at {web.url}{acting}", file=sys.stderr, flush=True)
    return web


def _check_policy(host: str, port: int, token: str | None, allowed: Sequence[str]) -> None:
    """Refuse an unsafe bind with the command line's words.

    Raises:
        InvalidArgument: see :meth:`retinue.serving.ServerPolicy.for_bind`.
    """
    from retinue.serving import ServerPolicy

    source = f"${WEB_TOKEN_ENV} or --token"
    ServerPolicy.for_bind(host, port, token=token, allowed_hosts=allowed, token_source=source)


def cmd_web(args: argparse.Namespace) -> int:
    """``retinue web``: serve a store's live view in the browser, read-only."""
    token = args.token or os.environ.get(WEB_TOKEN_ENV) or None
    trace_url = _trace_url(args.trace_url)
    store = store_path(args.store, must_exist=True)
    return run_web(
        store,
        args.host,
        args.port,
        token=token,
        allowed_hosts=args.allowed_host or (),
        actions=args.actions,
        trace_url=trace_url,
    )


def cmd_mcp(args: argparse.Namespace) -> int:
    """``retinue mcp``: serve a store over MCP (see :mod:`retinue.mcp`)."""
    from retinue.mcp.serve import serve

    return serve(args, store_path(args.store, must_exist=False))


def run_web(
    store: Path,
    host: str,
    port: int,
    *,
    token: str | None = None,
    allowed_hosts: Sequence[str] = (),
    actions: bool = False,
    trace_url: str | None = None,
) -> int:
    """Open ``store`` read-only, serve its view on ``host:port`` until SIGINT/SIGTERM; return 0.

    Works beside the store's writer in another process. Off loopback it needs
    ``token``; on every interface also ``allowed_hosts``. With ``actions`` the
    page's buttons act through the running writer's control socket (and answer
    that actions need the writer while none runs); ``trace_url`` links trace ids.

    Raises:
        InvalidArgument: an unsafe bind, or the address cannot be listened on.
        StoreError: the store cannot be read.
    """
    from retinue.cli.follow import stop_on_signals
    from retinue.runtime import Runtime
    from retinue.web.server import serve

    host = host.strip().strip("[]")
    _check_policy(host, port, token, allowed_hosts)  # before the store is opened
    stop = threading.Event()
    rt = Runtime.open(store, readonly=True)
    acting = None
    try:
        if actions:
            from retinue.web.socket_actions import SocketActions

            acting = SocketActions(store)
        view = serve(
            rt,
            host,
            port,
            token=token,
            allowed_hosts=allowed_hosts,
            actions=acting if acting is not None else False,
            trace_url=trace_url,
        )
        with stop_on_signals(stop), view as web:
            where = web.policy.describe()
            locked = "; bearer token required" if token else ""
            mode = (
                "read-only; actions through the writer's control socket" if actions else "read-only"
            )
            print(
                f"retinue: live view of {store} at {web.url} (listening on {where}{locked}; "
                f"{mode}; Ctrl-C stops)",
                file=sys.stderr,
                flush=True,
            )
            while not stop.wait(1.0):
                pass
    finally:
        if acting is not None:
            acting.disconnect()
        rt.shutdown()
    return OK
