"""The view's action route: ``POST /api/actions/<action>``, checked, then handed to ``Actions``.

A request acts only when every check passes, in this order:

1. the view was started with actions (``--actions``), else 403;
2. the action is one of :data:`~retinue.web.actions.ACTIONS`, else 404;
3. it carries an ``Origin`` header naming a host the server answers to (a
   browser sends one with every ``POST``; the server policy's
   :meth:`~retinue.serving.ServerPolicy.origin_allowed`; without a policy,
   the ``Host`` the request was sent to), else 403;
4. it carries a page's token in ``X-Retinue-Action-Token``
   (:class:`~retinue.web.tokens.PageTokens`), else 403;
5. its body is JSON (``Content-Type: application/json``, else 415) of at most
   ``WebOptions.max_action_bytes`` (else 413) with the action's fields
   (``{"agent": ID}``; approve ``{"request": ID, "note": TEXT}``, deny
   ``{"request": ID, "reason": TEXT}``), else 400.

Then the action's answer goes back as it is: ``{"ok": true, "done": ...}``,
or ``{"ok": false, "error": "<ErrorType>: ...", "type": ...}`` with the
status :func:`~retinue.web.actions.refusal` chose.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from retinue.serving import ServerPolicy
from retinue.web.actions import ACTIONS, ActionResult, Actions
from retinue.web.tokens import TOKEN_HEADER, PageTokens

__all__ = ["ACTIONS_OFF", "ActionRoute"]

ACTIONS_OFF = (
    "this view was started without actions: start it with --actions "
    "(retinue web --actions, retinue run --web --actions) to act from the page"
)
"""Why a view without actions refuses a POST."""
_encode = msgspec.json.Encoder().encode


class _OnAgent(msgspec.Struct, forbid_unknown_fields=True):
    agent: str


class _Approve(msgspec.Struct, forbid_unknown_fields=True):
    request: str
    note: str | None = None


class _Deny(msgspec.Struct, forbid_unknown_fields=True):
    request: str
    reason: str


_BODIES: dict[str, type[msgspec.Struct]] = {
    "approve": _Approve,
    "deny": _Deny,
    **{name: _OnAgent for name in ("interrupt", "interrupt_tree", "resume", "close")},
}


def _json(payload: Any, status: int) -> Response:
    return Response(_encode(payload), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"ok": False, "error": message, "type": None}, status)


class ActionRoute:
    """``POST /api/actions/{action}`` (:meth:`handle`; see the module for its checks)."""

    def __init__(
        self,
        actions: Actions | None,
        tokens: PageTokens,
        policy: ServerPolicy | None,
        max_bytes: int,
    ) -> None:
        """Hand checked requests to ``actions`` (None: actions are off)."""
        self.actions = actions
        self.tokens = tokens
        self.policy = policy
        self.max_bytes = max_bytes

    async def handle(self, request: Request) -> Response:
        """Check the request, act, and answer with the action's result."""
        if self.actions is None:
            return _error(403, ACTIONS_OFF)
        name = request.path_params.get("action", "")
        if name not in ACTIONS:
            known = ", ".join(ACTIONS)
            return _error(404, f"no action {name[:40]!r}; the actions are {known}")
        refused = self._origin_refusal(request)
        if refused is None and not self.tokens.valid(request.headers.get(TOKEN_HEADER)):
            refused = (
                f"missing or wrong action token: an action carries its page's token in "
                f"the {TOKEN_HEADER} header (reload the page to get one)"
            )
        if refused is not None:
            return _error(403, refused)
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            return _error(415, "an action's body is JSON: send Content-Type: application/json")
        body = await self._body(request)
        if body is None:
            return _error(413, f"an action's body is at most {self.max_bytes} bytes")
        try:
            fields = msgspec.json.decode(body, type=_BODIES[name])
        except msgspec.DecodeError as exc:
            return _error(400, f"bad {name} request: {exc}")
        result = await self._act(name, fields)
        return _json(result.payload(), result.status)

    def _origin_refusal(self, request: Request) -> str | None:
        origin = request.headers.get("origin")
        if origin is None:
            return "an action must come from the view's page: the request has no Origin header"
        if self.policy is not None:
            allowed = self.policy.origin_allowed(origin)
        else:  # no policy (a host checks Host itself): the page's own origin only
            try:
                allowed = urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()
            except ValueError:
                allowed = False
        return None if allowed else f"actions from pages of {origin[:80]!r} are refused"

    async def _body(self, request: Request) -> bytes | None:
        """The body, or None once it grows past ``max_bytes``."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def _act(self, name: str, fields: msgspec.Struct) -> ActionResult:
        actions = self.actions
        assert actions is not None
        if isinstance(fields, _Approve):
            return await actions.approve(fields.request, fields.note)
        if isinstance(fields, _Deny):
            return await actions.deny(fields.request, fields.reason)
        assert isinstance(fields, _OnAgent)
        call = {
            "interrupt": actions.interrupt,
            "interrupt_tree": actions.interrupt_tree,
            "resume": actions.resume,
            "close": actions.close,
        }[name]
        return await call(fields.agent)
