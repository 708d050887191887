"""``McpServer``: how to reach one MCP server (pure data; nothing is started or imported).

Declare servers once per runtime (``Runtime.open(..., mcp_servers={...})``) or
per team file (``[mcp.<server>]``)::

    from retinue.llm import McpServer

    servers = {
        "time": McpServer.stdio("mcp-server-time"),
        "fs": McpServer.http("http://127.0.0.1:3001/mcp", headers={"Authorization": "Bearer ..."}),
    }

A stdio server's environment holds ``PATH``, ``HOME`` and ``LANG`` (to find and
run the command) plus only what is named: ``env`` (values) and
``env_from_host`` (names copied from this process's environment); no other
host variable reaches it. Its working directory defaults to the runtime's
workspace. Every bound is a field with a default.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import urlsplit

from retinue.errors import ConfigurationError

__all__ = ["BASE_ENV", "McpServer"]

BASE_ENV: tuple[str, ...] = ("PATH", "HOME", "LANG")
"""Host variables a stdio server always gets (when set): what finding and running it needs."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _finite_positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _positive(what: str, value: Any, *, integer: bool = False) -> None:
    wrong_kind = integer and not isinstance(value, int)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or wrong_kind
        or not _finite_positive(value)
    ):
        want = "a positive integer" if integer else "a positive number of seconds"
        raise ConfigurationError(f"McpServer {what} must be {want}, not {value!r}")


def _text(what: str, value: Any, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value) or "\x00" in value:
        raise ConfigurationError(f"McpServer {what} must be a non-empty string without NUL")
    return value


def _strings(what: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigurationError(f"McpServer {what} must be a list of strings, not {value!r}")
    return tuple(_text(f"{what} entry", item, empty=True) for item in value)


def _mapping(what: str, value: Any, name_re: re.Pattern[str]) -> Mapping[str, str]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"McpServer {what} must be a mapping of strings")
    checked: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or name_re.fullmatch(key) is None:
            raise ConfigurationError(f"McpServer {what}: {key!r} is not a valid name")
        text = _text(f"{what}[{key!r}]", item, empty=True)
        if "\r" in text or "\n" in text:
            raise ConfigurationError(f"McpServer {what}[{key!r}] must be one line")
        checked[key] = text
    return MappingProxyType(checked)


