"""What the MCP manager keeps per server: its declaration, session, tools and failures."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from retinue.errors import McpServerError
from retinue.llm.mcp._config import McpServer

if TYPE_CHECKING:
    from retinue.llm.mcp._session import McpSession
    from retinue.llm.mcp._tools import McpTool
    from retinue.llm.mcp._transport import BoundedLog

__all__ = ["ServerStatus", "missing_sdk"]


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark a start task's outcome as seen (its callers may all have been cancelled)."""
    if not task.cancelled():
        task.exception()


def missing_sdk() -> McpServerError:
    """The error for a runtime with MCP servers but without the ``mcp`` SDK installed."""
    return McpServerError(
        "MCP servers need the mcp extra, which is not installed: pip install 'retinue[mcp]'"
    )


@dataclass
class ServerStatus:
    """What the manager knows of one server (see :meth:`McpManager.status`)."""

    name: str
    running: bool = False
    failures: int = 0
    last_error: str = ""
    pid: int | None = None
    tools: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()


@dataclass
class _State:
    name: str
    config: McpServer
    log: BoundedLog | None = None
    session: McpSession | None = None
    starting: asyncio.Task[McpSession] | None = None
    tools: list[McpTool] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    listed: bool = False
    failures: int = 0
    last_error: str = ""
    retry_at: float = 0.0
