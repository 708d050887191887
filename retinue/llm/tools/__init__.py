"""Tools: what a model may call, and how a call never raises.

``ToolBox`` (one turn's tools: the coordinator tools, the workspace's
built-ins on their bounded thread pool, the host's ``@tool`` functions) with
their schemas from msgspec structs and their argument checks;
``ToolBoxProtocol``, what a turn's session sees of any toolbox (a host
``toolbox=`` builder's result adapted to it once: ``adapting``, ``as_toolbox``); and the
``Workspace`` the built-ins stay inside; the tool call running now
(``current_call``: its idempotency key, attempt, whether it is in doubt).

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.llm.tools._arguments import ToolArgumentError, ToolDef, ToolError
from retinue.llm.tools._call import call_or_fresh, calling, current_call
from retinue.llm.tools._host import HostTool, tool
from retinue.llm.tools._protocol import PlainToolBox, ToolBoxProtocol, adapting, as_toolbox
from retinue.llm.tools._toolbox import ToolBox, ToolBoxBuilder, build_toolbox
from retinue.llm.tools._workspace import Workspace

__all__ = [
    "HostTool",
    "PlainToolBox",
    "ToolArgumentError",
    "ToolBox",
    "ToolBoxBuilder",
    "ToolBoxProtocol",
    "ToolDef",
    "ToolError",
    "Workspace",
    "adapting",
    "as_toolbox",
    "build_toolbox",
    "call_or_fresh",
    "calling",
    "current_call",
    "tool",
]