@dataclass(frozen=True)
class McpServer:
    """One MCP server: a command run over stdio, or a streamable-HTTP URL.

    Build one with :meth:`stdio` or :meth:`http`. ``startup_timeout_s`` bounds
    starting it and listing its tools, ``tool_timeout_s`` one tool call (a
    call past it comes back to the model as an error; the server keeps
    running). ``max_tools`` bounds its tool list, ``max_schema_bytes`` one
    tool's ``inputSchema`` (a tool over it is refused and reported),
    ``stderr_max_bytes`` the log of its stderr kept in memory,
    ``max_line_bytes`` one message line of a stdio server (one longer kills
    it, and the error says so). A server that
    dies is restarted on next use; after the second failure in a row each try
    waits ``restart_backoff_s``, doubling up to ``restart_backoff_max_s``.
    """

    transport: Literal["stdio", "http"]
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    env_from_host: tuple[str, ...] = ()
    cwd: Path | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    startup_timeout_s: float = 30.0
    tool_timeout_s: float = 60.0
    max_tools: int = 256
    max_schema_bytes: int = 32_768
    stderr_max_bytes: int = 65_536
    max_line_bytes: int = 16 * 1024 * 1024
    restart_backoff_s: float = 0.5
    restart_backoff_max_s: float = 30.0

    def __post_init__(self) -> None:
        """Check every field.

        Raises:
            ConfigurationError: a missing command or URL, a URL that is not
                http(s), a bad environment or header name, a value with NUL or a
                line break, or a timeout or bound that is not positive.
        """
        if self.transport == "stdio":
            _text("command", self.command)
            object.__setattr__(self, "args", _strings("args", self.args))
            object.__setattr__(self, "env", _mapping("env", self.env, _ENV_NAME))
            names = _strings("env_from_host", self.env_from_host)
            for name in names:
                if _ENV_NAME.fullmatch(name) is None:
                    raise ConfigurationError(f"McpServer env_from_host: {name!r} is not a name")
            object.__setattr__(self, "env_from_host", names)
            if self.cwd is not None:
                object.__setattr__(self, "cwd", Path(_text("cwd", os.fspath(self.cwd))))
        elif self.transport == "http":
            url = _text("url", self.url)
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigurationError(
                    f"McpServer url must be an http:// or https:// URL with a host, not {url!r}"
                )
            object.__setattr__(self, "headers", _mapping("headers", self.headers, _HEADER_NAME))
        else:
            raise ConfigurationError(
                f"McpServer transport must be 'stdio' or 'http', not {self.transport!r}"
            )
        for name in ("startup_timeout_s", "tool_timeout_s", "restart_backoff_s"):
            _positive(name, getattr(self, name))
        _positive("restart_backoff_max_s", self.restart_backoff_max_s)
        for name in ("max_tools", "max_schema_bytes", "stderr_max_bytes", "max_line_bytes"):
            _positive(name, getattr(self, name), integer=True)

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Iterable[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        env_from_host: Iterable[str] = (),
        cwd: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 30.0,
        tool_timeout_s: float = 60.0,
        **bounds: Any,
    ) -> McpServer:
        """A server run as ``command args...``, spoken to over its stdin and stdout.

        ``cwd`` defaults to the runtime's workspace (else this process's
        folder). ``bounds`` sets ``max_tools``, ``max_schema_bytes``,
        ``stderr_max_bytes``, ``max_line_bytes``, ``restart_backoff_s`` or
        ``restart_backoff_max_s``.

        Raises:
            ConfigurationError: a bad field (see the class), or an unknown bound.
        """
        return cls._make(
            bounds,
            transport="stdio",
            command=command,
            args=args,  # checked (a str is refused) and made a tuple by __post_init__
            env=env or {},
            env_from_host=env_from_host,
            cwd=None if cwd is None else Path(cwd),
            startup_timeout_s=startup_timeout_s,
            tool_timeout_s=tool_timeout_s,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        startup_timeout_s: float = 30.0,
        tool_timeout_s: float = 60.0,
        **bounds: Any,
    ) -> McpServer:
        """A server reached over streamable HTTP at ``url``, sending ``headers`` with each request.

        Raises:
            ConfigurationError: a bad field (see the class), or an unknown bound.
        """
        return cls._make(
            bounds,
            transport="http",
            url=url,
            headers=headers or {},
            startup_timeout_s=startup_timeout_s,
            tool_timeout_s=tool_timeout_s,
        )

    @classmethod
    def _make(cls, bounds: Mapping[str, Any], **fields: Any) -> McpServer:
        allowed = (
            "max_tools",
            "max_schema_bytes",
            "stderr_max_bytes",
            "max_line_bytes",
            "restart_backoff_s",
            "restart_backoff_max_s",
        )
        unknown = sorted(set(bounds) - set(allowed))
        if unknown:
            raise ConfigurationError(
                f"McpServer has no setting {', '.join(unknown)}; "
                f"its bounds are {', '.join(allowed)}"
            )
        return cls(**fields, **bounds)

    def __repr__(self) -> str:
        """Show where the server is, never environment or header values (they may be secrets)."""
        if self.transport == "http":
            return f"McpServer.http({self.url!r}, headers=[{', '.join(self.headers)}])"
        return (
            f"McpServer.stdio({self.command!r}, args={list(self.args)!r}, "
            f"env=[{', '.join(self.env)}], env_from_host={list(self.env_from_host)!r})"
        )

    def environment(self) -> dict[str, str]:
        """The environment a stdio server starts with: :data:`BASE_ENV`, ``env_from_host``, ``env``.

        Raises:
            ConfigurationError: a name in ``env_from_host`` is not set here.
        """
        env = {name: os.environ[name] for name in BASE_ENV if name in os.environ}
        env.setdefault("PATH", os.defpath)
        env.setdefault("LANG", "C.UTF-8")
        missing = [name for name in self.env_from_host if name not in os.environ]
        if missing:
            raise ConfigurationError(
                f"MCP server env_from_host names {', '.join(missing)}, which this process's "
                "environment does not set; set it or remove it from env_from_host"
            )
        env.update({name: os.environ[name] for name in self.env_from_host})
        env.update(self.env)
        return env
