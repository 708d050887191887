"""One live connection to one MCP server, owned by a task on the runtime's event loop.

The SDK's client is an async context manager whose task groups must be
entered and left by one task: :class:`McpSession` runs it in an owner task
that starts the transport, initialises, lists the tools and then waits until
it is closed or the server goes away. Tool calls come from any task on the
same loop and may run concurrently. A ``notifications/tools/list_changed``
makes the owner list the tools again. Each listing passes a
:class:`~retinue.llm.mcp._screen.ListingScreen` first: a tool the SDK would
refuse is left out (and reported) instead of failing the whole listing.
Needs the ``mcp`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import mcp.types as mcp_types_module
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import Implementation

from retinue.errors import ConfigurationError, McpServerError
from retinue.llm.mcp._config import McpServer
from retinue.llm.mcp._screen import ListingScreen
from retinue.llm.mcp._transport import BoundedLog, kill_group, stdio_transport

__all__ = ["MAX_LIST_PAGES", "McpSession"]

MAX_LIST_PAGES = 64
"""Most ``tools/list`` pages read in one listing (a paginator that never ends is an error)."""
_CLIENT_INFO = Implementation(name="retinue", version="0.1.0")


def _reason(exc: BaseException) -> str:
    """One line for an exception, unwrapping the task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class McpSession:
    """A started MCP server: its tools (as listed), calls, and the task that owns it."""

    def __init__(
        self,
        name: str,
        config: McpServer,
        *,
        cwd: Path | None,
        log: BoundedLog,
        on_death: Callable[[McpSession, str], None],
        on_tools: Callable[[McpSession], None],
    ) -> None:
        """Prepare (nothing runs until :meth:`start`)."""
        self.name = name
        self.config = config
        self.cwd = cwd
        self.log = log
        self.tools: Sequence[Any] = ()
        self.refused: list[str] = []
        """Why each tool the last listing left out was refused (``server.tool: why``)."""
        self.pid: int | None = None
        self.alive = False
        self._on_death = on_death
        self._on_tools = on_tools
        self._client: Any = None
        self._wake = asyncio.Event()
        self._closing = False
        self._ended = ""
        self._owner: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._again = False
        self._screen = ListingScreen(name)

    async def start(self) -> None:
        """Start the server and list its tools, within ``startup_timeout_s``.

        Raises:
            McpServerError: it did not start, answer or list its tools in time.
        """
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.get_running_loop().create_task(
            self._own(ready), name=f"retinue-mcp-{self.name}"
        )
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.config.startup_timeout_s)
        except TimeoutError:
            await self.close()
            raise McpServerError(
                self._message(
                    f"did not start within startup_timeout_s={self.config.startup_timeout_s:g} s"
                ),
                server=self.name,
            ) from None
        except BaseException:
            await self.close()
            raise

    def _message(self, what: str) -> str:
        tail = self.log.tail()
        where = self.config.command if self.config.transport == "stdio" else self.config.url
        text = f"MCP server {self.name!r} ({where}) {what}"
        return f"{text}; its stderr ends: {tail}" if tail else text

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        config = self.config
        if config.transport == "stdio":
            assert config.command is not None
            return stdio_transport(
                config.command,
                config.args,
                env=config.environment(),
                cwd=config.cwd or self.cwd,
                log=self.log,
                max_line_bytes=config.max_line_bytes,
                on_exit=self._exited,
                on_start=self._started,
            )
        assert config.url is not None
        http = await stack.enter_async_context(create_mcp_http_client(headers=dict(config.headers)))
        return streamable_http_client(config.url, http_client=http)

    def _started(self, pid: int) -> None:
        self.pid = pid

    def _exited(self, reason: str) -> None:
        self._ended = self._ended or reason
        self._wake.set()

    async def _own(self, ready: asyncio.Future[None]) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = Client(
                    self._screen.wrap(await self._transport(stack)),
                    mode="legacy",
                    cache=None,
                    message_handler=self._on_message,
                    client_info=_CLIENT_INFO,
                )
                await stack.enter_async_context(client)
                self._client = client
                self.tools = await self._list(client)
                self.alive = True
                ready.set_result(None)
                await self._wake.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except Exception as exc:
            reason = _reason(exc)
            self._ended = self._ended or reason
            if not ready.done():
                ready.set_exception(McpServerError(self._message(f"failed to start: {reason}")))
        finally:
            self.alive = False
            self._client = None
            if self._refresh is not None:
                self._refresh.cancel()
            if not ready.done():
                ready.set_exception(McpServerError(self._message("ended while starting")))
            elif not self._closing:
                self._on_death(self, self._ended or "its connection ended")

    async def _list(self, client: Any) -> list[Any]:
        tools: list[Any] = []
        cursor: str | None = None
        self._screen.take_refused()  # what an earlier, failed listing left
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            if len(tools) > self.config.max_tools:
                raise ConfigurationError(
                    f"it lists more than max_tools={self.config.max_tools} tools; "
                    "raise McpServer(max_tools=...) to use it"
                )
            cursor = page.next_cursor
            if cursor is None:
                self.refused = self._screen.take_refused()
                return tools
        raise ConfigurationError(f"its tool list has more than {MAX_LIST_PAGES} pages")

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types_module.ToolListChangedNotification):
            self._again = True
            if self._refresh is None or self._refresh.done():
                self._refresh = asyncio.get_running_loop().create_task(self._relist())

    async def _relist(self) -> None:
        while self._again and self._client is not None:
            self._again = False
            try:
                self.tools = await asyncio.wait_for(
                    self._list(self._client), self.config.startup_timeout_s
                )
            except Exception as exc:
                self.log.write(
                    f"[retinue] listing the tools again failed: {_reason(exc)}\n".encode()
                )
                return
            self._on_tools(self)

    async def call(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> Any:
        """Call ``tool`` (``meta``: the request's ``_meta``); return the SDK's
        ``CallToolResult`` (its errors propagate).

        Raises:
            McpServerError: the session is not (or no longer) connected.
        """
        client = self._client
        if client is None or not self.alive:
            raise McpServerError(self._message("is not connected"), server=self.name)
        return await client.call_tool(tool, arguments, meta=meta)

    def ended(self) -> str:
        """Why the session ended ('' while it runs)."""
        return self._ended

    async def why_ended(self, timeout: float = 1.0) -> str:
        """Why a stdio server's session ended, waiting up to ``timeout`` s to learn its exit."""
        if self.config.transport == "stdio":
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    while not self._ended:
                        await asyncio.sleep(0.01)
        return self._ended

    def kill(self) -> None:
        """Kill the stdio server's process group at once (from any thread; no wait)."""
        if self.pid is not None:
            kill_group(self.pid)

    def mark_dead(self, reason: str) -> None:
        """End the session because a call found it broken; the owner reports the death."""
        self._ended = self._ended or reason
        self.alive = False
        self._wake.set()

    async def close(self) -> None:
        """Stop the server (its process group is killed) and wait for the owner task."""
        self._closing = True
        self.alive = False
        self._wake.set()
        owner = self._owner
        if owner is not None and not owner.done():
            try:
                await asyncio.wait_for(asyncio.shield(owner), 5.0)
            except (TimeoutError, asyncio.CancelledError):
                owner.cancel()
                self.kill()
            except Exception:
                self.kill()
