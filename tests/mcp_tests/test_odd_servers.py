"""Third-party servers' listings and lines an MCP client must survive: an invalid tool schema
refuses that tool only, tools that require task-augmented calls are not offered, and a server
killed for an oversized line is reported with that reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_tests.conftest import answer, last_tool_result, model_settings, script, tool_call
from retinue import CompletionStatus, ConfigurationError, McpServerEvent, Profile, Runtime
from retinue.llm import McpServer
from retinue.llm.mcp._transport import MAX_LINE_BYTES
from retinue.testing import OpenAIStub

ODD = Path(__file__).parent / "servers" / "odd.py"


def open_odd(tmp_path: Path, stub: OpenAIStub, **server: Any) -> Runtime:
    env = server.pop("env", {})
    profiles = [
        Profile("agent", model="openai/stub", model_settings=model_settings(stub), tools=["odd.*"])
    ]
    odd = McpServer.stdio(sys.executable, [str(ODD)], env=env, **server)
    return Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers={"odd": odd})


def one_call(name: str, arguments: dict[str, Any]) -> Any:
    def step(request: Any) -> dict[str, Any]:
        if request.number == 1:
            return tool_call(name, arguments)
        return answer(json.dumps(last_tool_result(request)))

    return step


def test_an_invalid_schema_refuses_that_tool_and_task_only_tools_are_not_offered(
    tmp_path: Path, stub: OpenAIStub
) -> None:
    script(stub, one_call("odd__echo", {"text": "hi"}))
    events: list[McpServerEvent] = []
    with open_odd(tmp_path, stub) as rt:
        rt.subscribe(lambda e: events.append(e) if isinstance(e, McpServerEvent) else None)
        done = rt.wait(rt.spawn("agent", "use odd").id, timeout=60)
        assert done.status is CompletionStatus.COMPLETED, done.error
        assert rt.mcp is not None
        status = rt.mcp.status()["odd"]
    offered = stub.requests[0].tool_names
    assert {"odd__echo", "odd__maybe_tasked", "odd__flood"} <= set(offered)
    assert "odd__shapeless" not in offered and "odd__tasked" not in offered
    assert json.loads(done.output or "") == {"result": "echo: hi"}
    assert status.tools == ("odd.echo", "odd.maybe_tasked", "odd.flood")
    (shapeless,) = [r for r in status.refused if r.startswith("odd.shapeless:")]
    assert "inputSchema" in shapeless and "type" in shapeless
    (tasked,) = [r for r in status.refused if r.startswith("odd.tasked:")]
    assert 'taskSupport is "required"' in tasked
    reported = sorted(e.detail.split(":")[0] for e in events if e.status == "tool_refused")
    assert reported == ["odd.shapeless", "odd.tasked"]


def test_a_server_killed_for_an_oversized_line_is_reported_with_that_reason(
    tmp_path: Path, stub: OpenAIStub
) -> None:
    script(stub, one_call("odd__flood", {}))
    env = {"ODD_FLOOD_BYTES": str(MAX_LINE_BYTES + 1024 * 1024), "ODD_ONLY": "echo,flood"}
    with open_odd(tmp_path, stub, env=env) as rt:
        done = rt.wait(rt.spawn("agent", "flood").id, timeout=120)
    assert done.status is CompletionStatus.COMPLETED, done.error
    error = json.loads(done.output or "")["error"]
    assert f"it sent a message line over {MAX_LINE_BYTES} bytes" in error, error
    assert "exited with code" not in error


def test_the_line_bound_is_a_setting(tmp_path: Path, stub: OpenAIStub) -> None:
    script(stub, one_call("odd__flood", {}))
    env = {"ODD_FLOOD_BYTES": str(100_000)}
    with open_odd(tmp_path, stub, env=env, max_line_bytes=65_536) as rt:
        done = rt.wait(rt.spawn("agent", "flood").id, timeout=60)
    error = json.loads(done.output or "")["error"]
    assert "it sent a message line over 65536 bytes" in error, error
    with pytest.raises(ConfigurationError, match="max_line_bytes must be a positive integer"):
        McpServer.stdio("x", max_line_bytes=0)
