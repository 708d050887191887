"""Where MCP servers meet the runtime and the runner: declared, checked at open, offered."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from retinue.errors import ArgumentTypeError, ConfigurationError
from retinue.llm.mcp._config import McpServer
from retinue.llm.mcp._manager import McpManager
from retinue.llm.tools import ToolDef
from retinue.protocol.messages import Event
from retinue.protocol.tools import is_mcp_name, mcp_grant_servers, resolve_tools

__all__ = ["check_mcp_grants", "mcp_tool_defs", "open_mcp"]


def open_mcp(
    team_servers: Mapping[str, McpServer] | None,
    servers: Mapping[str, McpServer] | None,
    workspace: Path | None,
    publish: Callable[[Sequence[Event]], None] | None,
) -> McpManager | None:
    """Return the runtime's MCP manager for the team's and the caller's servers (None if none).

    The caller's ``servers`` win over the team's of the same name.

    Raises:
        ArgumentTypeError: ``servers`` is not a mapping.
        ConfigurationError: a bad server name or a value that is not an McpServer.
    """
    if servers is not None and not isinstance(servers, Mapping):
        raise ArgumentTypeError(
            "mcp_servers must be a mapping of server names to McpServer, "
            f"not {type(servers).__name__}"
        )
    merged = {**(team_servers or {}), **(servers or {})}
    if not merged:
        return None
    return McpManager(merged, workspace=workspace, publish=publish)


def check_mcp_grants(
    profiles: Mapping[str, Any], runners: Mapping[str, Any], manager: McpManager | None
) -> None:
    """Check at open that every granted MCP tool has a declared server and a runner that uses it.

    Raises:
        ConfigurationError: a profile grants tools of a server the runtime does
            not declare, or its model runner was built outside this runtime (it
            has no access to the runtime's servers).
    """
    declared = set(manager.names) if manager is not None else set()
    for name, profile in profiles.items():
        names = resolve_tools(getattr(profile, "tools", None), owner=name) or ()
        servers = mcp_grant_servers(names)
        missing = [s for s in servers if s not in declared]
        if missing:
            raise ConfigurationError(
                f"profile {name!r} grants tools of MCP server {missing[0]!r}, which this runtime "
                f"does not declare; declare it in the team file ([mcp.{missing[0]}]) or pass "
                f"Runtime.open(..., mcp_servers={{{missing[0]!r}: McpServer.stdio(...)}})"
            )
        runner = runners.get(name)
        if servers and hasattr(runner, "mcp") and getattr(runner, "mcp", None) is not manager:
            raise ConfigurationError(
                f"profile {name!r} grants MCP tools, but its LiteLLMRunner was built outside "
                "this runtime and cannot reach the runtime's MCP servers; give the profile a "
                "model (Profile(model=..., model_settings={...})) and let the runtime build it"
            )


async def mcp_tool_defs(manager: McpManager | None, tools: object, owner: str) -> list[ToolDef]:
    """Return the MCP tools a turn is granted by ``tools`` (its resolved tools spec).

    Raises:
        ConfigurationError: MCP tools are granted but the runner has no servers.
        McpServerError: a granted server never started (see :meth:`McpManager.tool_defs`).
    """
    grants = [n for n in resolve_tools(tools, owner=owner) or () if is_mcp_name(n)]
    if not grants:
        return []
    if manager is None:
        raise ConfigurationError(
            f"profile {owner!r} grants MCP tools ({', '.join(grants)}) but its runner has no "
            "MCP servers; declare them with Runtime.open(..., mcp_servers=...) or [mcp.<server>]"
        )
    return await manager.tool_defs(grants)
