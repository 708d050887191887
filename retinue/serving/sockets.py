"""Listening sockets for retinue's HTTP servers: bound in the caller's thread, then served.

:func:`listen` binds before the server starts, so an address in use is an
error where the server is asked for, and ``port=0`` gives a free port whose
number (and the address really bound) is known at once.
"""

from __future__ import annotations

import ipaddress
import socket

from retinue.errors import InvalidArgument

__all__ = ["BACKLOG", "bound_address", "listen"]

BACKLOG = 128
"""Connections the kernel queues for a listening socket before refusing more."""


def _family(host: str) -> socket.AddressFamily:
    try:
        version = ipaddress.ip_address(host).version
    except ValueError:
        return socket.AF_INET  # a name such as localhost
    return socket.AF_INET6 if version == 6 else socket.AF_INET


def listen(
    host: str, port: int, *, hint: str = "choose another port (0 picks a free one)"
) -> socket.socket:
    """Return a socket listening on ``host:port`` (``host`` without brackets).

    Raises:
        InvalidArgument: it cannot listen there (in use, not an address of
            this machine); the message ends with ``hint``.
    """
    # IPPROTO_TCP (not 0): asyncio then sets TCP_NODELAY on each connection; without it a
    # response's headers and body, written apart, wait ~40 ms for a delayed ACK.
    sock = socket.socket(_family(host), socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        shown = f"[{host}]" if ":" in host else host
        raise InvalidArgument(
            f"cannot listen on {shown}:{port}: {exc.strerror or exc}; {hint}"
        ) from None
    sock.set_inheritable(False)
    return sock


def bound_address(sock: socket.socket) -> tuple[str, int]:
    """The (address, port) ``sock`` is really bound to (``localhost`` is ``127.0.0.1`` here)."""
    name = sock.getsockname()
    return str(name[0]), int(name[1])
