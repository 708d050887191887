"""MCP servers' tools for agents: declare servers, grant their tools, use them in turns.

:class:`McpServer` is pure data and :class:`McpManager` starts nothing until
a turn needs a server, so importing this package does not import the ``mcp``
SDK (``pip install 'retinue[mcp]'``). See :mod:`retinue.llm.mcp._manager` for
the lifecycle and :mod:`retinue.llm.mcp._tools` for schemas and results.
"""

from __future__ import annotations

from retinue.llm.mcp._config import McpServer
from retinue.llm.mcp._grants import check_mcp_grants, mcp_tool_defs, open_mcp
from retinue.llm.mcp._manager import McpManager, ServerStatus

__all__ = [
    "McpManager",
    "McpServer",
    "ServerStatus",
    "check_mcp_grants",
    "mcp_tool_defs",
    "open_mcp",
]
