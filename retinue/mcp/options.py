"""The ``retinue mcp`` command line: its options and the listening address rules (no SDK import).

The rules of :mod:`retinue.serving` apply; on top, a non-loopback address
must be named with ``--host`` explicitly (``--http 0.0.0.0:8765`` alone is
refused).
"""

from __future__ import annotations

import argparse

from retinue.errors import InvalidArgument
from retinue.serving import is_loopback, split_address

__all__ = ["TOKEN_ENV", "add_arguments", "listen_address"]

TOKEN_ENV = "RETINUE_MCP_TOKEN"
"""The environment variable holding the bearer token HTTP clients must send."""


def add_arguments(parser: argparse.ArgumentParser, store_help: str) -> None:
    """Add the options of ``retinue mcp`` to ``parser``."""
    parser.add_argument("--store", help=store_help)
    parser.add_argument(
        "--team",
        help="team file whose agents run_team and spawn start (default: the one the store "
        "was run with, if any)",
    )
    parser.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(HOST default 127.0.0.1; PORT 0 picks a free one, printed on stderr)",
    )
    parser.add_argument(
        "--host",
        help="listen on this non-loopback address (needs --http and a bearer token; 0.0.0.0 "
        "or :: also --allowed-host)",
    )
    parser.add_argument(
        "--token",
        help=f"bearer token every HTTP request must carry (default: ${TOKEN_ENV}, which keeps "
        "it out of the process list)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="a name or address clients reach this machine by, answered besides the loopback "
        "names and the address bound (repeatable; with --http)",
    )


def listen_address(http: str, host: str | None, token: str | None) -> tuple[str, int]:
    """Return the (host, port) to listen on for ``--http`` and ``--host``.

    Raises:
        ValueError: a bad port or address, or a non-loopback host without
            ``--host`` given explicitly and a bearer token set.
    """
    text = http.strip()
    port_text = text.rpartition(":")[2]
    if not port_text.isdigit():
        raise ValueError(f"--http {http!r}: give [HOST:]PORT, e.g. 127.0.0.1:8765")
    try:
        bind, port = split_address(text, "127.0.0.1", 0)
    except InvalidArgument:
        raise ValueError(f"--http {http!r}: port {port_text} is not 0-65535") from None
    if host is not None:
        host = host.strip().strip("[]")
        if bind != "127.0.0.1" and bind != host:
            raise ValueError(f"--http names host {bind!r} and --host {host!r}; give one")
        bind = host
    if not is_loopback(bind):
        if host is None:
            raise ValueError(
                f"refusing to listen on {bind!r}, which is not a loopback address: pass "
                f"--host {bind} explicitly and set a bearer token (${TOKEN_ENV} or --token)"
            )
        if not token:
            raise ValueError(
                f"refusing to listen on {bind!r} without a bearer token: set ${TOKEN_ENV} "
                "or --token"
            )
    return bind, port
