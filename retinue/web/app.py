"""The web view's HTTP face: a static page, a JSON API over a :class:`LiveTree`, and actions.

Routes (``GET`` unless said; anything else is 405):

- ``/`` the page (with a fresh action token when actions are on);
  ``/static/<name>`` its scripts (``app.js``, which starts it, ``listing.js``,
  ``detail.js``, ``actions.js``, ``timeline.js``) and ``style.css``.
- ``/api/summary`` counts by state, tokens and cost, how the poller is doing,
  and whether a writer holds the store (``writer``: ``in-process``, ``live``
  or ``stopped``).
- ``/api/children?parent=ID&offset=0&limit=200&closed=0`` one page of an agent's
  children (``parent`` empty or absent: the top-level agents), with their count.
- ``/api/tree?closed=0`` every row the tree shows, in tree order, when they
  are at most ``WebOptions.expand_rows`` (else ``rows`` is null): the page
  opens a small tree expanded.
- ``/api/agent?id=ID&tail=50`` one agent in full (``Runtime.inspect``), with
  its pending approval requests and its trace id (and link, with ``trace_url``).
- ``/api/timeline?id=ID`` the turns and calls of the tree ``ID`` belongs to.
- ``/api/search?q=TEXT&state=STATE&limit=100`` agents whose path or profile
  contains TEXT and, with ``state``, in that state (one of the two at least).
- ``/api/events?since=VERSION`` server-sent events (:mod:`retinue.web.stream`).
- ``POST /api/actions/<action>`` approve, deny, interrupt, interrupt_tree,
  resume, close (:mod:`retinue.web.acting`: off unless the app was given
  :class:`~retinue.web.actions.Actions`; each needs its page's token and Origin).

Bad query arguments get HTTP 400 with ``{"error": "..."}``; an unknown agent 404;
a closed runtime 503. Every response carries a strict Content-Security-Policy
(no inline script, nothing from another origin). Every request first passes
the server policy's guard (:class:`retinue.serving.Guard`): its ``Host`` and
``Origin`` must name a loopback alias, the address served or an allowed host
(against DNS rebinding), and with a token set it must carry the token (a
bearer header, or the cookie a browser gets by opening ``/?token=<token>``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from importlib import resources
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from retinue.errors import (
    ArgumentTypeError,
    InvalidAgentPath,
    InvalidArgument,
    RetinueError,
    RuntimeClosed,
    UnknownAgent,
)
from retinue.protocol.messages import AgentState
from retinue.serving import Guard, ServerPolicy, cookie_name, is_loopback
from retinue.web.acting import ActionRoute
from retinue.web.actions import Actions
from retinue.web.live import LiveTree
from retinue.web.rows import approval_payload, detail_payload
from retinue.web.snapshot import ROOT, Snapshot
from retinue.web.stored import read_spans
from retinue.web.stream import event_stream
from retinue.web.tokens import PageTokens
from retinue.web.traces import check_trace_url, trace_id_of, trace_link

__all__ = ["LOOPBACK_HOSTS", "create_app"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
FIRST_SNAPSHOT_S = 60.0  # how long a request waits for the store's first read
_STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "listing.js": "text/javascript; charset=utf-8",
    "detail.js": "text/javascript; charset=utf-8",
    "actions.js": "text/javascript; charset=utf-8",
    "timeline.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
TOKEN_SLOT = b"__ACTION_TOKEN__"
"""Where the page's action token goes in ``index.html`` (empty when actions are off)."""
STATES = frozenset(str(state) for state in AgentState)
_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; "
        b"img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
        b"frame-ancestors 'none'; form-action 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
_encode = msgspec.json.Encoder().encode


