"""The ``retinue mcp`` command line: its options and the listening address rules (no SDK import)."""

from __future__ import annotations

import argparse
import ipaddress

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
        help="listen on this non-loopback address "
        f"(needs --http and a bearer token in ${TOKEN_ENV})",
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listen_address(http: str, host: str | None, token: str | None) -> tuple[str, int]:
    """Return the (host, port) to listen on for ``--http`` and ``--host``.

    Raises:
        ValueError: a bad port or address, or a non-loopback host without
            ``--host`` given explicitly and a bearer token set.
    """
    bind, _, port_text = http.rpartition(":")
    bind = bind or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"--http {http!r}: give [HOST:]PORT, e.g. 127.0.0.1:8765") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"--http {http!r}: port {port} is not 0-65535")
    if host is not None:
        if bind != "127.0.0.1" and bind != host:
            raise ValueError(f"--http names host {bind!r} and --host {host!r}; give one")
        bind = host
    if not _is_loopback(bind):
        if host is None:
            raise ValueError(
                f"refusing to listen on {bind!r}, which is not a loopback address: pass "
                f"--host {bind} explicitly and set a bearer token in ${TOKEN_ENV}"
            )
        if not token:
            raise ValueError(
                f"refusing to listen on {bind!r} without a bearer token: set ${TOKEN_ENV}"
            )
    return bind, port
