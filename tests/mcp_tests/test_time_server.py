"""mcp-server-time (PyPI) over stdio: a model agent gets the real server's answer, in ceilings."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support import wait_until

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
    AgentState,
    CompletionStatus,
    ConfigurationError,
    Event,
    Profile,
    Runtime,
    ToolCallFinished,
    ToolCallStarted,
    ToolsNotPermitted,
)
from retinue.llm import McpServer
from retinue.testing import OpenAIStub, echo

pytestmark = need_time_server


def servers() -> dict[str, McpServer]:
    return {"time": McpServer.stdio(time_server_command(), ["--local-timezone", "UTC"])}


def ask_the_time(stub: OpenAIStub, timezone: str) -> None:
    """The model calls ``time__get_current_time`` for ``timezone``, then says the time."""
    script(
        stub,
        lambda r: (
            tool_call("time__get_current_time", {"timezone": timezone})
            if r.number == 1
            else answer("it is " + last_tool_result(r)["result"]["datetime"])
        ),
    )


def clock(stub: OpenAIStub, **extra: Any) -> Profile:
    """A model agent on the stub granted ``time.get_current_time``."""
    settings = model_settings(stub)
    return Profile(
        "clock",
        model="openai/stub",
        model_settings=settings,
        tools=["time.get_current_time"],
        **extra,
    )


def test_a_model_agent_gets_the_real_servers_answer(tmp_path: Path, stub: OpenAIStub) -> None:
    ask_the_time(stub, "Europe/Paris")
    profiles = [clock(stub)]
    seen: list[Event] = []
    with Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers()) as rt:
        rt.subscribe(seen.append)
        done = rt.wait(rt.spawn("clock", "what time is it in Paris?").id, timeout=60)
        assert done.status is CompletionStatus.COMPLETED, done.error
        rt.wait_idle(timeout=60)
        # An MCP tool call is reported live like any other.
        (started,) = [e for e in seen if isinstance(e, ToolCallStarted)]
        (finished,) = [e for e in seen if isinstance(e, ToolCallFinished)]
        assert started.tool == finished.tool == "time__get_current_time"
        assert "Europe/Paris" in started.arguments_preview
        assert finished.ok and finished.error is None and finished.call_id == started.call_id
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
    seen: list[Event] = []
    with Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers()) as rt:
        rt.subscribe(seen.append)
        rt.wait(rt.spawn("clock", "time on mars").id, timeout=60)
        rt.wait_idle(timeout=60)
    error = last_tool_result(stub.requests[1])["error"]
    assert error.startswith("time.get_current_time: ") and "Mars/Olympus" in error
    (finished,) = [e for e in seen if isinstance(e, ToolCallFinished)]
    assert not finished.ok and finished.error == error


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


@pytest.mark.parametrize("approve", [["time.get_current_time"], ["time.*"]])
def test_an_mcp_tool_named_in_approve_waits_for_approval(
    tmp_path: Path, stub: OpenAIStub, approve: list[str]
) -> None:
    """``approve`` names MCP tools as they are granted (``server.tool`` or ``server.*``),
    never as the model is offered them: the call waits, and the request says the granted name."""
    ask_the_time(stub, "UTC")
    profiles = [clock(stub, approve=approve)]
    with Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers()) as rt:
        agent = rt.spawn("clock", "what time is it?")
        wait_until(lambda: rt.get(agent.id).state is AgentState.AWAITING_APPROVAL, timeout=60)
        (request,) = rt.approvals()
        assert (request.tool, json.loads(request.arguments)) == (
            "time.get_current_time",
            {"timezone": "UTC"},
        )
        assert len(stub.requests) == 1, "the call waits: no result went back to the model"
        rt.approve(request.id)
        done = rt.wait(agent.id, timeout=60)
    assert done.status is CompletionStatus.COMPLETED, done.error
    assert last_tool_result(stub.requests[1])["result"]["timezone"] == "UTC"


def test_an_approve_entry_naming_no_tool_of_the_profile_is_refused_at_open(
    tmp_path: Path, stub: OpenAIStub
) -> None:
    """A misspelt name would let the calls it meant run unapproved: the open refuses it."""
    for approve, words in [
        (["time.get_curent_time"], "'time.get_curent_time', which is not one of its tools"),
        (["clock.*"], "'clock.*', which is not one of its tools (time.get_current_time)"),
        (["bash"], "'bash', which is not one of its tools"),
    ]:
        profiles = [clock(stub, approve=approve)]
        with pytest.raises(ConfigurationError, match=re.escape(words)):
            Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers())
    assert stub.requests == []


def test_two_granted_tools_offered_under_one_name_are_refused_at_open(tmp_path: Path) -> None:
    """``time.get.x`` and ``time.get_x`` would both reach the model as ``time__get_x``."""
    profiles = [Profile("clock", tools=["time.get.x", "time.get_x"], runner=echo)]
    with pytest.raises(
        ConfigurationError, match="would both be offered to a model as 'time__get_x'"
    ):
        Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers())
