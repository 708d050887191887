"""What the web view's action buttons do: one small interface, answered in process or refused.

:class:`Actions` is everything the page can ask of the writer: approve or
deny an approval request, interrupt an agent or its tree, resume it, close
it. Each call returns an :class:`ActionResult`: what was done, or the
refusal as the typed error's text (``"AgentBusy: /root/a is running; ..."``)
and the HTTP status that goes with it. Nothing here raises for a refused
action: the page shows the text.

- :class:`RuntimeActions` acts through a host that has the runtime's async
  calls (``approve_async``, ``interrupt_async``...): the writer ``Runtime``
  itself when the view runs in its process (``retinue run --web``, or
  ``retinue.web.serve`` beside a live writer), and any object with the same
  calls (the control socket's client, :class:`~retinue.control.RemoteRuntime`:
  :class:`~retinue.web.socket_actions.SocketActions`) as a drop-in.
- :class:`WriterNeeded` refuses every action with
  :class:`~retinue.errors.StoreReadOnly`: a read-only view (``retinue web
  --store``) cannot act, and says where to act from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from retinue.errors import (
    ArgumentTypeError,
    ControlError,
    InvalidAgentPath,
    InvalidArgument,
    RetinueError,
    RuntimeClosed,
    StoreReadOnly,
    UnknownAgent,
    UnknownApproval,
)
from retinue.protocol.messages import AgentInfo

__all__ = [
    "ACTIONS",
    "WRITER_NEEDED",
    "ActionResult",
    "Actions",
    "ActionsHost",
    "RuntimeActions",
    "WriterNeeded",
    "refusal",
]

ACTIONS = ("approve", "deny", "interrupt", "interrupt_tree", "resume", "close")
"""The actions the page offers, by the name of their route (``POST /api/actions/<name>``)."""
WRITER_NEEDED = (
    "actions need the writer: run the view in the writer's process (retinue run --web), "
    "or beside a running writer (retinue web --store STORE --actions acts through its "
    "control socket)"
)
"""Why a read-only view refuses every action."""


@dataclass(frozen=True)
class ActionResult:
    """The answer to one action: ``ok`` and what was done, or the refusal.

    ``text`` is what the page shows: what was done (``"interrupted
    /root/a: now interrupted"``), or the typed error's text (``"AgentBusy: ..."``), whose class
    name is ``error``; ``status`` is the HTTP status (200 when done).
    """

    ok: bool
    text: str
    error: str | None = None
    status: int = 200

    def payload(self) -> dict[str, Any]:
        """Return the JSON answer: ``{"ok": true, "done": ...}`` or ``{"ok": false, "error":
        ..., "type": ...}``."""
        if self.ok:
            return {"ok": True, "done": self.text}
        return {"ok": False, "error": self.text, "type": self.error}


def refusal(exc: RetinueError) -> ActionResult:
    """Return the refusal of an action that raised ``exc``, with its typed text and status.

    404 for an unknown agent or request, 400 for a bad argument, 503 when the
    writer cannot be reached (closed, a read-only view, its control socket lost), 409 for the rest
    (the agent's state does not allow it, a request already answered...).
    """
    if isinstance(exc, UnknownAgent | UnknownApproval):
        status = 404
    elif isinstance(exc, InvalidArgument | ArgumentTypeError | InvalidAgentPath):
        status = 400
    elif isinstance(exc, RuntimeClosed | StoreReadOnly | ControlError):
        status = 503
    else:
        status = 409
    name = type(exc).__name__
    return ActionResult(False, f"{name}: {exc}", name, status)


class Actions(Protocol):
    """What the page may ask of the writer; every call answers, none raises for a refusal."""

    async def approve(self, request_id: str, note: str | None) -> ActionResult:
        """Approve a pending approval request (``note`` kept with the answer)."""
        ...

    async def deny(self, request_id: str, reason: str) -> ActionResult:
        """Deny a pending approval request; the model gets ``reason``."""
        ...

    async def interrupt(self, ref: str) -> ActionResult:
        """Interrupt an agent's queued or running turn."""
        ...

    async def interrupt_tree(self, ref: str) -> ActionResult:
        """Interrupt every queued or running turn of an agent's live subtree."""
        ...

    async def resume(self, ref: str) -> ActionResult:
        """Run an interrupted agent's task again."""
        ...

    async def close(self, ref: str) -> ActionResult:
        """Close an agent (refused while it has live children)."""
        ...


class ActionsHost(Protocol):
    """The async host calls :class:`RuntimeActions` needs (``Runtime`` has them)."""

    async def approve_async(self, request_id: str, *, note: str | None = None) -> None:
        """See ``Runtime.approve``."""
        ...

    async def deny_async(self, request_id: str, *, reason: str) -> None:
        """See ``Runtime.deny``."""
        ...

    async def interrupt_async(self, ref: str) -> AgentInfo:
        """See ``Runtime.interrupt``."""
        ...

    async def interrupt_tree_async(self, ref: str) -> list[AgentInfo]:
        """See ``Runtime.interrupt_tree``."""
        ...

    async def resume_async(self, ref: str) -> AgentInfo:
        """See ``Runtime.resume``."""
        ...

    async def close_async(self, ref: str) -> AgentInfo:
        """See ``Runtime.close``."""
        ...


async def _attempt(call: Callable[[], Awaitable[str]]) -> ActionResult:
    try:
        return ActionResult(True, await call())
    except RetinueError as exc:
        return refusal(exc)


def _agent(verb: str, info: AgentInfo) -> str:
    return f"{verb} {info.path}: now {info.state}"


class RuntimeActions:
    """:class:`Actions` through a host's async calls (the writer ``Runtime`` in process)."""

    def __init__(self, host: ActionsHost) -> None:
        """Act through ``host`` (a writer ``Runtime``, or any object with its async calls)."""
        self.host = host

    async def approve(self, request_id: str, note: str | None) -> ActionResult:
        """Approve ``request_id``; see ``Runtime.approve``."""

        async def call() -> str:
            await self.host.approve_async(request_id, note=note)
            return f"approved request {request_id}"

        return await _attempt(call)

    async def deny(self, request_id: str, reason: str) -> ActionResult:
        """Deny ``request_id`` with ``reason``; see ``Runtime.deny``."""

        async def call() -> str:
            await self.host.deny_async(request_id, reason=reason)
            return f"denied request {request_id}"

        return await _attempt(call)

    async def interrupt(self, ref: str) -> ActionResult:
        """Interrupt ``ref``'s turn; see ``Runtime.interrupt``."""

        async def call() -> str:
            return _agent("interrupted", await self.host.interrupt_async(ref))

        return await _attempt(call)

    async def interrupt_tree(self, ref: str) -> ActionResult:
        """Interrupt ``ref``'s live subtree; see ``Runtime.interrupt_tree``."""

        async def call() -> str:
            agents = await self.host.interrupt_tree_async(ref)
            stopped = sum(1 for a in agents if a.state == "interrupted")
            return f"interrupted the tree: {len(agents)} live agents, {stopped} now interrupted"

        return await _attempt(call)

    async def resume(self, ref: str) -> ActionResult:
        """Resume ``ref``; see ``Runtime.resume``."""

        async def call() -> str:
            return _agent("resumed", await self.host.resume_async(ref))

        return await _attempt(call)

    async def close(self, ref: str) -> ActionResult:
        """Close ``ref``; see ``Runtime.close``."""

        async def call() -> str:
            return _agent("closed", await self.host.close_async(ref))

        return await _attempt(call)


class WriterNeeded:
    """:class:`Actions` of a read-only view: each refused with ``StoreReadOnly`` (503)."""

    def __init__(self, message: str = WRITER_NEEDED) -> None:
        """Refuse every action with ``message``."""
        self.message = message

    def _refuse(self) -> ActionResult:
        return refusal(StoreReadOnly(self.message))

    async def approve(self, request_id: str, note: str | None) -> ActionResult:
        """Refused: see the class."""
        return self._refuse()

    async def deny(self, request_id: str, reason: str) -> ActionResult:
        """Refused: see the class."""
        return self._refuse()

    async def interrupt(self, ref: str) -> ActionResult:
        """Refused: see the class."""
        return self._refuse()

    async def interrupt_tree(self, ref: str) -> ActionResult:
        """Refused: see the class."""
        return self._refuse()

    async def resume(self, ref: str) -> ActionResult:
        """Refused: see the class."""
        return self._refuse()

    async def close(self, ref: str) -> ActionResult:
        """Refused: see the class."""
        return self._refuse()
