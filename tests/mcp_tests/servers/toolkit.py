"""An MCP server for retinue's tests, built with the SDK's MCPServer: stdio, or HTTP on 127.0.0.1.

Run it as ``python toolkit.py`` (stdio) or ``python toolkit.py http PORT``.
Its tools exercise what the client side must handle: slow calls, crashes,
tools added at run time, errors, images, big schemas and stderr noise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent, ToolAnnotations

server = MCPServer("toolkit", log_level="WARNING")


@server.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return text


@server.tool(
    description="Answer with the idempotency key the request's _meta carried.",
    annotations=ToolAnnotations(read_only_hint=True),
)
def request_key(ctx: Context) -> str:
    meta = ctx.request_context.meta
    data = meta if isinstance(meta, dict) else getattr(meta, "model_extra", None) or {}
    return str(data.get("retinue/idempotency_key"))


@server.tool(
    description="Pretend to store a value (the same key again changes nothing).",
    annotations=ToolAnnotations(idempotent_hint=True),
)
def put(value: str) -> str:
    return f"stored {value}"


@server.tool(description="Sleep for some seconds, then answer.")
async def slow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


_met = {"count": 0}


@server.tool(
    description="Wait until `n` calls of meet are in flight at once (or fail after timeout)."
)
async def meet(n: int, timeout: float = 20.0) -> str:
    _met["count"] += 1
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while _met["count"] < n:
                    await asyncio.sleep(0.01)
                return f"met {n}"
        raise ToolError(f"only {_met['count']} of {n} calls arrived together")
    finally:
        await asyncio.sleep(0.05)
        _met["count"] -= 1


@server.tool(
    description="Report the environment, folder and process group.", structured_output=False
)
def environment() -> str:
    import json

    return json.dumps(
        {"env": dict(os.environ), "cwd": os.getcwd(), "pid": os.getpid(), "pgid": os.getpgid(0)}
    )


@server.tool(description="Start a child process that sleeps (it shares the process group).")
def spawn_child() -> int:
    import subprocess

    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]).pid


@server.tool(description="Write lines to stderr.")
def noise(lines: int, text: str = "x" * 100) -> str:
    for n in range(lines):
        print(f"{n}: {text}", file=sys.stderr, flush=True)
    return "done"


@server.tool(description="Exit the process at once.")
def crash(code: int = 3) -> str:
    print("toolkit: crashing on purpose", file=sys.stderr, flush=True)
    os._exit(code)


@server.tool(description="Fail the way a tool fails.")
def fail(reason: str) -> str:
    raise ToolError(f"refused: {reason}")


@server.tool(description="Answer with an image and text.", structured_output=False)
def picture() -> list[Any]:
    return [
        TextContent(type="text", text="a red dot"),
        ImageContent(type="image", data="iVBORw0KGgo=" * 100, mime_type="image/png"),
    ]


@server.tool(description="Add a tool named `name` at run time and announce it.")
async def grow(name: str, ctx: Context) -> str:
    def added(text: str) -> str:
        return f"{name}: {text}"

    server.add_tool(added, name=name, description=f"Added at run time: {name}.")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


if os.environ.get("TOOLKIT_BIG_SCHEMA"):
    properties = {f"field_{n}": {"type": "string", "description": "x" * 200} for n in range(200)}

    async def _huge(**kwargs: Any) -> str:
        return "huge"

    huge = server._tool_manager.add_tool(
        _huge, name="huge", description="A tool with a big schema."
    )
    huge.parameters = {"type": "object", "properties": properties}


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
