"""Serving the web view: uvicorn on a background thread, bound before it starts.

:func:`serve` binds the socket in the caller's thread (so a port in use is an
error there, and ``port=0`` picks a free one whose number is known at once),
starts the live tree's poller and uvicorn on a thread of their own, and
returns a :class:`WebServer` whose :meth:`~WebServer.stop` ends both.
:func:`start_web` is the same from a ``HOST:PORT`` text (``retinue run --web``).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING

import uvicorn

from retinue.errors import ArgumentTypeError, InvalidArgument
from retinue.web.app import LOOPBACK_HOSTS, create_app
from retinue.web.live import LiveTree
from retinue.web.options import WebOptions

if TYPE_CHECKING:
    from retinue.runtime import Runtime

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "WebServer", "parse_address", "serve", "start_web"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321
START_TIMEOUT_S = 10.0
STOP_GRACE_S = 2  # open streams get this long to end before their connections are cut


class WebServer:
    """A running web view: its address, its live tree, and :meth:`stop`."""

    def __init__(
        self, live: LiveTree, server: uvicorn.Server, thread: threading.Thread, host: str, port: int
    ) -> None:
        """Use :func:`serve`."""
        self.live = live
        self.host = host
        self.port = port
        self._server = server
        self._thread = thread
        self._stopped = False

    @property
    def url(self) -> str:
        """The page's address, e.g. ``http://127.0.0.1:8321/``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"http://{host}:{self.port}/"

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


def _bind(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        family = socket.AF_INET  # a name such as localhost
    # IPPROTO_TCP (not 0): asyncio then sets TCP_NODELAY on each connection; without it a
    # response's headers and body, written apart, wait ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise InvalidArgument(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
            "choose another --port (0 picks a free one) or --host"
        ) from None
    sock.set_inheritable(False)
    return sock


def serve(
    rt: Runtime,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    options: WebOptions | None = None,
) -> WebServer:
    """Serve the live web view of ``rt`` (a writer or a read-only runtime) on ``host:port``.

    Binds ``127.0.0.1`` unless ``host`` says otherwise; ``port=0`` picks a free
    port (see :attr:`WebServer.url`). Returns once the server accepts requests;
    it runs on a background thread until :meth:`WebServer.stop`, which the
    caller must call before closing ``rt``.

    Raises:
        ArgumentTypeError: ``host`` or ``port`` of the wrong type.
        InvalidArgument: a bad port, or the address cannot be listened on (in use).
    """
    host, port = _check(host, port)
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    allowed = ["*"] if host in ("0.0.0.0", "::") else [*LOOPBACK_HOSTS, host]
    live = LiveTree(rt, options)
    app = create_app(live, allowed_hosts=allowed)
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
    web = WebServer(live, server, thread, host, bound)
    if not server.started:
        web.stop()
        sock.close()
        raise InvalidArgument(f"the web view did not start on {host}:{bound}")
    return web


def parse_address(address: str) -> tuple[str, int]:
    """Split ``HOST:PORT``, ``:PORT``, ``PORT`` or ``HOST`` (``[::1]:8321`` for IPv6).

    Raises:
        InvalidArgument: the text is not such an address.
    """
    text = address.strip()
    host, port = DEFAULT_HOST, DEFAULT_PORT
    if text.startswith("["):
        inside, _, rest = text[1:].partition("]")
        host, text = inside, rest.removeprefix(":")
        port_text = text
    elif text.isdigit():
        port_text = text
    elif ":" in text:
        host_part, _, port_text = text.rpartition(":")
        host = host_part or DEFAULT_HOST
    else:
        host, port_text = text or DEFAULT_HOST, ""
    if port_text:
        if not port_text.isdigit():
            raise InvalidArgument(f"--web {address[:60]!r}: the port must be a number (HOST:PORT)")
        port = int(port_text)
    return host, port


def start_web(rt: Runtime, address: str, *, options: WebOptions | None = None) -> WebServer:
    """Serve ``rt``'s live view on ``address`` (``HOST:PORT``) in the background; return it.

    Raises:
        InvalidArgument: a bad address, or one that cannot be listened on.
    """
    host, port = parse_address(address)
    return serve(rt, host, port, options=options)
