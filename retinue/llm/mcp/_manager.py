"""``McpManager``: a runtime's MCP servers, one session each, shared by every agent.

A server starts on the first turn that is granted one of its tools, on the
runtime's event loop (where async runners run); its session is shared by
every agent of the runtime and calls may run at once. A server that dies
(its process exits, its connection breaks) is restarted on next use: the
first time at once, then after ``restart_backoff_s``, doubling up to
``restart_backoff_max_s`` while it keeps failing; meanwhile a call gets an
error saying so, and every start, death and failure is published as an
:class:`~retinue.protocol.messages.McpServerEvent`. A success resets the
count. ``notifications/tools/list_changed`` makes the session list the tools
again; the next turn offers a new tool where a grant (``<server>.*``) covers
it. :meth:`close` (called by the runtime's shutdown, from any thread) stops
every server and kills each stdio server's process group.

Importing this module does not import the ``mcp`` SDK; starting a server does
(``pip install 'retinue[mcp]'``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retinue.errors import ConfigurationError, McpServerError
from retinue.llm.mcp._config import McpServer
from retinue.llm.mcp._state import ServerStatus, _retrieved, _State, missing_sdk
from retinue.llm.tools import ToolError, call_or_fresh
from retinue.protocol import paths
from retinue.protocol.backoff import capped_exponential
from retinue.protocol.effects import MCP_META_KEY
from retinue.protocol.messages import Event, McpServerEvent
from retinue.protocol.tools import mcp_grant_servers, mcp_granted

if TYPE_CHECKING:
    from retinue.llm.mcp._session import McpSession
    from retinue.llm.mcp._tools import McpTool
    from retinue.llm.tools import ToolDef

__all__ = ["CLOSE_TIMEOUT_S", "McpManager", "ServerStatus"]

CLOSE_TIMEOUT_S = 5.0
"""How long :meth:`McpManager.close` waits for the servers to stop before killing them."""
log = logging.getLogger("retinue.mcp")


class McpManager:
    """The MCP servers of one runtime (build with the server table; nothing starts yet)."""

    def __init__(
        self,
        servers: Mapping[str, McpServer],
        *,
        workspace: Path | None = None,
        publish: Callable[[Sequence[Event]], None] | None = None,
    ) -> None:
        """Hold ``servers`` by name; a stdio server's folder defaults to ``workspace``.

        Raises:
            ConfigurationError: a name that breaks the agent-name rules, or a
                value that is not an :class:`McpServer`.
        """
        self._states: dict[str, _State] = {}
        for name, config in servers.items():
            try:
                paths.validate_name(name, field="MCP server name")
            except Exception as exc:
                raise ConfigurationError(f"MCP server name {name!r}: {exc}") from None
            if not isinstance(config, McpServer):
                raise ConfigurationError(
                    f"MCP server {name!r} must be an McpServer (McpServer.stdio(...) or "
                    f".http(...)), not {type(config).__name__}"
                )
            self._states[name] = _State(name, config)
        self.workspace = workspace
        self._publish = publish
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def names(self) -> tuple[str, ...]:
        """The declared servers' names."""
        return tuple(self._states)

    def config(self, name: str) -> McpServer:
        """The declaration of server ``name`` (KeyError if none)."""
        return self._states[name].config

    def status(self) -> dict[str, ServerStatus]:
        """Every server's state: running, failures in a row, last error, pid, tools offered."""
        out: dict[str, ServerStatus] = {}
        for name, state in self._states.items():
            session = state.session
            out[name] = ServerStatus(
                name=name,
                running=session is not None and session.alive,
                failures=state.failures,
                last_error=state.last_error,
                pid=None if session is None else session.pid,
                tools=tuple(t.granted_name for t in state.tools),
                refused=tuple(state.refused),
            )
        return out

    def stderr(self, name: str) -> str:
        """What server ``name`` last wrote to stderr (bounded by ``stderr_max_bytes``)."""
        state = self._states[name]
        return "" if state.log is None else state.log.text()

    def _event(self, state: _State, status: str, detail: str = "") -> None:
        if status in ("died", "start_failed", "tool_refused"):
            log.warning("MCP server %r %s: %s", state.name, status, detail)
        if self._publish is None:
            return
        event = McpServerEvent(
            agent_id="",
            path=paths.ROOT,
            at=time.time(),
            server=state.name,
            status=status,
            detail=detail,
            failures=state.failures,
        )
        with contextlib.suppress(Exception):
            self._publish([event])

    # -- sessions ---------------------------------------------------------------------------

    def _fail(self, state: _State, status: str, reason: str) -> None:
        state.failures += 1
        state.last_error = reason
        cfg = state.config
        delay = (
            0.0
            if state.failures <= 1
            else capped_exponential(
                cfg.restart_backoff_s, cfg.restart_backoff_max_s, state.failures - 2
            )
        )
        state.retry_at = time.monotonic() + delay
        self._event(state, status, reason)

    def _on_death(self, session: McpSession, reason: str) -> None:
        state = self._states[session.name]
        if state.session is session:
            state.session = None
            self._fail(state, "died", session._message(f"died: {reason}"))

    def _on_tools(self, session: McpSession) -> None:
        state = self._states[session.name]
        if state.session is session:
            self._adopt(state, session)
            self._event(state, "tools_changed", ", ".join(t.tool for t in state.tools))

    def _adopt(self, state: _State, session: McpSession) -> None:
        from retinue.llm.mcp._tools import prepare

        tools, refused = prepare(
            state.name, session.tools, max_schema_bytes=state.config.max_schema_bytes
        )
        refused = [*session.refused, *refused]  # left out of the listing itself first
        for reason in refused:
            if reason not in state.refused:
                self._event(state, "tool_refused", reason)
        state.tools, state.refused, state.listed = tools, refused, True

    async def _session(self, state: _State) -> McpSession:
        """Return the server's live session, starting (or restarting) it if needed.

        Raises:
            McpServerError: it could not start, is waiting out its backoff, or
                the manager is closed.
        """
        if self._closed:
            raise McpServerError(f"MCP server {state.name!r}: the runtime is closed")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise McpServerError(
                f"MCP server {state.name!r} runs on the runtime's event loop; "
                "use it from an async runner of that runtime"
            )
        if state.session is not None and state.session.alive:
            return state.session
        if state.starting is not None:
            return await asyncio.shield(state.starting)
        wait = state.retry_at - time.monotonic()
        if state.failures and wait > 0:
            raise McpServerError(
                f"MCP server {state.name!r} failed {state.failures} times in a row and is "
                f"tried again in {wait:.1f} s (restart backoff); last: {state.last_error}",
                server=state.name,
            )
        if state.starting is None:
            state.starting = loop.create_task(
                self._start(state), name=f"retinue-mcp-start-{state.name}"
            )
            state.starting.add_done_callback(_retrieved)
        # A caller that is cancelled leaves the start running for the others.
        return await asyncio.shield(state.starting)

    async def _start(self, state: _State) -> McpSession:
        try:
            return await self._start_session(state)
        except Exception as exc:
            error = (
                exc
                if isinstance(exc, McpServerError)
                else McpServerError(
                    f"MCP server {state.name!r} failed to start: {type(exc).__name__}: {exc}"
                )
            )
            error.server = state.name
            self._fail(state, "start_failed", str(error))
            raise error from None
        finally:
            state.starting = None

    async def _start_session(self, state: _State) -> McpSession:
        try:
            from retinue.llm.mcp._session import McpSession
            from retinue.llm.mcp._transport import BoundedLog
        except ImportError:
            raise missing_sdk() from None
        if state.log is None:
            state.log = BoundedLog(state.name, state.config.stderr_max_bytes)
        session = McpSession(
            state.name,
            state.config,
            cwd=self.workspace,
            log=state.log,
            on_death=self._on_death,
            on_tools=self._on_tools,
        )
        await session.start()
        if self._closed:
            await session.close()
            raise McpServerError(f"MCP server {state.name!r}: the runtime is closed")
        try:
            self._adopt(state, session)
        except McpServerError:
            await session.close()
            raise
        state.session = session
        self._event(
            state,
            "started",
            f"{len(state.tools)} tools" + (f", pid {session.pid}" if session.pid else ""),
        )
        return session

    # -- what turns use ---------------------------------------------------------------------

    async def tool_defs(self, grants: Sequence[str]) -> list[ToolDef]:
        """Return the toolbox tools that ``grants`` (exact names and patterns) give a turn.

        Each granted server is started if needed (concurrently). A server
        that cannot start now but listed its tools before still offers them
        (a call then tries it again); one that never listed any fails the turn.
        Granted tools that would be offered under one name (of one server or
        of two) are left out, the others offered; the clash is reported once
        per listing (a ``tool_refused`` event, ``status().refused``, a warning).

        Raises:
            McpServerError: a granted server never started.
            ConfigurationError: a grant names a server this runtime does not declare.
        """
        from retinue.llm.mcp._tools import tool_def, unclashed

        servers = mcp_grant_servers(grants)
        unknown = [s for s in servers if s not in self._states]
        if unknown:
            raise ConfigurationError(
                f"no MCP server {', '.join(map(repr, unknown))} is declared in this runtime"
            )
        states = [self._states[s] for s in servers]
        outcomes = await asyncio.gather(
            *(self._session(state) for state in states), return_exceptions=True
        )
        granted: list[McpTool] = []
        for state, outcome in zip(states, outcomes, strict=True):
            if isinstance(outcome, asyncio.CancelledError):
                raise outcome
            if isinstance(outcome, BaseException) and not state.listed:
                raise outcome
            granted += [t for t in state.tools if mcp_granted(state.name, t.tool, grants)]
        kept, clashes = unclashed(granted)
        for reason, tool in clashes:  # reported once per listing, not per turn
            state = self._states[tool.server]
            if reason not in state.refused:
                state.refused.append(reason)
                self._event(state, "tool_refused", reason)
        return [tool_def(tool, self._call) for tool in kept]

    async def _call(self, tool: McpTool, arguments: dict[str, Any]) -> Any:
        """Run one checked call; return its value for the model.

        The request carries the call's idempotency key in its ``_meta``
        (``retinue/idempotency_key``), the same in every run of one call.

        Raises:
            ToolError: the tool reported an error, timed out, or broke the protocol.
            McpServerError: the server could not be started, or died during the call.
        """
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        from retinue.llm.mcp._tools import result_value

        state = self._states[tool.server]
        session = await self._session(state)
        timeout = state.config.tool_timeout_s
        try:
            key = call_or_fresh(tool.granted_name).idempotency_key
            meta = {MCP_META_KEY: key}
            result = await asyncio.wait_for(session.call(tool.tool, arguments, meta), timeout)
        except TimeoutError:
            raise ToolError(
                f"{tool.granted_name} timed out after tool_timeout_s={timeout:g} s; "
                "the server keeps running"
            ) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED or not session.alive:
                raise await self._broken(state, session, tool, str(exc)) from None
            raise ToolError(f"{tool.granted_name}: {exc} (MCP error {exc.code})") from None
        except McpServerError:
            raise
        except Exception as exc:
            if not session.alive:
                raise await self._broken(state, session, tool, str(exc)) from None
            raise ToolError(f"{tool.granted_name}: {type(exc).__name__}: {exc}") from None
        state.failures = 0
        return result_value(tool, result)

    async def _broken(
        self, state: _State, session: McpSession, tool: McpTool, detail: str
    ) -> McpServerError:
        reason = await session.why_ended() or detail
        session.mark_dead(reason)
        if state.session is session:
            state.session = None
            self._fail(state, "died", session._message(f"died: {reason}"))
        return McpServerError(
            f"MCP server {state.name!r} went away during the call to {tool.tool} ({reason}); "
            f"it is restarted on next use. {state.last_error}",
            server=state.name,
        )

    # -- shutdown --------------------------------------------------------------------------

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Stop every server; from any thread, idempotent; kill what did not stop in time.

        On the runtime's loop thread itself (an async runner closing the
        runtime) it cannot wait for the loop: it kills the stdio servers'
        process groups at once.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        sessions = [s.session for s in self._states.values() if s.session is not None]
        loop = self._loop
        if not sessions or loop is None or loop.is_closed():
            for session in sessions:
                session.kill()
            return
        on_loop = False
        with contextlib.suppress(RuntimeError):
            on_loop = asyncio.get_running_loop() is loop
        if not on_loop:
            future = asyncio.run_coroutine_threadsafe(self._close_all(sessions), loop)
            with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError, Exception):
                future.result(timeout)
        for session in sessions:
            session.kill()
        for state in self._states.values():
            if state.session is not None:
                state.session = None
                self._event(state, "closed")

    async def _close_all(self, sessions: Sequence[McpSession]) -> None:
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
