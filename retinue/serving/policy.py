"""The rules every retinue HTTP server follows: where it may listen, and which requests it answers.

A :class:`ServerPolicy` is made once per server by :meth:`ServerPolicy.for_bind`,
which refuses an unsafe start: a wildcard (``0.0.0.0``, ``::``) or
non-loopback address needs a bearer token, and a wildcard also the names
clients reach it by (``allowed_hosts``). Then, for every request:

- the ``Host`` header must name a loopback alias (``localhost``, any address
  of ``127.0.0.0/8``, ``::1``, parsed as addresses, not compared as strings),
  the address bound, or an allowed name (against DNS rebinding: a page of
  ``evil.example`` made to resolve to ``127.0.0.1`` sends ``Host: evil.example``);
- an ``Origin`` header, when sent, must name one of those hosts (any port,
  ``http`` or ``https``), else the request came from another site's page;
- with a token, ``Authorization: Bearer <token>`` must carry it (the scheme in
  any case, RFC 9110; the token compared in constant time).

Pure rules: no socket, no framework (the ASGI guard is :mod:`retinue.serving.asgi`).
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from retinue.errors import ArgumentTypeError, InvalidArgument

__all__ = [
    "WILDCARDS",
    "ServerPolicy",
    "check_token",
    "host_of",
    "is_loopback",
    "is_wildcard",
    "split_address",
]

WILDCARDS = ("0.0.0.0", "::")
"""Addresses that listen on every interface."""
_TOKEN = re.compile(r"[\x21-\x7e]+")  # what an Authorization header can carry as is
_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
MAX_NAME = 253


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, brackets allowed) is a loopback alias.

    ``localhost`` (any case), every address of ``127.0.0.0/8``, ``::1`` and
    the IPv4-mapped ``::ffff:127.x.y.z``.
    """
    text = host.strip().strip("[]").lower()
    if text == "localhost":
        return True
    found = _address(text)
    if found is None:
        return False
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped.is_loopback
    return found.is_loopback


def is_wildcard(host: str) -> bool:
    """Whether ``host`` listens on every interface (``0.0.0.0``, ``::``, or blank)."""
    text = host.strip().strip("[]")
    found = _address(text) if text else None
    return not text or (found is not None and found.is_unspecified)


def host_of(authority: str) -> str | None:
    """The host of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lowercased.

    Returns None for a header that is not such an authority.
    """
    text = authority.strip().lower()
    if text.startswith("["):
        inside, close, rest = text[1:].partition("]")
        if not close or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return inside if _address(inside) is not None else None
    name, colon, port = text.partition(":")
    if colon and not port.isdigit():
        return None
    if not name or len(name) > MAX_NAME:
        return None
    return name if _address(name) is not None or _NAME.fullmatch(name) else None


