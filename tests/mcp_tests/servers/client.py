"""An MCP client the tests kill mid-run: client.py stdio STORE TEAM, or client.py http URL."""

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
    else:
        headers = {"Authorization": f"Bearer {os.environ['TOKEN']}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            Client(streamable_http_client(target, http_client=http), mode="legacy") as client,
        ):
            print("CALLING", flush=True)
            print(await client.call_tool("run_team", {"task": "wait", "wait_s": 120}), flush=True)


asyncio.run(main())
