"""An MCP client the tests kill mid-run: client.py stdio STORE TEAM, client.py http URL, or
client.py wait URL REF (a ``wait`` that prints PROGRESS at each progress notification)."""

from __future__ import annotations

import asyncio
import os
import sys

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main() -> None:
    mode, target = sys.argv[1], sys.argv[2]
    if mode == "stdio":
        server = StdioServerParameters(
            command=sys.executable,
            args=["-m", "retinue.cli", "mcp", "--store", target, "--team", sys.argv[3]],
            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATIENT_S": "60"},
        )
        async with Client(server, mode="legacy") as client:
            print("CALLING", flush=True)
            print(await client.call_tool("run_team", {"task": "wait", "wait_s": 120}), flush=True)
    elif mode == "wait":
        headers = {"Authorization": f"Bearer {os.environ['TOKEN']}"}

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            print("PROGRESS", flush=True)

        async with (
            create_mcp_http_client(headers=headers) as http,
            Client(streamable_http_client(target, http_client=http), mode="legacy") as client,
        ):
            arguments = {"ref": sys.argv[3], "timeout_s": 120}
            print(
                await client.call_tool("wait", arguments, progress_callback=on_progress), flush=True
            )
    else:
        headers = {"Authorization": f"Bearer {os.environ['TOKEN']}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            Client(streamable_http_client(target, http_client=http), mode="legacy") as client,
        ):
            print("CALLING", flush=True)
            print(await client.call_tool("run_team", {"task": "wait", "wait_s": 120}), flush=True)


asyncio.run(main())
