"""Serving the web view: uvicorn on a background thread, bound before it starts.

:func:`serve` checks the server policy (:mod:`retinue.serving`: loopback by
default; a wildcard or non-loopback address needs a bearer token, a wildcard
also the names clients use), binds the socket in the caller's thread (so a
port in use is an error there, and ``port=0`` picks a free one whose number
is known at once), starts the live tree's poller and uvicorn on a thread of
their own, and returns a :class:`WebServer` whose :meth:`~WebServer.stop`
ends both. :func:`start_web` is the same from a ``HOST:PORT`` text
(``retinue run --web``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING

import uvicorn

from retinue.errors import ArgumentTypeError, InvalidArgument
from retinue.serving import (
    ServerPolicy,
    bound_address,
    is_loopback,
    is_wildcard,
    listen,
    split_address,
)
from retinue.web.actions import Actions, RuntimeActions, WriterNeeded
from retinue.web.app import create_app
from retinue.web.live import LiveTree
from retinue.web.options import WebOptions
from retinue.web.traces import check_trace_url

if TYPE_CHECKING:
    from retinue.runtime import Runtime

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "TOKEN_ENV",
    "WebServer",
    "parse_address",
    "serve",
    "start_web",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321
TOKEN_ENV = "RETINUE_WEB_TOKEN"
"""The environment variable holding the bearer token of ``retinue web`` and ``run --web``."""
START_TIMEOUT_S = 10.0
STOP_GRACE_S = 2  # open streams get this long to end before their connections are cut


class WebServer:
    """A running web view: its address, its live tree, and :meth:`stop`."""

    def __init__(
        self,
        live: LiveTree,
        server: uvicorn.Server,
        thread: threading.Thread,
        policy: ServerPolicy,
    ) -> None:
        """Use :func:`serve`."""
        self.live = live
        self.policy = policy
        self.host = policy.host
        """The address really bound (``127.0.0.1`` for ``localhost``; ``0.0.0.0`` for every
        interface)."""
        self.port = policy.port
        """The port really bound (the free one ``port=0`` picked)."""
        self._server = server
        self._thread = thread
        self._stopped = False

    @property
    def url(self) -> str:
        """The page's address as served, e.g. ``http://127.0.0.1:8321/``.

        On a wildcard bind, the first allowed host's (the name clients use).
        """
        return self.policy.url("/")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (open streams end) and the poller; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.live.stop()
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> WebServer:
        """Return the server; leaving the block stops it."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server."""
        self.stop()


def _check(host: object, port: object) -> tuple[str, int]:
    if not isinstance(host, str):
        raise ArgumentTypeError(f"host must be a str, not {type(host).__name__}")
    if isinstance(port, bool) or not isinstance(port, int):
        raise ArgumentTypeError(f"port must be an int, not {type(port).__name__}")
    if not host.strip() or "\x00" in host:
        raise InvalidArgument("host is blank; give an address such as 127.0.0.1")
    if not 0 <= port <= 65535:
        raise InvalidArgument(f"port must be between 0 and 65535 (0: any free port), not {port}")
    return host.strip().strip("[]"), port


