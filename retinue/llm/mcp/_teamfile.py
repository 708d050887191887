"""The ``[mcp.<server>]`` tables of a team file, and the checks of its agents' tools."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from retinue.errors import ConfigurationError, TeamFileError
from retinue.llm.mcp._config import McpServer
from retinue.protocol.tools import mcp_grant_servers, resolve_profile_tools, resolve_tools
from retinue.protocol.validation import decode_table

__all__ = ["McpSpec", "check_tools", "mcp_servers"]

Positive = Annotated[float, msgspec.Meta(gt=0)]
_NAME = re.compile(r"[a-z0-9_]{1,40}")


class McpSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ``[mcp.<server>]`` table: an MCP server (stdio ``command`` or HTTP ``url``)."""

    command: str | None = None
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    """Variables the server gets, with their values (nothing else of the host's but PATH,
    HOME and LANG)."""
    env_from_host: list[str] = msgspec.field(default_factory=list)
    """Names of this process's variables passed through (a secret stays out of the file)."""
    cwd: str | None = None
    """The server's folder, relative to the team file (default: the workspace)."""
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    startup_timeout_s: Positive = 30.0
    tool_timeout_s: Positive = 60.0


def mcp_servers(label: str, raw: dict[str, Any], source: Path | None) -> dict[str, McpServer]:
    """Decode the ``[mcp.<server>]`` tables of team file ``label`` into servers.

    Raises:
        TeamFileError: a bad name, an unknown key, a wrong type, both or
            neither of command and url, or a key of the other transport.
    """
    servers: dict[str, McpServer] = {}
    for name, table in raw.items():
        where = f"mcp.{name}"
        if not _NAME.fullmatch(name) or name == "root":
            raise TeamFileError(
                label,
                where,
                "",
                "an MCP server name is an agent name: 1-40 characters of a-z, 0-9, _",
            )
        spec = decode_table(label, where, table, McpSpec)
        if (spec.command is None) == (spec.url is None):
            raise TeamFileError(
                label, where, "", "give either command (a stdio server) or url (streamable HTTP)"
            )
        stdio_keys = ("args", "env", "env_from_host", "cwd")
        wrong = [k for k in stdio_keys if getattr(spec, k)] if spec.url else []
        wrong += ["headers"] if spec.command and spec.headers else []
        if wrong:
            raise TeamFileError(
                label,
                where,
                wrong[0],
                "is for the other transport (stdio: command, args, env, "
                "env_from_host, cwd; HTTP: url, headers)",
            )
        timeouts = {
            "startup_timeout_s": spec.startup_timeout_s,
            "tool_timeout_s": spec.tool_timeout_s,
        }
        try:
            if spec.command is not None:
                cwd = Path(spec.cwd).expanduser() if spec.cwd is not None else None
                if cwd is not None and not cwd.is_absolute() and source is not None:
                    cwd = source.parent / cwd
                servers[name] = McpServer.stdio(
                    spec.command,
                    spec.args,
                    env=spec.env,
                    env_from_host=spec.env_from_host,
                    cwd=cwd,
                    **timeouts,
                )
            else:
                assert spec.url is not None
                servers[name] = McpServer.http(spec.url, headers=spec.headers, **timeouts)
        except ConfigurationError as exc:
            raise TeamFileError(label, where, "", str(exc)) from None
    return servers


def check_tools(
    label: str, agents: Mapping[str, tuple[Any, list[str]]], servers: Mapping[str, McpServer]
) -> None:
    """Check a team's tools (agent -> (tools spec, subagents)): valid specs, declared MCP
    servers, and the capability ceilings.

    Raises:
        TeamFileError: naming the agent's table and the key ``tools``.
    """
    specs: dict[str, tuple[Any, list[str]]] = {}
    for name, (tools, subagents) in agents.items():
        try:
            names = resolve_tools(tools, owner=name) or ()
        except ConfigurationError as exc:
            raise TeamFileError(label, f"agents.{name}", "tools", str(exc)) from None
        for server in mcp_grant_servers(names):
            if server not in servers:
                raise TeamFileError(
                    label,
                    f"agents.{name}",
                    "tools",
                    f"grants tools of MCP server {server!r}, which the file does not declare "
                    f"(add an [mcp.{server}] table)",
                )
        specs[name] = (tools, subagents)
    try:
        resolve_profile_tools(specs)
    except ConfigurationError as exc:
        raise TeamFileError(label, "agents", "tools", str(exc)) from None