def split_address(text: str, default_host: str, default_port: int) -> tuple[str, int]:
    """Split ``HOST:PORT``, ``:PORT``, ``PORT``, ``HOST`` or ``[V6]:PORT`` into (host, port).

    The host comes back without brackets.

    Raises:
        InvalidArgument: the port is not a number from 0 to 65535, or the
            brackets of an IPv6 address are not closed.
    """
    raw = text.strip()
    host, port_text = default_host, ""
    if raw.startswith("["):
        inside, close, rest = raw[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise InvalidArgument(f"{raw[:60]!r}: write an IPv6 address as [ADDRESS]:PORT")
        host, port_text = inside, rest[1:]
    elif raw.isdigit():
        port_text = raw
    elif ":" in raw:
        host_part, _, port_text = raw.rpartition(":")
        host = host_part or default_host
    elif raw:
        host = raw
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or int(port_text) > 65535:
        raise InvalidArgument(
            f"{raw[:60]!r}: the port must be a number from 0 to 65535 (0: any free one)"
        )
    return host, int(port_text)


def check_token(token: object, source: str) -> str | None:
    """Return ``token`` checked (None: no token), naming ``source`` in errors.

    Raises:
        ArgumentTypeError: not a str.
        InvalidArgument: blank, or holding a space or a character a header
            cannot carry as is (only visible ASCII).
    """
    if token is None:
        return None
    if not isinstance(token, str):
        raise ArgumentTypeError(f"{source} must be a str, not {type(token).__name__}")
    if not _TOKEN.fullmatch(token):
        raise InvalidArgument(
            f"{source} must be visible ASCII without spaces (it goes in an Authorization header)"
        )
    return token


def _allowed_names(names: Iterable[object]) -> tuple[str, ...]:
    if isinstance(names, str):
        raise ArgumentTypeError("allowed_hosts must be a list of names, not one str")
    checked: list[str] = []
    for name in names:
        if not isinstance(name, str):
            raise ArgumentTypeError(f"an allowed host must be a str, not {type(name).__name__}")
        text = name.strip().lower()
        inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
        if _address(inner) is None and (len(inner) > MAX_NAME or not _NAME.fullmatch(inner)):
            raise InvalidArgument(
                f"allowed host {name[:60]!r} is not a host name or address "
                "(give it without scheme or port, e.g. retinue.example.com or 192.0.2.7)"
            )
        checked.append(inner)
    return tuple(dict.fromkeys(checked))


@dataclass(frozen=True)
class ServerPolicy:
    """What one server answers: its bound address, the extra names it answers to, its token.

    Build it with :meth:`for_bind`; ``host`` is the address bound (no
    brackets) and ``port`` the port bound.
    """

    host: str
    port: int
    token: str | None = None
    allowed_hosts: tuple[str, ...] = ()

    @classmethod
    def for_bind(
        cls,
        host: str,
        port: int,
        *,
        token: str | None = None,
        allowed_hosts: Iterable[str] = (),
        token_source: str = "token",
    ) -> ServerPolicy:
        """Check that serving on ``host`` is safe with ``token`` and ``allowed_hosts``; return it.

        Loopback needs nothing (a token, when given, is still required of
        every request). A non-loopback address needs a token; a wildcard
        address also at least one allowed host (the names or addresses
        clients use to reach this machine). ``token_source`` names where the
        token is set, for the error (``$RETINUE_WEB_TOKEN or --token``).

        Raises:
            ArgumentTypeError: a token or an allowed host that is not a str.
            InvalidArgument: a bad token or allowed host, or an unsafe bind.
        """
        bound = host.strip().strip("[]")
        checked = check_token(token, token_source)
        names = _allowed_names(allowed_hosts)
        if not is_loopback(bound):
            where = f"{bound or '0.0.0.0'} (every interface)" if is_wildcard(bound) else bound
            if checked is None:
                raise InvalidArgument(
                    f"refusing to serve on {where} without a bearer token: set {token_source}; "
                    "or listen on a loopback address such as 127.0.0.1"
                )
            if is_wildcard(bound) and not names:
                raise InvalidArgument(
                    f"serving on {where} needs the names clients reach it by: give "
                    "--allowed-host NAME (the machine's DNS name or address; repeatable)"
                )
        return cls(bound, port, checked, names)

    def _answers_to(self, host: str) -> bool:
        if is_loopback(host):
            return True
        found = _address(host)
        for name in (*self.allowed_hosts, *(() if is_wildcard(self.host) else (self.host,))):
            other = _address(name)
            if (found is not None and other is not None and found == other) or host == name:
                return True
        return False

    def host_allowed(self, header: str | None) -> bool:
        """Whether a request's ``Host`` header names this server (a missing one does not)."""
        host = host_of(header) if header else None
        return host is not None and self._answers_to(host)

    def origin_allowed(self, header: str | None) -> bool:
        """Whether a request's ``Origin`` header (absent: a same-origin or non-browser
        request) is a page of one of the hosts this server answers to."""
        if header is None:
            return True
        try:
            parts = urlsplit(header.strip())
            port = parts.port
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
            return False
        return self._answers_to(parts.hostname.lower())

    def authorized(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries the token (always, without a token)."""
        if self.token is None:
            return True
        scheme, _, credentials = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return self.token_matches(credentials.strip())

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` is the token, compared in constant time (False without a token)."""
        if self.token is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode())

    def url(self, path: str = "/") -> str:
        """The address this server really serves ``path`` at.

        The bound address and port; on a wildcard bind, the first allowed host
        (``127.0.0.1`` if none).
        """
        host = self.host
        if is_wildcard(host):
            host = self.allowed_hosts[0] if self.allowed_hosts else "127.0.0.1"
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}{path}"

    def describe(self) -> str:
        """Where it listens, for a startup line: ``127.0.0.1:8321`` or ``0.0.0.0:8321 (every
        interface)``."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        wide = " (every interface)" if is_wildcard(self.host) else ""
        return f"{shown}:{self.port}{wide}"
