"""The MCP server of ``retinue mcp``: tools and resources over :class:`~retinue.mcp.tools.Tools`.

Each tool has a schema (from its typed parameters, with every bound the
server checks: ``maximum`` for waits, ``maxLength`` for names and messages)
and a one-line description. A :class:`~retinue.errors.RetinueError` becomes
an ``isError`` result reading ``<ErrorType>: <message>``, never a protocol
failure; bad arguments are ``isError`` results too (the SDK checks them
against the schema, the tools again before they act). Results are JSON text.
Needs the ``mcp`` extra.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from pydantic import Field

from retinue.errors import InvalidAgentPath, RetinueError, UnknownAgent
from retinue.mcp.tools import MAX_TRANSCRIPT_TAIL, MAX_TREE_AGENTS, TREE_PAGE, Progress, Tools
from retinue.mcp.waits import ClientGone, Gone, session_of
from retinue.protocol.paths import MAX_NAME_LENGTH, MAX_PATH_LENGTH
from retinue.serving import ServerPolicy

__all__ = ["INSTRUCTIONS", "build_server", "with_bearer_token"]

INSTRUCTIONS = (
    "retinue runs durable trees of LLM agents kept in a store. run_team starts the team's "
    "lead on a task and returns its path at once (or its answer within wait_s); wait returns "
    "an agent's next completion; tree and inspect show the agents. Trees survive this "
    "client's crash: interrupted agents are resumed with resume."
)
Ref = Annotated[
    str, Field(max_length=MAX_PATH_LENGTH, description="An agent path (/root/review) or id.")
]
Name = Annotated[
    str | None,
    Field(max_length=MAX_NAME_LENGTH, pattern=r"^[a-z0-9_]+$", description="Its name."),
]
RequestId = Annotated[str, Field(description="The approval request's id (from approvals).")]


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _reporter(ctx: Context) -> Progress:
    async def report(progress: float, total: float, message: str) -> None:
        await ctx.report_progress(progress, total, message)

    return report


def _gone(ctx: Context) -> Gone | None:
    """Whether the request's client went away: its HTTP connection closed (None over stdio,
    where the server ends with its client)."""
    request = getattr(ctx.request_context, "request", None)
    disconnected = getattr(request, "is_disconnected", None)
    return disconnected if callable(disconnected) else None


def _session(ctx: Context) -> str | None:
    """The request's MCP session (None over stdio)."""
    return session_of(getattr(ctx.request_context, "request", None))


async def _guard(call: Any) -> str:
    """Await a tool's work; a retinue error becomes the tool's error result."""
    try:
        return _text(await call)
    except RetinueError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from None
    except ClientGone as exc:  # no one reads this answer; said for the server's log
        raise ToolError(str(exc)) from None


_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def _tool(server: Any, description: str, **bounded: Any) -> Callable[[_Fn], _Fn]:
    """Register an async function as a tool with a JSON text result.

    ``bounded`` gives parameters types known only now (a ``Field`` with this
    server's limits): the schema is built from the function's annotations.
    """

    def register(fn: _Fn) -> _Fn:
        fn.__annotations__.update(bounded)
        server.add_tool(fn, description=description, structured_output=False)
        return fn

    return register


def _resource(server: Any, uri: str, **options: Any) -> Callable[[_Fn], _Fn]:
    """Register an async function as a read-only JSON resource (or template)."""

    def register(fn: _Fn) -> _Fn:
        server.resource(uri, mime_type="application/json", **options)(fn)
        return fn

    return register


def build_server(tools: Tools) -> MCPServer:
    """Return the MCP server with every tool and resource of ``tools``."""
    server = MCPServer("retinue", instructions=INSTRUCTIONS, log_level="WARNING")
    bounds = tools.bounds
    wait_s = Annotated[
        float,
        Field(ge=0, le=bounds.wait_max_s, description="Seconds to wait for the answer."),
    ]
    timeout_s = Annotated[
        float | None,
        Field(
            ge=0,
            le=bounds.wait_max_s,
            description=f"Seconds (default {bounds.wait_default_s:g}).",
        ),
    ]

    @_tool(
        server,
        "Start the team's lead on a task; return its path at once, "
        "or its answer if it finishes within wait_s.",
        wait_s=wait_s,
    )
    async def run_team(
        task: Annotated[str, Field(description="What the team should do.")],
        ctx: Context,
        agent: Annotated[
            str | None, Field(description="Agent of the team (default: lead).")
        ] = None,
        name: Name = None,
        wait_s: float = 0,
    ) -> str:
        report, gone = _reporter(ctx), _gone(ctx)
        return await _guard(tools.run_team(task, agent, name, wait_s, report, gone, _session(ctx)))

    @_tool(server, "Start an agent of a profile on a task under a parent; return it at once.")
    async def spawn(
        profile: Annotated[str, Field(description="The profile (team agent) to run.")],
        task: Annotated[str, Field(description="Its task.")],
        parent: Annotated[
            str, Field(max_length=MAX_PATH_LENGTH, description="Parent path or id.")
        ] = "/root",
        name: Name = None,
    ) -> str:
        return await _guard(tools.spawn(profile, task, parent, name))

    @_tool(
        server,
        "Wait for an agent's next completion (bounded); on time-out it keeps running.",
        timeout_s=timeout_s,
    )
    async def wait(ref: Ref, ctx: Context, timeout_s: float | None = None) -> str:
        return await _guard(tools.wait(ref, timeout_s, _reporter(ctx), _gone(ctx), _session(ctx)))

    _agent_tools(server, tools)
    _approval_tools(server, tools)
    _resources(server, tools)
    server.middleware.append(_confirming(tools))
    return server


