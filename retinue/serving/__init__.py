"""One policy for every retinue HTTP server: the web view and ``retinue mcp --http``.

- :mod:`~retinue.serving.policy`: :class:`ServerPolicy`, where a server may
  listen (loopback by default; a wildcard or non-loopback address needs a
  bearer token, a wildcard also ``allowed_hosts``) and which requests it
  answers (``Host`` and ``Origin`` against every loopback alias, the bound
  address and the allowed names, parsed as addresses; the bearer token, its
  scheme in any case, compared in constant time); the URL it really serves.
- :mod:`~retinue.serving.asgi`: :class:`Guard`, the ASGI middleware that
  applies a policy to every request.
- :mod:`~retinue.serving.sockets`: :func:`listen`, the socket bound before
  the server starts.

Neutral ground: it imports nothing of retinue but its errors, and no web
framework, so both servers (and a host's own ASGI server) use it.
"""

from __future__ import annotations

from retinue.serving.asgi import TOKEN_QUERY, Guard, cookie_name
from retinue.serving.policy import (
    WILDCARDS,
    ServerPolicy,
    check_token,
    host_of,
    is_loopback,
    is_wildcard,
    split_address,
)
from retinue.serving.sockets import bound_address, listen

__all__ = [
    "TOKEN_QUERY",
    "WILDCARDS",
    "Guard",
    "ServerPolicy",
    "bound_address",
    "check_token",
    "cookie_name",
    "host_of",
    "is_loopback",
    "is_wildcard",
    "listen",
    "split_address",
]
