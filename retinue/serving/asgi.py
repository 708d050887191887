"""The ASGI guard in front of every retinue HTTP app: Host, Origin and the bearer token.

:class:`Guard` wraps an ASGI app and answers a refused request itself,
before the app sees it, with JSON ``{"error": "..."}`` saying what to do:
``421`` for a ``Host`` the server does not answer to, ``403`` for an
``Origin`` of another site, ``401`` (with ``WWW-Authenticate: Bearer``) for a
missing or wrong token. With ``cookie`` set (the web view, whose page and
event stream a browser opens without headers of ours), a ``GET`` whose query
carries ``token=<token>`` sets that cookie (``HttpOnly``, ``SameSite=Strict``)
and redirects to the same address without it; the cookie then stands for the
token. It holds a random session value made when the guard starts, never the
token itself: a browser sends a host's cookies to every port of that host.
Pure ASGI: no framework is imported.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from retinue.serving.policy import ServerPolicy

__all__ = ["TOKEN_QUERY", "Guard", "cookie_name"]

TOKEN_QUERY = "token"
"""The query parameter a browser opens the web view with once, to get its token cookie."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def cookie_name(port: int) -> str:
    """The token cookie of the server on ``port`` (cookies are shared by every port of a host)."""
    return f"retinue_token_{port}"


def _headers(scope: Scope) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in scope.get("headers") or ():
        found.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return found


def _one(headers: dict[str, list[str]], name: str) -> tuple[str | None, bool]:
    """The header's value (None if absent) and whether it was sent at most once."""
    values = headers.get(name, [])
    return (values[0] if values else None), len(values) <= 1


class Guard:
    """ASGI middleware answering only the requests ``policy`` allows."""

    def __init__(self, app: App, policy: ServerPolicy, *, cookie: str | None = None) -> None:
        """Guard ``app``; ``cookie`` names the cookie that may stand for the token (a browser's)."""
        self.app = app
        self.policy = policy
        self.cookie = cookie
        self._session = secrets.token_urlsafe(32)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request through the app, or refuse it."""
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refusal = self._refusal(headers)
        if refusal is None and not self._authorized(headers):
            if self._token_in_query(scope):
                await self._set_cookie(scope, send)
                return
            refusal = (
                401,
                "missing or wrong bearer token: send 'Authorization: Bearer <token>'"
                + (
                    f" (a browser: open this address once with ?{TOKEN_QUERY}=<token>)"
                    if self.cookie
                    else ""
                ),
            )
        if refusal is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await _answer(send, *refusal)

    def _refusal(self, headers: dict[str, list[str]]) -> tuple[int, str] | None:
        host, single = _one(headers, "host")
        if not single or not self.policy.host_allowed(host):
            shown = (host or "")[:80]
            return (
                421,
                f"this server does not answer to Host {shown!r} (a guard against DNS "
                "rebinding): use a loopback address or an allowed host "
                "(start it with --allowed-host NAME to add one)",
            )
        origin, single = _one(headers, "origin")
        if not single or not self.policy.origin_allowed(origin):
            return 403, f"requests from pages of {(origin or '')[:80]!r} are refused"
        return None

    def _authorized(self, headers: dict[str, list[str]]) -> bool:
        if self.policy.token is None:
            return True
        authorization, single = _one(headers, "authorization")
        if authorization is not None:
            return single and self.policy.authorized(authorization)
        if self.cookie is None:
            return False
        jar: SimpleCookie = SimpleCookie()
        for raw in headers.get("cookie", []):
            try:
                jar.load(raw)
            except Exception:  # a malformed cookie header carries no token
                continue
        morsel = jar.get(self.cookie)
        given = morsel.value.encode("utf-8", "replace") if morsel is not None else b""
        return morsel is not None and hmac.compare_digest(given, self._session.encode())

    def _token_in_query(self, scope: Scope) -> bool:
        """Whether a browser's ``GET`` carries the token in its query (once, to get the cookie)."""
        if self.cookie is None or scope["type"] != "http" or scope.get("method") != "GET":
            return False
        query = parse_qsl((scope.get("query_string") or b"").decode("latin-1"))
        given = [value for name, value in query if name == TOKEN_QUERY]
        return len(given) == 1 and self.policy.token_matches(given[0])

    async def _set_cookie(self, scope: Scope, send: Send) -> None:
        assert self.cookie is not None and self.policy.token is not None
        query = parse_qsl((scope.get("query_string") or b"").decode("latin-1"))
        rest = urlencode([(name, value) for name, value in query if name != TOKEN_QUERY])
        raw_path = scope.get("raw_path") or (scope.get("path") or "/").encode("utf-8")
        # One leading slash: "//host" would send the browser to another site.
        path = "/" + raw_path.decode("latin-1").lstrip("/\\")
        location = path + (f"?{rest}" if rest else "")
        cookie = f"{self.cookie}={self._session}; Path=/; HttpOnly; SameSite=Strict"
        headers = [
            (b"location", location.encode("latin-1", "replace")),
            (b"set-cookie", cookie.encode()),
            (b"cache-control", b"no-store"),
            (b"referrer-policy", b"no-referrer"),
        ]
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


async def _answer(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
