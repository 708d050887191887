"""A stdio MCP server whose tool listing a client must survive, speaking JSON-RPC lines by hand.

Run as ``python odd.py``. The SDK's own servers check what they send (an
SDK server cannot list an invalid schema), so this one writes its messages
itself, as a third-party server may. It lists ``echo`` (a plain tool),
``shapeless`` (``"inputSchema": {}``, not an object schema), ``tasked``
(``execution.taskSupport`` ``"required"``: callable only as a task),
``maybe_tasked`` (``"optional"``: a plain call is fine) and ``flood``, whose
answer is one line of ``ODD_FLOOD_BYTES`` bytes (default 4 MiB), for a
client's line bound. ``ODD_ONLY=echo,flood`` lists only the tools named.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
TOOLS: list[dict[str, Any]] = [
    {"name": "echo", "description": "Echo the text back.", "inputSchema": _TEXT},
    {"name": "shapeless", "description": "A tool whose schema is empty.", "inputSchema": {}},
    {
        "name": "tasked",
        "description": "Runs only as a task.",
        "inputSchema": _TEXT,
        "execution": {"taskSupport": "required"},
    },
    {
        "name": "maybe_tasked",
        "description": "Runs as a task or as a plain call.",
        "inputSchema": _TEXT,
        "execution": {"taskSupport": "optional"},
    },
    {
        "name": "flood",
        "description": "Answer with one huge line.",
        "inputSchema": {"type": "object"},
    },
]


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _result(request: dict[str, Any]) -> dict[str, Any]:
    method, params = request["method"], request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "odd", "version": "1"},
        }
    if method == "tools/list":
        only = [name for name in os.environ.get("ODD_ONLY", "").split(",") if name]
        return {"tools": [tool for tool in TOOLS if not only or tool["name"] in only]}
    if method == "tools/call":
        if params["name"] == "flood":
            text = "x" * int(os.environ.get("ODD_FLOOD_BYTES", str(4 * 1024 * 1024)))
        else:
            text = f"{params['name']}: {(params.get('arguments') or {}).get('text', '')}"
        return {"content": [{"type": "text", "text": text}], "isError": False}
    return {}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "id" in request and "method" in request:
            _send({"jsonrpc": "2.0", "id": request["id"], "result": _result(request)})


if __name__ == "__main__":
    main()
