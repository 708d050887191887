"""MCP tools and side effects: the class comes from the annotations, the key rides in ``_meta``."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from mcp_tests.conftest import TOOLKIT, answer, last_tool_result, model_settings, script, tool_call
from retinue import CompletionStatus, Profile, Runtime, ToolCall
from retinue.llm import McpServer
from retinue.llm.mcp import McpManager
from retinue.llm.tools import ToolBox
from retinue.protocol.effects import Effect, idempotency_key
from retinue.testing import OpenAIStub


def open_kit(tmp_path: Path, stub: OpenAIStub) -> Runtime:
    profiles = [
        Profile("agent", model="openai/stub", model_settings=model_settings(stub), tools=["kit.*"])
    ]
    return Runtime.open(
        tmp_path / "s",
        profiles=profiles,
        mcp_servers={"kit": McpServer.stdio(sys.executable, [str(TOOLKIT)])},
    )


def test_a_call_carries_its_idempotency_key_in_the_requests_meta(
    tmp_path: Path, stub: OpenAIStub
) -> None:
    def step(r: Any) -> dict[str, Any]:
        if r.number == 1:
            return tool_call("kit__request_key", {})
        return answer(json.dumps(last_tool_result(r)))

    script(stub, step)
    with open_kit(tmp_path, stub) as rt:
        agent = rt.spawn("agent", "key")
        done = rt.wait(agent.id, timeout=60)
    assert done.status is CompletionStatus.COMPLETED, done.error
    assert json.loads(done.output or "{}") == {"result": idempotency_key(agent.id, 1, 1, 0)}


def test_annotations_give_the_tools_classes_and_meta_carries_the_key() -> None:
    manager = McpManager({"kit": McpServer.stdio(sys.executable, [str(TOOLKIT)])})
    key = "agent-1-1-0"

    async def look() -> tuple[dict[str, Effect], str]:
        box = ToolBox(await manager.tool_defs(["kit.*"]))
        classes = {name: box.effect(name) for name in ("kit__request_key", "kit__put", "kit__echo")}
        return classes, await box.call("kit__request_key", "{}", ToolCall(idempotency_key=key))

    try:
        classes, result = asyncio.run(look())
    finally:
        manager.close()
    assert classes == {"kit__request_key": "read", "kit__put": "idempotent", "kit__echo": "unsafe"}
    assert json.loads(result) == {"result": key}