def _confirming(tools: Tools) -> Any:
    """A middleware: any message of a session confirms the answers its waits were sent."""

    async def confirm(ctx: Any, call_next: Any) -> Any:
        session = session_of(getattr(ctx, "request", None))
        if session is not None:
            await tools.confirm(session)
        return await call_next(ctx)

    return confirm


def _agent_tools(server: Any, tools: Tools) -> None:
    """The tools on agents that exist: send, tree, inspect, interrupt, close, resume."""
    message = Annotated[
        str, Field(max_length=tools.bounds.message_max_bytes, description="The text.")
    ]

    @_tool(server, "Send a message to an agent's mailbox.", message=message)
    async def send(ref: Ref, message: str) -> str:
        return await _guard(tools.send(ref, message))

    @_tool(server, "List agents by path with state and result, a page at a time.")
    async def tree(
        ref: Annotated[str | None, Field(description="Only this agent's subtree.")] = None,
        include_closed: bool = False,
        limit: Annotated[int, Field(ge=1, le=MAX_TREE_AGENTS)] = TREE_PAGE,
        offset: Annotated[
            int, Field(ge=0, description="Skip this many (next_offset of the last page).")
        ] = 0,
    ) -> str:
        return await _guard(tools.tree(ref, include_closed, limit, offset))

    @_tool(server, "Show one agent: state, task, output, mailbox, transcript tail.")
    async def inspect(
        ref: Ref, transcript_tail: Annotated[int, Field(ge=0, le=MAX_TRANSCRIPT_TAIL)] = 10
    ) -> str:
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


async def _read(call: Any) -> str:
    """Await a resource's read; a retinue error becomes the read's error, with its reason and
    no traceback (an unknown agent is a not-found error)."""
    try:
        return _text(await call)
    except (UnknownAgent, InvalidAgentPath) as exc:
        raise ResourceNotFoundError(f"{type(exc).__name__}: {exc}") from None
    except RetinueError as exc:
        raise ResourceError(f"{type(exc).__name__}: {exc}") from None


def _page_number(value: str, name: str, default: int, low: int, high: int) -> int:
    if value == "":
        return default
    if not value.isdigit() or not low <= int(value) <= high:
        raise ResourceError(
            f"InvalidArgument: {name} must be a whole number from {low} to {high}, "
            f"not {value[:40]!r}"
        )
    return int(value)


def _resources(server: Any, tools: Tools) -> None:
    """``retinue://tree`` (paged) and ``retinue://agent/{path}``: read-only JSON."""

    @_resource(
        server,
        "retinue://tree",
        name="tree",
        description=f"The first {TREE_PAGE} live agents by path, the count of all, and the "
        "URI of the next page (read-only).",
    )
    async def tree_resource() -> str:
        return await _read(tools.tree_resource())

    @_resource(
        server,
        "retinue://tree{?offset,limit}",
        name="tree_page",
        description=f"A page of the live agents by path: retinue://tree?offset=200&limit=200 "
        f"(limit at most {MAX_TREE_AGENTS}; read-only).",
    )
    async def tree_page(offset: str = "", limit: str = "") -> str:
        start = _page_number(offset, "offset", 0, 0, 10**9)
        size = _page_number(limit, "limit", TREE_PAGE, 1, MAX_TREE_AGENTS)
        return await _read(tools.tree_resource(start, size))

    @_resource(
        server,
        "retinue://agent/{+path}",
        name="agent",
        description="One agent in full: retinue://agent/root/review (read-only).",
    )
    async def agent_resource(path: str) -> str:
        return await _read(tools.agent_resource(path))


def with_bearer_token(app: Any, token: str) -> Any:
    """Wrap an ASGI app so every HTTP request must carry ``Authorization: Bearer <token>``.

    The scheme in any case (RFC 9110), the token compared in constant time.
    ``retinue mcp`` itself applies the whole server policy
    (:class:`retinue.serving.Guard`: ``Host`` and ``Origin`` too).

    Raises:
        InvalidArgument: a token that cannot travel in a header.
    """
    policy = ServerPolicy.for_bind("127.0.0.1", 0, token=token)

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not policy.authorized(given.decode("latin-1")):
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
