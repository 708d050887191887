"""mcp-server-time (PyPI) over stdio: a model agent gets the real server's answer, in ceilings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_tests.conftest import (
    answer,
    last_tool_result,
    model_settings,
    need_time_server,
    script,
    time_server_command,
    tool_call,
)
from retinue import (
    CompletionStatus,
    ConfigurationError,
    Profile,
    Runtime,
    ToolsNotPermitted,
)
from retinue.llm import McpServer
from retinue.testing import OpenAIStub, echo

pytestmark = need_time_server


def servers() -> dict[str, McpServer]:
    return {"time": McpServer.stdio(time_server_command(), ["--local-timezone", "UTC"])}


def test_a_model_agent_gets_the_real_servers_answer(tmp_path: Path, stub: OpenAIStub) -> None:
    script(
        stub,
        lambda r: (
            tool_call("time__get_current_time", {"timezone": "Europe/Paris"})
            if r.number == 1
            else answer("it is " + last_tool_result(r)["result"]["datetime"])
        ),
    )
    profiles = [
        Profile(
            "clock",
            model="openai/stub",
            model_settings=model_settings(stub),
            tools=["time.get_current_time"],
        )
    ]
    with Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers()) as rt:
        done = rt.wait(rt.spawn("clock", "what time is it in Paris?").id, timeout=60)
        assert done.status is CompletionStatus.COMPLETED, done.error
        first, second = stub.requests
        assert [n for n in first.tool_names if n.startswith("time__")] == ["time__get_current_time"]
        result = last_tool_result(second)["result"]
        assert result["timezone"] == "Europe/Paris" and result["datetime"] in (done.output or "")
        tail = rt.inspect(done.path).transcript
        calls = [m for m in tail if m.role == "assistant" and m.tool_calls]
        assert calls and calls[0].tool_calls[0].name == "time__get_current_time"


def test_the_servers_error_comes_back_as_the_tools_error(tmp_path: Path, stub: OpenAIStub) -> None:
    script(
        stub,
        lambda r: (
            tool_call("time__get_current_time", {"timezone": "Mars/Olympus"})
            if r.number == 1
            else answer("ok")
        ),
    )
    profiles = [
        Profile("clock", model="openai/stub", model_settings=model_settings(stub), tools=["time.*"])
    ]
    with Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers()) as rt:
        rt.wait(rt.spawn("clock", "time on mars").id, timeout=60)
    error = last_tool_result(stub.requests[1])["error"]
    assert error.startswith("time.get_current_time: ") and "Mars/Olympus" in error


def test_a_child_without_the_grant_is_not_offered_it(tmp_path: Path, stub: OpenAIStub) -> None:
    def steps(r: Any) -> dict[str, Any] | None:
        system = r.messages[0]["content"]
        if system in ("HELPER", "HEIR"):
            return answer(f"{system.lower()} helped")
        spawned = len([m for m in r.messages if m.get("role") == "tool"])
        if spawned < 2:  # the helper first, then the heir
            child = ("helper", "heir")[spawned]
            arguments = {"agent": child, "message": "help"}
            return tool_call("spawn_subagent", arguments, call_id=f"call_{spawned + 1}")
        return answer("done")

    script(stub, steps)
    settings = model_settings(stub)
    profiles = [
        Profile(
            "lead",
            model="openai/stub",
            model_settings=settings,
            tools=["time.*"],
            subagents=["helper", "heir"],
            instructions="LEAD",
        ),
        Profile("helper", tools="none", instructions="HELPER"),
        Profile("heir", instructions="HEIR"),
    ]
    with Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers()) as rt:
        done = rt.wait(rt.spawn("lead", "go").id, timeout=60)
        assert done.status is CompletionStatus.COMPLETED, done.error
    by_role = {r.messages[0]["content"]: r.tool_names for r in stub.requests}
    assert {"time__get_current_time", "time__convert_time"} <= set(by_role["LEAD"])
    assert not [n for n in by_role["HELPER"] if n.startswith("time__")]
    # The heir names no tools: it inherits what its only parent has, and is offered them.
    assert {"time__get_current_time", "time__convert_time"} <= set(by_role["HEIR"])


def test_a_profile_asking_for_more_than_its_parent_is_refused_at_open(tmp_path: Path) -> None:
    """The ceiling holds for MCP grants: a child granted ``time.*`` under a parent granted
    one time tool never runs; the open names the extra grant (no spawn can exceed it)."""
    profiles = [
        Profile("lead", tools=["time.get_current_time"], subagents=["worker"], runner=echo),
        Profile("worker", tools=["time.*"], runner=echo),
    ]
    with pytest.raises(ToolsNotPermitted) as refused:
        Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers())
    assert refused.value.extra == ("time.*",)
    assert "time.*" in str(refused.value)
    assert isinstance(refused.value, ConfigurationError)


def test_a_team_file_declares_the_server(
    tmp_path: Path, stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "x")  # for the stub; a team file names no key
    team = tmp_path / "team.toml"
    team.write_text(
        f"[mcp.time]\ncommand = {json.dumps(time_server_command())}\n"
        '[agents.clock]\nmodel = "openai/stub"\n'
        f'api_base = "{stub.url}"\ntools = ["time.*"]\nretries = 0\n'
    )
    script(
        stub,
        lambda r: (
            tool_call(
                "time__convert_time",
                {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
            )
            if r.number == 1
            else answer("converted")
        ),
    )
    with Runtime.open(tmp_path / "s", team=team) as rt:
        done = rt.wait(rt.spawn("clock", "noon UTC in Tokyo", name="c").id, timeout=60)
    assert done.status is CompletionStatus.COMPLETED, done.error
    target = last_tool_result(stub.requests[1])["result"]["target"]
    assert target["timezone"] == "Asia/Tokyo" and "T21:00:00" in target["datetime"]
