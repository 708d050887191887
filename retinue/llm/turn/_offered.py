"""The tool schemas a runner's turns offer, kept between turns: a turn that calls no tool
builds no toolbox.

A turn whose runner builds its toolbox with the default builder
(:func:`~retinue.llm.tools._toolbox.build_toolbox`) and whose tools are only its
coordinator and host tools (no built-in tool, whose workspace is checked as it
is built, and no MCP tool, whose server is asked) offers exactly the schemas the
last such turn of the same profile, limits and spawn right offered: those, with
the runner's own settings, are all the builder reads. Such a turn takes them
from here, and builds its toolbox only when its model calls a tool.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from retinue.actors import Profile
from retinue.llm.tools import ToolBox, ToolBoxProtocol
from retinue.protocol.limits import Limits
from retinue.protocol.tools import BUILTIN_TOOLS, is_mcp_name

__all__ = ["OfferedSchemas"]

_KEPT_MAX = 64
"""Offers one runner keeps at most (each holds its profile and limits objects alive)."""


class OfferedSchemas:
    """One runner's kept schemas, by profile, limits and whether the agent may spawn.

    Used on the runtime's one event loop only. A key holds its profile and
    limits objects, and a lookup checks it holds the very ones asked about: an
    id the collector gave to a new object is never taken for an old one.
    """

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        """Keep nothing yet."""
        self._kept: dict[tuple[int, int, bool], tuple[Profile, Limits, bytes]] = {}

    def get(self, profile: Profile, limits: Limits, can_spawn: bool) -> list[dict[str, Any]] | None:
        """Return a fresh copy of the kept schemas of this offer, or None if none is kept."""
        kept = self._kept.get((id(profile), id(limits), can_spawn))
        if kept is None or kept[0] is not profile or kept[1] is not limits:
            return None
        schemas: list[dict[str, Any]] = msgspec.json.decode(kept[2])
        return schemas

    def keep(
        self,
        profile: Profile,
        limits: Limits,
        can_spawn: bool,
        toolbox: ToolBoxProtocol,
        granted: Iterable[str],
    ) -> None:
        """Keep the default builder's ``toolbox``'s schemas for this offer when ``granted``
        (the turn's resolved tool names) has no built-in or MCP tool; else keep nothing."""
        if not isinstance(toolbox, ToolBox):  # the default builder's always is
            return
        if not any(n in BUILTIN_TOOLS or is_mcp_name(n) for n in granted):
            if len(self._kept) >= _KEPT_MAX:  # a runner given to runtime after runtime
                self._kept.clear()
            self._kept[(id(profile), id(limits), can_spawn)] = (profile, limits, toolbox.json)
