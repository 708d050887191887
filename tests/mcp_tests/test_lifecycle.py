"""One shared session per server: environment, folder, deaths, restarts, backoff, timeouts,
concurrency, tool list changes, bounded stderr and schemas, and a killed process group at close."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from support import wait_until

from mcp_tests.conftest import (
    TOOLKIT,
    answer,
    last_tool_result,
    model_settings,
    pid_alive,
    script,
    tool_call,
)
from retinue import CompletionStatus, McpServerError, McpServerEvent, Profile, Runtime
from retinue.llm import McpServer
from retinue.llm.mcp import McpManager
from retinue.testing import OpenAIStub


def toolkit(**kwargs: Any) -> McpServer:
    return McpServer.stdio(sys.executable, [str(TOOLKIT)], **kwargs)


def calls(*steps: tuple[str, dict[str, Any]]) -> Any:
    """A model that makes these tool calls, one per request, then answers with the last result."""

    def step(r: Any) -> dict[str, Any]:
        if r.number <= len(steps):
            name, arguments = steps[r.number - 1]
            return tool_call(name, arguments, call_id=f"call_{r.number}")
        return answer(json.dumps(last_tool_result(r)))

    return step


def open_kit(tmp_path: Path, stub: OpenAIStub, tools: Any = ("kit.*",), **server: Any) -> Runtime:
    profiles = [
        Profile(
            "agent", model="openai/stub", model_settings=model_settings(stub), tools=list(tools)
        )
    ]
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    return Runtime.open(
        tmp_path / "s",
        profiles=profiles,
        workspace=workspace,
        mcp_servers={"kit": toolkit(**server)},
    )


def results(stub: OpenAIStub) -> list[dict[str, Any]]:
    out = []
    for request in stub.requests:
        tools = [m for m in request.messages if m.get("role") == "tool"]
        if tools:
            out.append(json.loads(tools[-1]["content"]))
    return out


def test_env_holds_only_what_is_named_and_the_folder_is_the_workspace(
    tmp_path: Path, stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_SECRET", "do-not-leak")
    monkeypatch.setenv("KIT_TOKEN", "named")
    script(stub, calls(("kit__environment", {})))
    with open_kit(tmp_path, stub, env={"MODE": "test"}, env_from_host=["KIT_TOKEN"]) as rt:
        done = rt.wait(rt.spawn("agent", "env").id, timeout=60)
    assert done.status is CompletionStatus.COMPLETED, done.error
    seen = json.loads(results(stub)[0]["result"])
    assert seen["env"]["MODE"] == "test" and seen["env"]["KIT_TOKEN"] == "named"
    assert "HOST_SECRET" not in seen["env"]
    assert set(seen["env"]) <= {"PATH", "HOME", "LANG", "MODE", "KIT_TOKEN", "LC_CTYPE"}
    assert Path(seen["cwd"]) == (tmp_path / "work").resolve()
    assert seen["pgid"] == seen["pid"]  # its own process group


def test_a_server_that_dies_is_restarted_on_next_use(tmp_path: Path, stub: OpenAIStub) -> None:
    script(
        stub, calls(("kit__environment", {}), ("kit__crash", {"code": 7}), ("kit__environment", {}))
    )
    events: list[McpServerEvent] = []
    with open_kit(tmp_path, stub) as rt:
        rt.subscribe(lambda e: events.append(e) if isinstance(e, McpServerEvent) else None)
        done = rt.wait(rt.spawn("agent", "crash").id, timeout=60)
        assert done.status is CompletionStatus.COMPLETED, done.error
        first, crashed, again = results(stub)
        assert "went away during the call to crash" in crashed["error"]
        assert "exited with code 7" in crashed["error"]
        assert "crashing on purpose" in crashed["error"]  # the end of its stderr
        assert json.loads(again["result"])["pid"] != json.loads(first["result"])["pid"]
        assert rt.mcp is not None and rt.mcp.status()["kit"].failures == 0  # reset by a success
    statuses = [(e.status, e.failures) for e in events]
    assert statuses[:3] == [("started", 0), ("died", 1), ("started", 1)]


def test_a_server_that_keeps_failing_backs_off_and_says_so(tmp_path: Path) -> None:
    events: list[Any] = []
    bad = McpServer.stdio(
        sys.executable,
        ["-c", "import sys; print('no luck', file=sys.stderr); sys.exit(5)"],
        restart_backoff_s=60,
    )
    manager = McpManager({"bad": bad}, publish=events.extend)

    async def attempt() -> str:
        try:
            await manager.tool_defs(["bad.*"])
        except McpServerError as exc:
            assert exc.server == "bad"
            return str(exc)
        raise AssertionError("a server that exits at once started")

    async def three() -> list[str]:
        return [await attempt() for _ in range(3)]

    first, second, third = asyncio.run(three())
    manager.close()
    assert "failed to start" in first and "no luck" in first
    assert "failed to start" in second  # the first restart is at once
    assert "failed 2 times in a row and is tried again in" in third
    assert [(e.status, e.failures) for e in events] == [("start_failed", 1), ("start_failed", 2)]


def test_a_turn_whose_server_never_starts_fails_with_the_reason(
    tmp_path: Path, stub: OpenAIStub
) -> None:
    profiles = [
        Profile("agent", model="openai/stub", model_settings=model_settings(stub), tools=["nope.*"])
    ]
    servers = {"nope": McpServer.stdio(str(tmp_path / "no-such-command"))}
    with Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers) as rt:
        done = rt.wait(rt.spawn("agent", "x").id, timeout=60)
    assert done.status is CompletionStatus.FAILED
    assert (done.error or "").startswith("McpServerError: MCP server 'nope'")
    assert "no-such-command" in (done.error or "")
    assert not stub.requests  # no model call was made without the tools it was granted


def test_a_slow_call_times_out_and_the_server_keeps_running(
    tmp_path: Path, stub: OpenAIStub
) -> None:
    script(stub, calls(("kit__slow", {"seconds": 30}), ("kit__echo", {"text": "still here"})))
    with open_kit(tmp_path, stub, tool_timeout_s=0.5) as rt:
        done = rt.wait(rt.spawn("agent", "slow").id, timeout=60)
    assert done.status is CompletionStatus.COMPLETED, done.error
    slow, echo = results(stub)
    assert "kit.slow timed out after tool_timeout_s=0.5 s" in slow["error"]
    assert echo == {"result": "still here"}


def test_calls_of_one_turn_run_concurrently_on_the_shared_session(
    tmp_path: Path, stub: OpenAIStub
) -> None:
    both = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"c{n}",
                "type": "function",
                "function": {"name": "kit__meet", "arguments": json.dumps({"n": 2, "timeout": 20})},
            }
            for n in (1, 2)
        ],
    }
    script(stub, lambda r: both if r.number == 1 else answer("met"))
    with open_kit(tmp_path, stub) as rt:
        done = rt.wait(rt.spawn("agent", "meet").id, timeout=60)
    assert done.status is CompletionStatus.COMPLETED, done.error
    tool_results = [
        json.loads(m["content"]) for m in stub.requests[1].messages if m.get("role") == "tool"
    ]
    assert tool_results == [{"result": "met 2"}, {"result": "met 2"}]


def test_errors_images_and_bad_arguments_come_back_as_results(
    tmp_path: Path, stub: OpenAIStub
) -> None:
    script(
        stub,
        calls(
            ("kit__fail", {"reason": "no"}),
            ("kit__picture", {}),
            ("kit__echo", {"text": 5}),
            ("kit__echo", {}),
        ),
    )
    with open_kit(tmp_path, stub) as rt:
        done = rt.wait(rt.spawn("agent", "errors").id, timeout=60)
    assert done.status is CompletionStatus.COMPLETED, done.error
    failed, picture, mistyped, missing = results(stub)
    assert failed == {"error": "kit.fail: Error executing tool fail: refused: no"}  # its text
    assert "a red dot" in picture["result"] and "[image image/png, " in picture["result"]
    assert "iVBOR" not in picture["result"]
    assert mistyped == {
        "error": "invalid arguments for kit__echo: argument `text`: 5 is not of type 'string'"
    }
    assert "'text' is a required property" in missing["error"]


def test_a_tool_added_later_is_offered_only_where_a_pattern_grants_it(
    tmp_path: Path, stub: OpenAIStub
) -> None:
    settings = model_settings(stub)
    profiles = [
        Profile(
            "grower",
            model="openai/stub",
            model_settings=settings,
            tools=["kit.*"],
            instructions="GROWER",
        ),
        Profile(
            "exact",
            model="openai/stub",
            model_settings=settings,
            tools=["kit.echo", "kit.grow"],
            instructions="EXACT",
        ),
    ]

    def steps(r: Any) -> dict[str, Any]:
        tools = [m for m in r.messages if m.get("role") == "tool"]
        if (
            r.messages[0]["content"] == "GROWER"
            and "first" in r.messages[1]["content"]
            and not tools
        ):
            return tool_call("kit__grow", {"name": "extra"})
        return answer("ok")

    script(stub, steps)
    events: list[McpServerEvent] = []
    with Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers={"kit": toolkit()}) as rt:
        rt.subscribe(lambda e: events.append(e) if isinstance(e, McpServerEvent) else None)
        rt.wait(rt.spawn("grower", "first").id, timeout=60)
        wait_until(lambda: any(e.status == "tools_changed" for e in events), what="tools_changed")
        rt.wait(rt.spawn("grower", "second").id, timeout=60)
        rt.wait(rt.spawn("exact", "third").id, timeout=60)
    offered = {r.messages[1]["content"]: r.tool_names for r in stub.requests}
    assert "kit__extra" not in offered["first"]
    assert "kit__extra" in offered["second"]
    assert "kit__extra" not in offered["third"] and "kit__echo" in offered["third"]


def test_tools_listed_later_under_one_offered_name_are_left_out_and_the_rest_work(
    tmp_path: Path, stub: OpenAIStub
) -> None:
    """A server adds ``spawn.child`` beside ``spawn_child``: a model would see both as
    ``kit__spawn_child``. Neither is offered, the clash is reported once, and the
    server's other tools go on working (the turn does not fail)."""

    def steps(r: Any) -> dict[str, Any]:
        tools = [m for m in r.messages if m.get("role") == "tool"]
        if tools:
            return answer(json.dumps(last_tool_result(r)))
        if "first" in r.messages[0]["content"]:
            return tool_call("kit__grow", {"name": "spawn.child"})
        return tool_call("kit__echo", {"text": "still here"})

    script(stub, steps)
    events: list[McpServerEvent] = []
    with open_kit(tmp_path, stub) as rt:
        rt.subscribe(lambda e: events.append(e) if isinstance(e, McpServerEvent) else None)
        rt.wait(rt.spawn("agent", "first").id, timeout=60)
        wait_until(lambda: any(e.status == "tools_changed" for e in events), what="tools_changed")
        second = rt.wait(rt.spawn("agent", "second").id, timeout=60)
        third = rt.wait(rt.spawn("agent", "third").id, timeout=60)
        assert rt.mcp is not None
        refused = rt.mcp.status()["kit"].refused
    assert second.status is CompletionStatus.COMPLETED, second.error
    assert json.loads(second.output or "") == {"result": "still here"}
    assert third.status is CompletionStatus.COMPLETED, third.error
    offered = {r.messages[0]["content"]: r.tool_names for r in stub.requests}
    assert "kit__spawn_child" in offered["first"]
    assert "kit__spawn_child" not in offered["second"] and "kit__echo" in offered["second"]
    clash = "MCP tools 'kit.spawn_child' and 'kit.spawn.child' would all be offered"
    assert [r for r in refused if clash in r] == [refused[-1]]
    reported = [e for e in events if e.status == "tool_refused"]
    assert len(reported) == 1 and clash in reported[0].detail  # once, not once per turn


