"""The MCP server of ``retinue mcp``: tools and resources over :class:`~retinue.mcp.tools.Tools`.

Each tool has a schema (from its typed parameters) and a one-line
description. A :class:`~retinue.errors.RetinueError` becomes an ``isError``
result reading ``<ErrorType>: <message>``, never a protocol failure; bad
arguments are ``isError`` results too (the SDK checks them). Results are JSON
text. Needs the ``mcp`` extra.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from retinue.errors import RetinueError
from retinue.mcp.tools import MAX_TREE_AGENTS, Progress, Tools

__all__ = ["INSTRUCTIONS", "build_server", "with_bearer_token"]

INSTRUCTIONS = (
    "retinue runs durable trees of LLM agents kept in a store. run_team starts the team's "
    "lead on a task and returns its path at once (or its answer within wait_s); wait returns "
    "an agent's next completion; tree and inspect show the agents. Trees survive this "
    "client's crash: interrupted agents are resumed with resume."
)
Ref = Annotated[str, Field(description="An agent path (/root/review) or id.")]
RequestId = Annotated[str, Field(description="The approval request's id (from approvals).")]


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _reporter(ctx: Context) -> Progress:
    async def report(progress: float, total: float, message: str) -> None:
        await ctx.report_progress(progress, total, message)

    return report


async def _guard(call: Any) -> str:
    """Await a tool's work; a retinue error becomes the tool's error result."""
    try:
        return _text(await call)
    except RetinueError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from None


_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def _tool(server: Any, description: str) -> Callable[[_Fn], _Fn]:
    """Register an async function as a tool with a JSON text result."""

    def register(fn: _Fn) -> _Fn:
        server.add_tool(fn, description=description, structured_output=False)
        return fn

    return register


def _resource(server: Any, uri: str, **options: Any) -> Callable[[_Fn], _Fn]:
    """Register an async function as a read-only JSON resource (or template)."""

    def register(fn: _Fn) -> _Fn:
        server.resource(uri, **options)(fn)
        return fn

    return register


def build_server(tools: Tools) -> MCPServer:
    """Return the MCP server with every tool and resource of ``tools``."""
    server = MCPServer("retinue", instructions=INSTRUCTIONS, log_level="WARNING")

    @_tool(
        server,
        "Start the team's lead on a task; return its path at once, "
        "or its answer if it finishes within wait_s.",
    )
    async def run_team(
        task: Annotated[str, Field(description="What the team should do.")],
        ctx: Context,
        agent: Annotated[
            str | None, Field(description="Agent of the team (default: lead).")
        ] = None,
        name: Annotated[
            str | None, Field(description="Name under /root (default: the team's).")
        ] = None,
        wait_s: Annotated[float, Field(ge=0, description="Seconds to wait for the answer.")] = 0,
    ) -> str:
        return await _guard(tools.run_team(task, agent, name, wait_s, _reporter(ctx)))

    @_tool(server, "Start an agent of a profile on a task under a parent; return it at once.")
    async def spawn(
        profile: Annotated[str, Field(description="The profile (team agent) to run.")],
        task: Annotated[str, Field(description="Its task.")],
        parent: Annotated[str, Field(description="Parent path or id.")] = "/root",
        name: Annotated[str | None, Field(description="Its name under the parent.")] = None,
    ) -> str:
        return await _guard(tools.spawn(profile, task, parent, name))

    @_tool(server, "Wait for an agent's next completion (bounded); on time-out it keeps running.")
    async def wait(
        ref: Ref,
        ctx: Context,
        timeout_s: Annotated[float | None, Field(ge=0, description="Seconds (default 30).")] = None,
    ) -> str:
        return await _guard(tools.wait(ref, timeout_s, _reporter(ctx)))

    _agent_tools(server, tools)
    _resources(server, tools)
    return server


def _agent_tools(server: Any, tools: Tools) -> None:
    """The tools on agents that exist: send, tree, inspect, interrupt, close, resume; and
    the approval tools."""

    @_tool(server, "Send a message to an agent's mailbox.")
    async def send(ref: Ref, message: Annotated[str, Field(description="The text.")]) -> str:
        return await _guard(tools.send(ref, message))

    @_tool(server, "List agents by path with state and result.")
    async def tree(
        ref: Annotated[str | None, Field(description="Only this agent's subtree.")] = None,
        include_closed: bool = False,
        limit: Annotated[int, Field(ge=1, le=MAX_TREE_AGENTS)] = 200,
    ) -> str:
        return await _guard(tools.tree(ref, include_closed, limit))

    @_tool(server, "Show one agent: state, task, output, mailbox, transcript tail.")
    async def inspect(ref: Ref, transcript_tail: Annotated[int, Field(ge=0, le=200)] = 10) -> str:
        return await _guard(tools.inspect(ref, transcript_tail))

    @_tool(server, "Interrupt an agent's running turn (tree: its whole subtree).")
    async def interrupt(ref: Ref, tree: bool = False) -> str:
        return await _guard(tools.interrupt(ref, tree))

    @_tool(server, "Close an agent (tree: with its subtree, children first).")
    async def close(ref: Ref, tree: bool = False) -> str:
        return await _guard(tools.close(ref, tree))

    @_tool(server, "Re-run an interrupted agent's task.")
    async def resume(ref: Ref) -> str:
        return await _guard(tools.resume(ref))

    _approval_tools(server, tools)


def _approval_tools(server: Any, tools: Tools) -> None:
    """approvals, approve, deny: the tool calls agents wait on a person for."""

    @_tool(server, "List the tool calls waiting for approval (id, tool, arguments, agent).")
    async def approvals(
        ref: Annotated[str | None, Field(description="Only this agent's subtree.")] = None,
    ) -> str:
        return await _guard(tools.approvals(ref))

    @_tool(server, "Approve a pending tool call: it runs and the agent's model gets its result.")
    async def approve(
        request_id: RequestId,
        note: Annotated[str | None, Field(description="A note kept with the answer.")] = None,
    ) -> str:
        return await _guard(tools.approve(request_id, note))

    @_tool(server, "Deny a pending tool call: the agent's model gets the reason as an error.")
    async def deny(
        request_id: RequestId, reason: Annotated[str, Field(description="Why it is denied.")]
    ) -> str:
        return await _guard(tools.deny(request_id, reason))


def _resources(server: Any, tools: Tools) -> None:
    """``retinue://tree`` and ``retinue://agent/{path}``: read-only JSON."""

    @_resource(
        server,
        "retinue://tree",
        name="tree",
        mime_type="application/json",
        description="Every live agent by path (read-only).",
    )
    async def tree_resource() -> str:
        try:
            return _text(await tools.tree_resource())
        except RetinueError as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None

    @_resource(
        server,
        "retinue://agent/{+path}",
        name="agent",
        mime_type="application/json",
        description="One agent in full: retinue://agent/root/review (read-only).",
    )
    async def agent_resource(path: str) -> str:
        try:
            return _text(await tools.agent_resource(path))
        except RetinueError as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None


def with_bearer_token(app: Any, token: str) -> Any:
    """Wrap an ASGI app so every HTTP request must carry ``Authorization: Bearer <token>``."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not secrets.compare_digest(given, expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b"missing or wrong bearer token"})
                return
        await app(scope, receive, send)

    return guarded
