"""What one model turn reads from its runner: the :class:`RunnerSettings` protocol.

A :class:`~retinue.llm.turn._session.TurnSession` is typed against this protocol
rather than against :class:`~retinue.llm.turn._runner.LiteLLMRunner`, which
satisfies it (and builds the sessions), so the session module does not import
the runner's: the settings are read, never written, by a turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from retinue.llm.cassette import Cassette
from retinue.llm.mcp import McpManager
from retinue.llm.model import CallSettings
from retinue.llm.tools import ToolBoxProtocol
from retinue.llm.turn._offered import OfferedSchemas

__all__ = ["RunnerSettings"]


class RunnerSettings(Protocol):
    """One agent kind's model settings, as a turn session uses them."""

    @property
    def model(self) -> str:
        """The litellm model name (named in errors)."""

    @property
    def calls(self) -> CallSettings:
        """How each model call is made: litellm's arguments, the deadline, the retries."""

    @property
    def tools(self) -> str | Sequence[str] | None:
        """The tools setting, or None for the profile's."""

    @property
    def result_format(self) -> str | None:
        """``"structured"`` for a structured result, or None for the profile's."""

    @property
    def max_tool_calls(self) -> int:
        """The most tool calls one turn may make."""

    @property
    def toolbox_builder(self) -> Callable[..., ToolBoxProtocol]:
        """Builds each turn's toolbox (a host's builder's result adapted to the protocol)."""

    @property
    def offered(self) -> OfferedSchemas:
        """The default builder's schemas, kept between turns."""

    @property
    def workspace(self) -> Path | None:
        """The folder the built-in tools are confined to."""

    @property
    def host_tools(self) -> Mapping[str, Callable[..., Any]]:
        """Host functions offered as tools, by name."""

    @property
    def tool_timeout_s(self) -> float:
        """Seconds one file or host tool call may take."""

    @property
    def mcp(self) -> McpManager | None:
        """The runtime's MCP servers, or None."""

    @property
    def cassette(self) -> Cassette | None:
        """The cassette calls are recorded to or answered from, or None."""
