"""The tools one LLM turn offers its model: the interface between the runner and the tools.

The runner (:mod:`retinue.llm.runner`, owned by the [llm] helper) only ever
sees this interface; the tools side (coordinator tool schemas and dispatch,
built-in workspace tools, host tools, capability ceilings; owned by the
[tools] helper) fills in :func:`build_toolbox`. The contract:

- ``build_toolbox(turn, *, tools, workspace, host_tools) -> ToolBox`` is
  called once per turn, on the runtime's event loop, before the first model
  call. ``turn`` is the :class:`~retinue.actors.turn.Turn` (its async twins
  ``spawn_async``, ``run_many_async`` ... and ``turn.profile``); ``tools`` is
  the profile's (or runner's) ``tools`` setting: a preset ``"read"`` /
  ``"modify"`` / ``"none"``, a sequence of exact tool names, or None (no
  ordinary tools); ``workspace`` is the folder built-in tools are confined to
  (None: no built-in tools); ``host_tools`` maps names to host-registered
  callables (may be empty).
- ``ToolBox.schemas()`` returns the OpenAI ``tools`` parameter (a list of
  ``{"type": "function", "function": {"name", "description", "parameters"}}``);
  an empty list means the model is offered no tools (the runner then omits
  the parameter).
- ``await ToolBox.call(name, arguments)`` runs one tool call (``arguments``
  is the raw JSON string the model produced) and returns the text the model
  sees as the tool result. It NEVER raises (except ``asyncio.CancelledError``
  when the turn is interrupted): invalid JSON, unknown tools, bad arguments,
  refused operations and tool exceptions come back as ``{"error": "..."}``
  with no traceback.

Until the tools side lands, this module offers no tools at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

__all__ = ["ToolBox", "ToolBoxFactory", "build_toolbox", "error_result"]


def error_result(message: str) -> str:
    """Return the tool result the model sees for a failed call: ``{"error": message}``."""
    return json.dumps({"error": message}, ensure_ascii=False)


class ToolBox(Protocol):
    """The tools of one turn: their schemas and a call that never raises."""

    def schemas(self) -> list[dict[str, Any]]:
        """Return the OpenAI ``tools`` parameter for this turn (may be empty)."""
        ...

    async def call(self, name: str, arguments: str) -> str:
        """Run tool ``name`` with the raw JSON ``arguments``; return the result text.

        Never raises: every failure is returned as ``{"error": "..."}``.
        """
        ...


ToolBoxFactory = Callable[..., ToolBox]
"""``factory(turn, *, tools, workspace, host_tools) -> ToolBox``."""


class _NoTools:
    """A toolbox that offers nothing (answers any call with an error)."""

    def schemas(self) -> list[dict[str, Any]]:
        """Return no tools."""
        return []

    async def call(self, name: str, arguments: str) -> str:
        """Refuse every call: no tool is offered."""
        return error_result(f"unknown tool {name!r}: this agent has no tools")


def build_toolbox(
    turn: Any,
    *,
    tools: str | Sequence[str] | None,
    workspace: Path | None,
    host_tools: Mapping[str, Callable[..., Any]],
) -> ToolBox:
    """Return the toolbox of one turn (see the module docstring for the contract)."""
    del turn, tools, workspace, host_tools
    return _NoTools()
