"""What a model turn's session sees of a toolbox: :class:`ToolBoxProtocol`, and the adapter.

Every toolbox a :class:`~retinue.llm.turn._session.TurnSession` holds
satisfies :class:`ToolBoxProtocol`: retinue's own
:class:`~retinue.llm.tools._toolbox.ToolBox` does, and whatever a host's
``toolbox=`` builder returns is adapted to it once, where the runner is built
(:func:`adapting`), so the session never asks which kind it holds. A host's
toolbox needs only ``schemas()`` and ``await call(name, arguments)`` (and may
offer ``granted`` or ``names``): :class:`PlainToolBox` gives it the rest the
way the session always treated it (every tool ``unsafe``, of kind
``function``, its error read from its ``{"error": ...}`` result).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from retinue.llm.tools._call import calling
from retinue.llm.tools._toolbox import ToolBox, ToolBoxBuilder, build_toolbox
from retinue.protocol.arrival import tool_outcome
from retinue.protocol.effects import Effect, ToolCall

__all__ = ["PlainToolBox", "ToolBoxProtocol", "adapting", "as_toolbox"]


class ToolBoxProtocol(Protocol):
    """One turn's tools, as its session uses them."""

    @property
    def granted(self) -> dict[str, str]:
        """Each offered name -> the name profiles grant the tool by."""
        ...

    def effect(self, name: str) -> Effect:
        """A tool's effect class as declared (``unsafe`` for a name it does not offer)."""
        ...

    def kind(self, name: str) -> str:
        """A tool's ``gen_ai.tool.type``: ``extension`` (an MCP server's) or ``function``."""
        ...

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` parameter of the turn (the caller may edit it)."""
        ...

    async def call(self, name: str, arguments: str, call: ToolCall | None = None) -> str:
        """Run a tool call as ``call``; return the JSON text the model sees. Never raises,
        except ``asyncio.CancelledError`` and ``TurnInterrupted``."""
        ...

    async def run(
        self, name: str, arguments: str, call: ToolCall | None = None
    ) -> tuple[str, str | None]:
        """Like :meth:`call`; return ``(result, error)``, both made storable (``error``:
        None if the call succeeded)."""
        ...


class PlainToolBox:
    """A host's own toolbox (``schemas()`` and ``await call(name, arguments)``) as a
    :class:`ToolBoxProtocol`."""

    __slots__ = ("box",)

    def __init__(self, box: Any) -> None:
        """Adapt ``box`` (nothing of it is read yet)."""
        self.box = box

    @property
    def granted(self) -> dict[str, str]:
        """The box's own ``granted`` mapping, else each offered name (its ``names``, else
        those of its ``schemas()``) standing for itself."""
        granted = getattr(self.box, "granted", None)
        if isinstance(granted, dict):
            return granted
        names = getattr(self.box, "names", None)
        if names is None:
            names = [s.get("function", {}).get("name") for s in self.box.schemas()]
        return {name: name for name in names if isinstance(name, str)}

    def effect(self, name: str) -> Effect:
        """``unsafe``: a host's toolbox declares no effects."""
        return "unsafe"

    def kind(self, name: str) -> str:
        """``function``."""
        return "function"

    def schemas(self) -> list[dict[str, Any]]:
        """The box's ``schemas()``."""
        schemas: list[dict[str, Any]] = self.box.schemas()
        return schemas

    async def call(self, name: str, arguments: str, call: ToolCall | None = None) -> str:
        """The box's ``call(name, arguments)``, its tools finding ``call`` as the running call."""
        with calling(call):
            result: str = await self.box.call(name, arguments)
        return result

    async def run(
        self, name: str, arguments: str, call: ToolCall | None = None
    ) -> tuple[str, str | None]:
        """Like :meth:`call`; the error is read from the result (``{"error": ...}``), and
        both are made storable here, where they arrive."""
        result = await self.call(name, arguments, call)
        try:
            data = json.loads(result) if result.startswith("{") else None
        except ValueError:
            data = None
        error = data.get("error") if isinstance(data, dict) else None
        return tool_outcome(result, None if error is None else str(error))


def as_toolbox(box: object) -> ToolBoxProtocol:
    """Return ``box`` if it is retinue's :class:`ToolBox`, else it adapted
    (:class:`PlainToolBox`)."""
    return box if isinstance(box, ToolBox) else PlainToolBox(box)


def adapting(builder: ToolBoxBuilder | None) -> Callable[..., ToolBoxProtocol]:
    """Return the builder a runner calls each turn: ``builder`` (None: :func:`build_toolbox`),
    whatever it returns adapted with :func:`as_toolbox`."""
    if builder is None or builder is build_toolbox:
        return build_toolbox
    given = builder

    def build(turn: Any, **settings: Any) -> ToolBoxProtocol:
        return as_toolbox(given(turn, **settings))

    return build