def serve(
    rt: Runtime,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    options: WebOptions | None = None,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    actions: bool | Actions = False,
    trace_url: str | None = None,
) -> WebServer:
    """Serve the live web view of ``rt`` (a writer or a read-only runtime) on ``host:port``.

    Binds ``127.0.0.1`` unless ``host`` says otherwise; ``port=0`` picks a free
    port (see :attr:`WebServer.url`). Answers only requests whose ``Host`` and
    ``Origin`` name a loopback alias, the address bound or one of
    ``allowed_hosts``. A wildcard (``0.0.0.0``, ``::``) or non-loopback
    ``host`` needs a bearer ``token``, and a wildcard also ``allowed_hosts``;
    with a token every request must carry it (see :mod:`retinue.serving`).
    Returns once the server accepts requests; it runs on a background thread
    until :meth:`WebServer.stop`, which the caller must call before closing
    ``rt``.

    ``actions=True`` adds approve, deny, interrupt, interrupt tree, resume
    and close to an agent's detail: through ``rt`` when it is the writer;
    a read-only ``rt`` answers each with ``StoreReadOnly`` (the actions need
    the writer). An :class:`~retinue.web.actions.Actions` acts through it
    instead. ``trace_url`` (e.g. ``http://127.0.0.1:16686/trace/{trace_id}``)
    links an agent's trace id.

    Raises:
        ArgumentTypeError: ``host``, ``port``, ``token``, an allowed host,
            ``actions`` or ``trace_url`` of the wrong type.
        InvalidArgument: a bad port, token, allowed host or trace URL, an
            unsafe bind (see above), or an address that cannot be listened on
            (in use).
    """
    host, port = _check(host, port)
    acting = _actions(rt, actions)
    trace_url = check_trace_url(trace_url)
    if isinstance(allowed_hosts, str):
        raise ArgumentTypeError("allowed_hosts must be a list of names, not one str")
    # A name is bound as it resolves; clients use the name.
    names = [*allowed_hosts, *([host] if _is_name(host) else [])]
    policy = ServerPolicy.for_bind(host, port, token=token, allowed_hosts=names)
    sock = listen(host, port, hint="choose another --port (0 picks a free one) or --host")
    bound, port = bound_address(sock)
    policy = dataclasses.replace(policy, host=bound, port=port)
    live = LiveTree(rt, options)
    app = create_app(live, policy=policy, actions=acting, trace_url=trace_url)
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=STOP_GRACE_S,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="retinue-web", daemon=True
    )
    live.start()
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    web = WebServer(live, server, thread, policy)
    if not server.started:
        web.stop()
        sock.close()
        raise InvalidArgument(f"the web view did not start on {policy.describe()}")
    return web


def _actions(rt: Runtime, actions: object) -> Actions | None:
    """The actions a view of ``rt`` offers for ``serve``'s ``actions`` argument.

    Raises:
        ArgumentTypeError: neither a bool nor an object with the actions' methods.
    """
    if actions is False:
        return None
    if actions is True:
        return WriterNeeded() if rt.readonly else RuntimeActions(rt)
    needed = ("approve", "deny", "interrupt", "interrupt_tree", "resume", "close")
    if isinstance(actions, bool | int) or not all(hasattr(actions, m) for m in needed):
        raise ArgumentTypeError(
            f"actions must be True, False or an Actions object, not {type(actions).__name__}"
        )
    found: Actions = actions  # type: ignore[assignment]  # checked just above
    return found


def _is_name(host: str) -> bool:
    """Whether ``host`` is a DNS name other than a loopback or wildcard one."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return not is_loopback(host) and not is_wildcard(host)
    return False


def parse_address(address: str) -> tuple[str, int]:
    """Split ``HOST:PORT``, ``:PORT``, ``PORT`` or ``HOST`` (``[::1]:8321`` for IPv6).

    Raises:
        InvalidArgument: the text is not such an address.
    """
    try:
        return split_address(address, DEFAULT_HOST, DEFAULT_PORT)
    except InvalidArgument as exc:
        raise InvalidArgument(f"--web {exc} (HOST:PORT)") from None


def start_web(
    rt: Runtime,
    address: str,
    *,
    options: WebOptions | None = None,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    actions: bool | Actions = False,
    trace_url: str | None = None,
) -> WebServer:
    """Serve ``rt``'s live view on ``address`` (``HOST:PORT``) in the background; return it.

    ``token``, ``allowed_hosts``, ``actions`` and ``trace_url`` as :func:`serve`
    takes them.

    Raises:
        InvalidArgument: a bad address or trace URL, an unsafe bind, or one that
            cannot be listened on.
    """
    host, port = parse_address(address)
    return serve(
        rt,
        host,
        port,
        options=options,
        token=token,
        allowed_hosts=allowed_hosts,
        actions=actions,
        trace_url=trace_url,
    )