class _Headers:
    """ASGI middleware adding the security headers to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_HEADERS]}
            await send(message)

        await self.app(scope, receive, sending)


class BadRequest(Exception):
    """A query argument the API cannot use (HTTP 400)."""


def _json(payload: Any, status: int = 200) -> Response:
    return Response(_encode(payload), status_code=status, media_type="application/json")


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, not {raw[:40]!r}") from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}, not {value}")
    return value


def _flag(request: Request, name: str) -> bool:
    raw = request.query_params.get(name, "0").lower()
    if raw not in ("0", "1", "true", "false", ""):
        raise BadRequest(f"{name} must be 0 or 1, not {raw[:40]!r}")
    return raw in ("1", "true")


class _Api:
    """The route handlers, over one live tree."""

    def __init__(self, live: LiveTree, actions: bool, trace_url: str | None) -> None:
        self.live = live
        self.rt = live.rt
        self.opts = live.options
        self.actions = actions
        self.trace_url = trace_url
        self.tokens = PageTokens()
        self.streams = 0
        folder = resources.files("retinue.web") / "static"
        self.files = {name: (folder / name).read_bytes() for name in _STATIC}

    async def snap(self) -> Snapshot:
        snap = await asyncio.to_thread(self.live.snapshot, FIRST_SNAPSHOT_S)
        if snap is None:
            raise RuntimeClosed(self.live.error or "the store could not be read yet")
        return snap

    async def page(self, request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        if name not in _STATIC:
            return _json({"error": f"no file {name[:60]!r}"}, 404)
        body = self.files[name]
        if name == "index.html":  # a fresh token for each page load
            token = self.tokens.issue().encode("ascii") if self.actions else b""
            body = body.replace(TOKEN_SLOT, token)
        return Response(body, media_type=_STATIC[name])

    async def summary(self, request: Request) -> Response:
        await self.snap()
        return _json(self._summary())

    def _summary(self) -> dict[str, Any]:
        snap = self.live.snapshot(0)
        live = self.live
        writer = live.writer_payload()
        if writer.get("writer") == "stopped" and writer.get("stopped_at") is None and snap:
            # Not seen alive since the view started: the store's last change.
            writer["stopped_at"] = max((r["updated_at"] for r in snap.rows.values()), default=None)
        return {
            **(snap.summary() if snap is not None else {"version": 0, "agents": 0, "states": {}}),
            "store": str(self.rt.path),
            "readonly": self.rt.readonly,
            "now": time.time(),
            "polls": live.polls,
            "skips": live.skips,
            "read_s": live.read_s,
            "error": live.error,
            "abandoned_runners": self.rt.abandoned_runners,
            "spans_dropped": live.activity.dropped,
            "events": not self.rt.readonly,
            "page_size": self.opts.page_size,
            "expand_rows": self.opts.expand_rows,
            "actions": self.actions,
            **writer,
        }

    async def children(self, request: Request) -> Response:
        snap = await self.snap()
        parent = request.query_params.get("parent", ROOT)
        if parent != ROOT and parent not in snap.rows:
            return _json({"error": f"no agent {parent[:60]!r} in the view"}, 404)
        offset = _int(request, "offset", 0, 0, 10**9)
        limit = _int(request, "limit", self.opts.page_size, 1, self.opts.max_page_size)
        rows, total = snap.children(
            parent, closed=_flag(request, "closed"), offset=offset, limit=limit
        )
        payload = {"version": snap.version, "parent": parent, "offset": offset}
        return _json({**payload, "total": total, "rows": rows})

    async def tree(self, request: Request) -> Response:
        snap = await self.snap()
        closed = _flag(request, "closed")
        limit = self.opts.expand_rows
        rows = snap.tree(closed=closed, limit=limit)
        shown = snap.shown(closed=closed)
        return _json({"version": snap.version, "shown": shown, "limit": limit, "rows": rows})

    async def agent(self, request: Request) -> Response:
        ref = request.query_params.get("id", "")
        if not ref:
            raise BadRequest("id is required: an agent id or path")
        tail = _int(request, "tail", self.opts.transcript_tail, 0, self.opts.max_transcript_tail)
        detail = await self.rt.inspect_async(ref, transcript_tail=tail)
        snap = self.live.snapshot(0)
        row = snap.rows.get(detail.info.id) if snap is not None else None
        tool = self.live.activity.tools().get(detail.info.id)
        payload = detail_payload(detail, row, tool)
        chain = snap.ancestors(detail.info.id) if snap is not None and row is not None else []
        payload["ancestors"] = [{"id": i, "path": snap.rows[i]["path"]} for i in chain if snap]
        requests = []
        if detail.info.state == "awaiting_approval":
            found = await self.rt.approvals_async(detail.info.id)
            requests = [approval_payload(r) for r in found if r.agent_id == detail.info.id]
        payload["approvals"] = requests
        trace_id = trace_id_of(detail.trace)
        payload["trace_id"] = trace_id
        payload["trace_url"] = trace_link(self.trace_url, trace_id)
        return _json(payload)

    async def timeline(self, request: Request) -> Response:
        snap = await self.snap()
        ref = request.query_params.get("id", "")
        if ref not in snap.rows:
            return _json({"error": f"no agent {ref[:60]!r} in the view"}, 404)
        top = snap.top_of(ref)
        ids = snap.subtree(top, self.opts.timeline_agents)
        keys = ("id", "path", "profile", "state", "generation", "created_at", "started_at")
        agents = [
            {**{k: snap.rows[i][k] for k in keys}, "updated_at": snap.rows[i]["updated_at"]}
            for i in ids
        ]
        activity = self.live.activity
        read = len(ids)
        if self.rt.readonly:  # no events: the turns and model calls the store keeps
            opts = self.opts
            found, read = await read_spans(self.rt, ids, opts.timeline_spans, opts.timeline_read_s)
        else:
            found = activity.spans_of(ids, self.opts.timeline_spans)
        spans = [s.payload() for s in found]
        return _json(
            {
                "top": top,
                "now": time.time(),
                "agents": agents,
                "truncated": len(ids) >= self.opts.timeline_agents,
                "spans": spans,
                "open_turns": activity.open_turns(ids),
                "spans_dropped": activity.dropped,
                "calls_read": read,
                "events": not self.rt.readonly,
            }
        )

    async def search(self, request: Request) -> Response:
        snap = await self.snap()
        text = request.query_params.get("q", "").strip()
        state = request.query_params.get("state", "").strip() or None
        if state is not None and state not in STATES:
            raise BadRequest(
                f"state must be one of {', '.join(sorted(STATES))}, not {state[:40]!r}"
            )
        if not text and state is None:
            raise BadRequest("q or state is required: part of an agent path or profile, a state")
        limit = _int(request, "limit", self.opts.search_limit, 1, self.opts.search_limit)
        rows, total = snap.search(text[:1024], limit, state)
        return _json({"version": snap.version, "total": total, "rows": rows})

    async def events(self, request: Request) -> Response:
        since_raw = request.headers.get("last-event-id") or request.query_params.get("since")
        since = None
        if since_raw:
            try:
                since = int(since_raw)
            except ValueError:
                raise BadRequest(
                    f"since must be a version number, not {since_raw[:40]!r}"
                ) from None
        most = _int(request, "max_messages", 0, 0, 10**9)
        if self.streams >= self.opts.max_streams:
            return _json(
                {"error": f"too many open streams (max_streams={self.opts.max_streams})"}, 503
            )
        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        return StreamingResponse(
            self._stream(since, most), media_type="text/event-stream", headers=headers
        )

    async def _stream(self, since: int | None, most: int) -> AsyncIterator[str]:
        self.streams += 1
        try:
            async for message in event_stream(self.live, since, most, self._summary):
                yield message
        finally:
            self.streams -= 1


def _guard(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
    async def guarded(request: Request) -> Response:
        try:
            response: Response = await handler(request)
            return response
        except BadRequest as exc:
            return _json({"error": str(exc)}, 400)
        except UnknownAgent as exc:
            return _json({"error": str(exc)}, 404)
        except (InvalidArgument, ArgumentTypeError, InvalidAgentPath) as exc:
            return _json({"error": str(exc)}, 400)
        except RuntimeClosed as exc:
            return _json({"error": str(exc)}, 503)
        except RetinueError as exc:
            return _json({"error": f"{type(exc).__name__}: {exc}"}, 500)

    return guarded


def create_app(
    live: LiveTree,
    *,
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
    policy: ServerPolicy | None = None,
    actions: Actions | None = None,
    trace_url: str | None = None,
) -> Starlette:
    """Return the ASGI app of the web view over ``live`` (which the caller starts and stops).

    ``policy`` is what the server answers (:func:`~retinue.web.serve` passes
    the one of its bind). Without it, the app answers loopback names and the
    names in ``allowed_hosts`` (``"*"``: any ``Host`` and ``Origin``, for a
    host that checks them in front of the app itself), without a token.
    ``actions`` turns the page's action buttons on (see
    :mod:`retinue.web.actions`; None: the view only watches). ``trace_url``
    is a template such as ``http://127.0.0.1:16686/trace/{trace_id}`` that
    links an agent's trace id (:mod:`retinue.web.traces`).

    Raises:
        InvalidArgument: an allowed host that is not a host name or address, or a
            bad ``trace_url``.
        ArgumentTypeError: a ``trace_url`` that is not a str.
    """
    api = _Api(live, actions is not None, check_trace_url(trace_url))
    if policy is None and "*" not in allowed_hosts:
        extra = [name for name in allowed_hosts if not is_loopback(name)]
        policy = ServerPolicy.for_bind("127.0.0.1", 0, allowed_hosts=extra)
    act = ActionRoute(actions, api.tokens, policy, live.options.max_action_bytes)
    routes = [
        Route("/", _guard(api.page)),
        Route("/static/{name}", _guard(api.page)),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/api/summary", _guard(api.summary)),
        Route("/api/children", _guard(api.children)),
        Route("/api/tree", _guard(api.tree)),
        Route("/api/agent", _guard(api.agent)),
        Route("/api/timeline", _guard(api.timeline)),
        Route("/api/search", _guard(api.search)),
        Route("/api/events", _guard(api.events)),
        Route("/api/actions/{action}", act.handle, methods=["POST"]),
    ]
    middleware = [Middleware(_Headers)]
    if policy is not None:
        middleware.append(Middleware(Guard, policy=policy, cookie=cookie_name(policy.port)))
    return Starlette(routes=routes, middleware=middleware)
