"""The LLM layer: a litellm-driven turn runner, the tools a model sees, and an offline model.

The tools: the coordinator tools (spawn, send, wait, ...), the built-in
workspace tools (presets ``"read"`` and ``"modify"``) and host tools (the
host's own functions, registered with :func:`tool` and passed to
``LiteLLMRunner(host_tools=...)``) and MCP servers' tools (:class:`McpServer`,
declared with ``Runtime.open(..., mcp_servers=...)``; the ``mcp`` SDK is
imported only when a server starts).

Importing this package does not import litellm; the runner imports it the
first time a model is called (see :mod:`retinue.llm.model._provider`).
"""

from __future__ import annotations

from retinue.llm.mcp import McpServer
from retinue.llm.model import SCRIPTED_MODEL
from retinue.llm.tools import (
    HostTool,
    ToolBox,
    ToolBoxProtocol,
    ToolError,
    Workspace,
    build_toolbox,
    tool,
)
from retinue.llm.turn import LiteLLMRunner, model_runner_factory

__all__ = [  # noqa: RUF022 (plain sorted(), as retinue/__init__.py)
    "HostTool",
    "LiteLLMRunner",
    "McpServer",
    "SCRIPTED_MODEL",
    "ToolBox",
    "ToolBoxProtocol",
    "ToolError",
    "Workspace",
    "build_toolbox",
    "model_runner_factory",
    "tool",
]