def test_stderr_is_kept_bounded_and_big_schemas_are_refused(
    tmp_path: Path, stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLKIT_BIG_SCHEMA", "1")
    script(stub, calls(("kit__noise", {"lines": 500})))
    events: list[McpServerEvent] = []
    with open_kit(
        tmp_path,
        stub,
        stderr_max_bytes=4096,
        max_schema_bytes=8192,
        env_from_host=["TOOLKIT_BIG_SCHEMA"],
    ) as rt:
        rt.subscribe(lambda e: events.append(e) if isinstance(e, McpServerEvent) else None)
        rt.wait(rt.spawn("agent", "noise").id, timeout=60)
        assert rt.mcp is not None
        log = rt.mcp.stderr("kit")
        status = rt.mcp.status()["kit"]
    assert "earlier bytes dropped" in log and "499: xxx" in log
    assert len(log.encode()) < 4096 + 100
    assert "kit__huge" not in stub.requests[0].tool_names
    assert "kit__echo" in stub.requests[0].tool_names
    assert status.refused and "over max_schema_bytes=8192" in status.refused[0]
    assert any(e.status == "tool_refused" and "kit.huge" in e.detail for e in events)


def test_shutdown_kills_the_servers_process_group(tmp_path: Path, stub: OpenAIStub) -> None:
    script(stub, calls(("kit__spawn_child", {}), ("kit__environment", {})))
    rt = open_kit(tmp_path, stub)
    try:
        done = rt.wait(rt.spawn("agent", "children").id, timeout=60)
        assert done.status is CompletionStatus.COMPLETED, done.error
        child, env = results(stub)
        server_pid, child_pid = json.loads(env["result"])["pid"], int(child["result"])
        assert pid_alive(server_pid) and pid_alive(child_pid)
    finally:
        rt.shutdown()
    wait_until(lambda: not pid_alive(child_pid) and not pid_alive(server_pid), what="group gone")
    assert os.getpgid(0) != server_pid


def test_shutdown_closes_each_running_server_and_says_so(tmp_path: Path, stub: OpenAIStub) -> None:
    """The runtime's close stops its servers itself, before its event loop ends: a subscriber
    sees each running server ``closed``, and the status no longer names a process."""
    script(stub, calls(("kit__environment", {})))
    events: list[McpServerEvent] = []
    rt = open_kit(tmp_path, stub)
    try:
        rt.subscribe(lambda e: events.append(e) if isinstance(e, McpServerEvent) else None)
        done = rt.wait(rt.spawn("agent", "env").id, timeout=60)
        assert done.status is CompletionStatus.COMPLETED, done.error
        assert rt.mcp is not None and rt.mcp.status()["kit"].running
    finally:
        rt.shutdown()
    assert [e.status for e in events if e.server == "kit"][-1] == "closed"
    status = rt.mcp.status()["kit"]
    assert not status.running and status.pid is None
