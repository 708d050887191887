"""Coordinator tools through a real runtime: schemas, every result shape, every error as a result.

Each lead here is an ``async def`` runner that builds its turn's toolbox and
calls tools on it exactly as the LLM runner does (``await box.call(name,
json_text)``), so these tests need no model.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support import OpenRuntime

from retinue import CompletionStatus, ConfigurationError, Profile, Runtime, Turn
from retinue.llm import ToolBox, build_toolbox, tool
from retinue.testing import echo

Script = Callable[[Turn, ToolBox], Awaitable[str]]
Results = dict[str, Any]


def lead_runner(script: Script, results: Results, **build: Any) -> Callable[[Turn], Any]:
    """Return an async runner that builds the toolbox and runs ``script`` with it.

    The schemas the turn saw land in ``results["schemas"]``; a build error in
    ``results["build_error"]``.
    """

    async def runner(turn: Turn) -> str:
        try:
            box = build_toolbox(turn, tools=turn.profile.tools, **build)
        except ConfigurationError as exc:
            results["build_error"] = exc
            return "no toolbox"
        results["schemas"] = box.schemas()
        return await script(turn, box)

    return runner


async def call(box: ToolBox, name: str, arguments: Any = None) -> Any:
    """Call a tool with ``arguments`` (a dict is sent as JSON text) and decode the result."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    result = await box.call(name, text)
    assert isinstance(result, str)
    return json.loads(result)


def run_lead(rt: Runtime, task: str = "go") -> str:
    top = rt.spawn("lead", task, name="lead")
    done = rt.wait(top.id, timeout=30)
    assert done.status is CompletionStatus.COMPLETED, done
    return str(done.output)


def by_name(schemas: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["function"]["name"]: s["function"] for s in schemas}


def fail(turn: Turn) -> str:
    raise RuntimeError(f"cannot do {turn.task}")


# -- schemas -------------------------------------------------------------------------


def test_schema_shape_enum_required_and_descriptions(open_runtime: OpenRuntime) -> None:
    results: Results = {}

    async def script(turn: Turn, box: ToolBox) -> str:
        return "ok"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker", "critic"], runner=lead_runner(script, results)),
            Profile("worker", runner=echo),
            Profile("critic", runner=echo),
        ],
        fanout_cap=3,
    )
    run_lead(rt)
    tools = by_name(results["schemas"])
    assert list(tools) == [
        "spawn_subagent",
        "spawn_subagents",
        "send_message",
        "wait_agent",
        "list_agents",
        "interrupt_agent",
        "close_agent",
    ]
    assert all(s["type"] == "function" for s in results["schemas"])
    single = tools["spawn_subagent"]["parameters"]
    assert single["required"] == ["agent", "message"]
    assert single["additionalProperties"] is False
    assert sorted(single["properties"]["agent"]["enum"]) == ["critic", "worker"]
    assert "Agents you may spawn: worker, critic." in single["properties"]["agent"]["description"]
    assert "Agents you may spawn: worker, critic." in tools["spawn_subagent"]["description"]
    assert single["properties"]["wait"]["default"] is True
    assert single["properties"]["task_name"]["type"] == "string"  # optional: not nullable
    assert single["properties"]["task_name"]["pattern"] == "^[a-z0-9_]+$"
    for prop in single["properties"].values():
        assert prop["description"]
    many = tools["spawn_subagents"]["parameters"]
    assert many["required"] == ["tasks"]
    tasks = many["properties"]["tasks"]
    assert (tasks["minItems"], tasks["maxItems"]) == (1, 3)
    assert tasks["items"]["required"] == ["agent", "message"]
    assert tasks["items"]["additionalProperties"] is False
    assert sorted(tasks["items"]["properties"]["agent"]["enum"]) == ["critic", "worker"]
    assert "$ref" not in json.dumps(results["schemas"])
    assert tools["send_message"]["parameters"]["required"] == ["to", "message"]
    assert tools["wait_agent"]["parameters"]["required"] == ["agent"]
    assert tools["wait_agent"]["parameters"]["properties"]["timeout_ms"]["minimum"] == 0
    assert tools["list_agents"]["parameters"]["properties"] == {}
    assert tools["list_agents"]["parameters"]["required"] == []
    assert tools["interrupt_agent"]["parameters"]["required"] == ["agent"]
    assert tools["close_agent"]["parameters"]["required"] == ["agent"]


def test_descriptions_of_spawnable_profiles_are_listed(open_runtime: OpenRuntime) -> None:
    results: Results = {}

    async def script(turn: Turn, box: ToolBox) -> str:
        return "ok"

    runner = lead_runner(script, results, descriptions={"worker": "reads files"})
    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=runner), Profile("worker", runner=echo)]
    )
    run_lead(rt)
    agent = by_name(results["schemas"])["spawn_subagent"]["parameters"]["properties"]["agent"]
    assert agent["description"].endswith("Agents you may spawn: worker (reads files).")


def test_an_agent_that_may_not_spawn_gets_send_message_alone(open_runtime: OpenRuntime) -> None:
    seen: dict[str, list[str]] = {}

    def recorder(label: str) -> Callable[[Turn], Any]:
        async def runner(turn: Turn) -> str:
            box = build_toolbox(turn, tools=turn.profile.tools)
            seen[label] = box.names
            if label == "lead":
                result = await call(box, "spawn_subagent", {"agent": "mid", "message": "m"})
                assert result["status"] == "completed", result
            if label == "mid":
                # The open-time graph check keeps teams off the depth cap, so put this
                # turn at the cap by hand: an agent at the cap is not offered spawning.
                turn.limits = msgspec.structs.replace(turn.limits, depth_cap=turn.agent.depth)
                seen["mid_at_cap"] = build_toolbox(turn, tools=turn.profile.tools).names
            return "ok"

        return runner

    rt = open_runtime(
        [
            Profile("lead", subagents=["mid"], runner=recorder("lead")),
            Profile("mid", subagents=["leaf"], runner=recorder("mid")),
            Profile("leaf", runner=recorder("leaf")),
        ]
    )
    run_lead(rt)
    rt.wait(rt.spawn("leaf", "alone", name="leaf").id, timeout=30)
    assert seen["lead"][:2] == ["spawn_subagent", "spawn_subagents"]
    assert seen["mid"][:2] == ["spawn_subagent", "spawn_subagents"]
    assert "spawn_subagent" not in seen["mid_at_cap"]
    assert "spawn_subagents" not in seen["mid_at_cap"]
    # No subagents to wait for, list, interrupt or close: send_message alone.
    assert seen["leaf"] == ["send_message"]
    assert seen["mid_at_cap"] == seen["leaf"]


# -- spawning ------------------------------------------------------------------------


def test_sync_spawn_returns_path_status_output(open_runtime: OpenRuntime) -> None:
    results: Results = {}

    async def script(turn: Turn, box: ToolBox) -> str:
        results["named"] = await call(
            box, "spawn_subagent", {"agent": "worker", "message": "task A", "task_name": "a"}
        )
        results["unnamed"] = await call(box, "spawn_subagent", {"agent": "worker", "message": "B"})
        results["failed"] = await call(box, "spawn_subagent", {"agent": "broken", "message": "C"})
        return "ok"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker", "broken"], runner=lead_runner(script, results)),
            Profile("worker", runner=echo),
            Profile("broken", runner=fail),
        ]
    )
    run_lead(rt)
    assert results["named"] == {
        "path": "/root/lead/a",
        "status": "completed",
        "output": "done:task A",
    }
    unnamed = results["unnamed"]
    assert unnamed["path"].startswith("/root/lead/")
    assert (unnamed["status"], unnamed["output"]) == ("completed", "done:B")
    failed = results["failed"]
    assert (failed["status"], failed["output"]) == ("failed", None)
    assert "cannot do C" in failed["error"]
    assert "Traceback" not in failed["error"]


def test_async_spawn_dispatches_and_wait_agent_gets_the_result(open_runtime: OpenRuntime) -> None:
    results: Results = {}

    async def script(turn: Turn, box: ToolBox) -> str:
        results["dispatched"] = await call(
            box,
            "spawn_subagent",
            {"agent": "worker", "message": "later", "task_name": "bg", "wait": False},
        )
        results["waited"] = await call(box, "wait_agent", {"agent": "bg", "timeout_ms": 20_000})
        return "ok"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead_runner(script, results)),
         Profile("worker", runner=echo)]
    )  # fmt: skip
    run_lead(rt)
    assert results["dispatched"] == {"dispatched": True, "path": "/root/lead/bg"}
    assert results["waited"] == {
        "event": "completion",
        "path": "/root/lead/bg",
        "status": "completed",
        "output": "done:later",
    }


def test_spawn_subagents_keeps_order_and_refused_entries_in_place(
    open_runtime: OpenRuntime,
) -> None:
    results: Results = {}

    async def script(turn: Turn, box: ToolBox) -> str:
        tasks = [
            {"agent": "worker", "message": "one", "task_name": "x"},
            {"agent": "worker", "message": "two", "task_name": "x"},  # the name is taken
            {"agent": "broken", "message": "three"},
            {"agent": "worker", "message": "four", "task_name": "y"},
        ]
        results["batch"] = await call(box, "spawn_subagents", {"tasks": tasks})
        return "ok"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker", "broken"], runner=lead_runner(script, results)),
            Profile("worker", runner=echo),
            Profile("broken", runner=fail),
        ]
    )
    run_lead(rt)
    first, second, third, fourth = results["batch"]["results"]
    assert first == {"path": "/root/lead/x", "status": "completed", "output": "done:one"}
    assert second["agent"] == "worker" and "/root/lead/x" in second["error"]
    assert set(second) == {"agent", "error"}
    assert third["status"] == "failed" and "cannot do three" in third["error"]
    assert fourth == {"path": "/root/lead/y", "status": "completed", "output": "done:four"}


def test_spawn_subagents_runs_children_at_once(open_runtime: OpenRuntime) -> None:
    results: Results = {}
    arrived = threading.Barrier(3, timeout=20)

    def meet(turn: Turn) -> str:
        arrived.wait()  # returns only when all three children run at the same time
        return f"met:{turn.task}"

    async def script(turn: Turn, box: ToolBox) -> str:
        tasks = [{"agent": "worker", "message": str(i)} for i in range(3)]
        results["batch"] = await call(box, "spawn_subagents", {"tasks": tasks})
        return "ok"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead_runner(script, results)),
         Profile("worker", runner=meet)]
    )  # fmt: skip
    run_lead(rt)
    assert [r["output"] for r in results["batch"]["results"]] == ["met:0", "met:1", "met:2"]


def test_parallel_sync_spawns_from_one_response_all_succeed(open_runtime: OpenRuntime) -> None:
    """A model may issue several tool calls at once; a turn may wait on one child at a time."""
    results: Results = {}
    release = threading.Event()

    def held(turn: Turn) -> str:
        release.wait(20)  # every child runs until all three calls are waiting
        return f"done:{turn.task}"

    async def script(turn: Turn, box: ToolBox) -> str:
        calls = [
            asyncio.create_task(
                call(box, "spawn_subagent", {"agent": "worker", "message": f"p{i}"})
            )
            for i in range(3)
        ]
        await asyncio.sleep(0.3)  # let all three spawn and start waiting (not an assertion)
        release.set()
        results["parallel"] = await asyncio.gather(*calls)
        return "ok"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead_runner(script, results)),
         Profile("worker", runner=held)]
    )  # fmt: skip
    try:
        run_lead(rt)
    finally:
        release.set()
    assert [r.get("output") for r in results["parallel"]] == ["done:p0", "done:p1", "done:p2"]


# -- messages, waits, listing, interrupt, close ------------------------------------------


def test_messages_list_interrupt_and_close(open_runtime: OpenRuntime) -> None:
    results: Results = {}
    release = threading.Event()

    def chatty(turn: Turn) -> str:
        turn.send("/root/lead", f"progress on {turn.task}")
        while not release.is_set() and not turn.cancelled.is_set():
            release.wait(0.01)
        return "late"

    async def script(turn: Turn, box: ToolBox) -> str:
        r: dict[str, Any] = {}
        r["spawn"] = await call(
            box,
            "spawn_subagent",
            {"agent": "worker", "message": "job", "task_name": "w", "wait": False},
        )
        r["message"] = await call(box, "wait_agent", {"agent": "w", "timeout_ms": 20_000})
        r["timeout"] = await call(box, "wait_agent", {"agent": "w", "timeout_ms": 0})
        r["list"] = await call(box, "list_agents")
        r["send"] = await call(box, "send_message", {"to": "w", "message": "hurry"})
        r["interrupt"] = await call(box, "interrupt_agent", {"agent": "w"})
        r["after"] = await call(box, "wait_agent", {"agent": "w", "timeout_ms": 20_000})
        r["close"] = await call(box, "close_agent", {"agent": "w"})
        r["list_after"] = await call(box, "list_agents", "")
        results.update(r)
        return "ok"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead_runner(script, results)),
         Profile("worker", runner=chatty)]
    )  # fmt: skip
    try:
        run_lead(rt)
    finally:
        release.set()
    assert results["spawn"] == {"dispatched": True, "path": "/root/lead/w"}
    assert results["message"] == {
        "event": "message",
        "from": "/root/lead/w",
        "content": "progress on job",
    }
    assert results["timeout"]["event"] == "timed_out"
    (listed,) = results["list"]["agents"]
    assert listed["path"] == "/root/lead/w" and listed["agent"] == "worker"
    assert listed["state"] in ("starting", "running")
    assert results["send"] == {"sent": True, "to": "/root/lead/w"}
    assert results["interrupt"]["path"] == "/root/lead/w"
    assert results["after"]["event"] == "completion"
    assert results["after"]["status"] == "interrupted"
    assert results["close"] == {"closed": ["/root/lead/w"]}
    assert results["list_after"] == {"agents": []}


def test_close_agent_recursive_closes_children_first(open_runtime: OpenRuntime) -> None:
    results: Results = {}

    def mid(turn: Turn) -> str:
        turn.run("leaf", "deep", name="leaf")
        return "mid done"

    async def script(turn: Turn, box: ToolBox) -> str:
        await call(box, "spawn_subagent", {"agent": "mid", "message": "m", "task_name": "m"})
        results["flat"] = await call(box, "close_agent", {"agent": "m"})
        results["tree"] = await call(box, "close_agent", {"agent": "m", "recursive": True})
        return "ok"

    rt = open_runtime(
        [
            Profile("lead", subagents=["mid"], runner=lead_runner(script, results)),
            Profile("mid", subagents=["leaf"], runner=mid),
            Profile("leaf", runner=echo),
        ]
    )
    run_lead(rt)
    assert "error" in results["flat"]
    assert results["tree"] == {"closed": ["/root/lead/m/leaf", "/root/lead/m"]}


# -- errors come back as results -----------------------------------------------------


def test_every_error_comes_back_as_a_result(open_runtime: OpenRuntime) -> None:
    results: Results = {}

    async def script(turn: Turn, box: ToolBox) -> str:
        cases: dict[str, tuple[str, Any]] = {
            "bad_json": ("spawn_subagent", '{"agent": "worker", '),
            "not_object": ("spawn_subagent", "[]"),
            "missing": ("spawn_subagent", {"agent": "worker"}),
            "mistyped": ("spawn_subagent", {"agent": "worker", "message": 5}),
            "wait_mistyped": ("spawn_subagent", {"agent": "worker", "message": "m", "wait": "y"}),
            "unknown_arg": ("send_message", {"to": "x", "message": "m", "urgent": True}),
            "bad_enum": ("spawn_subagent", {"agent": "admin", "message": "m"}),
            "bad_name": ("spawn_subagent", {"agent": "worker", "message": "m", "task_name": "Bad"}),
            "empty_batch": ("spawn_subagents", {"tasks": []}),
            "big_batch": ("spawn_subagents", {"tasks": [{"agent": "worker", "message": "m"}] * 3}),
            "batch_item": ("spawn_subagents", {"tasks": [{"agent": "worker"}]}),
            "unknown_tool": ("rm_rf", {}),
            "unknown_agent": ("wait_agent", {"agent": "ghost"}),
            "interrupt_unknown": ("interrupt_agent", {"agent": "/root/nobody"}),
            "close_unknown": ("close_agent", {"agent": "nobody"}),
            "send_unknown": ("send_message", {"to": "nobody", "message": "hi"}),
            "send_not_permitted": ("send_message", {"to": "/root/other/kid", "message": "hi"}),
            "wait_not_child": ("wait_agent", {"agent": "/root/other"}),
            "negative_wait": ("wait_agent", {"agent": "x", "timeout_ms": -1}),
            "huge_wait": ("wait_agent", {"agent": "a", "timeout_ms": 10**10}),
        }
        await call(box, "spawn_subagent", {"agent": "worker", "message": "m", "task_name": "a"})
        for label, (name, arguments) in cases.items():
            results[label] = await call(box, name, arguments)
        # The fan-out cap (2): "a" is live, one more fits, the next is refused.
        results["second"] = await call(box, "spawn_subagent", {"agent": "worker", "message": "m"})
        results["over_fanout"] = await call(
            box, "spawn_subagent", {"agent": "worker", "message": "m"}
        )
        return "ok"

    def other(turn: Turn) -> str:
        turn.run("worker", "k", name="kid")
        return "other done"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead_runner(script, results)),
         Profile("worker", runner=echo), Profile("other", subagents=["worker"], runner=other)],
        fanout_cap=2,
    )  # fmt: skip
    rt.wait(rt.spawn("other", "o", name="other").id, timeout=30)
    run_lead(rt)
    expected = {
        "bad_json": "not valid JSON",
        "not_object": "Expected `object`, got `array`",
        "missing": "missing required argument `message`",
        "mistyped": "argument `message`: Expected `str`, got `int`",
        "wait_mistyped": "argument `wait`: Expected `bool`, got `str`",
        "unknown_arg": "unknown argument `urgent`",
        "bad_enum": "argument `agent`: Invalid enum value 'admin'",
        "bad_name": "argument `task_name`",
        "empty_batch": "argument `tasks`: Expected `array` of length >= 1",
        "big_batch": "argument `tasks`: Expected `array` of length <= 2",
        "batch_item": "missing required argument `tasks[0].message`",
        "unknown_tool": "unknown tool 'rm_rf'",
        "unknown_agent": "ghost",
        "interrupt_unknown": "/root/nobody",
        "close_unknown": "nobody",
        "send_unknown": "nobody",
        "send_not_permitted": "/root/other/kid",
        "wait_not_child": "/root/other",
        "negative_wait": "argument `timeout_ms`",
        "huge_wait": "wait_max_s",
        "over_fanout": "fanout_cap is 2",
    }
    for label, fragment in expected.items():
        result = results[label]
        assert set(result) == {"error"}, (label, result)
        assert fragment in result["error"], (label, result)
        assert "Traceback" not in result["error"]
    assert "agents you may spawn: worker" in results["bad_enum"]["error"]
    assert results["second"]["status"] == "completed"


# -- build-time checks ------------------------------------------------------------------


def test_build_refuses_unknown_tools_and_builtins_without_workspace(
    open_runtime: OpenRuntime, tmp_path: Path
) -> None:
    outcomes: Results = {}

    async def probe(turn: Turn) -> str:
        cases: dict[str, dict[str, Any]] = {
            "unknown": {"tools": ["read_file", "lookup"]},
            "no_workspace": {"tools": ["read_file"]},
            "beyond_profile": {"tools": "modify", "workspace": tmp_path},
            "fine": {"tools": ["grep"], "workspace": tmp_path},
        }
        for label, kwargs in cases.items():
            try:
                outcomes[label] = build_toolbox(turn, **kwargs).names
            except ConfigurationError as exc:
                outcomes[label] = str(exc)
        return "ok"

    rt = open_runtime([Profile("lead", tools=["read_file", "grep", "lookup"], runner=probe)])
    run_lead(rt)
    assert "['lookup'] are neither built in nor registered" in outcomes["unknown"]
    assert "no workspace folder" in outcomes["no_workspace"]
    assert (
        "does not grant: bash, edit_file, find, list_dir, write_file" in outcomes["beyond_profile"]
    )
    assert outcomes["fine"][-1] == "grep"


def test_granted_host_tools_are_offered_and_called(open_runtime: OpenRuntime) -> None:
    results: Results = {}

    @tool
    async def lookup(key: str) -> dict[str, str]:
        """Look a key up."""
        return {"key": key, "value": key.upper()}

    async def script(turn: Turn, box: ToolBox) -> str:
        results["names"] = box.names
        results["lookup"] = await call(box, "lookup", {"key": "abc"})
        results["hidden"] = await call(box, "other", {})
        return "ok"

    @tool
    def other() -> str:
        """Not granted."""
        return "should not run"

    runner = lead_runner(script, results, host_tools=[lookup, other])
    rt = open_runtime([Profile("lead", tools=["lookup"], runner=runner)])
    run_lead(rt)
    assert results["names"][-1] == "lookup"
    assert "other" not in results["names"]
    assert results["lookup"] == {"key": "abc", "value": "ABC"}
    assert "unknown tool 'other'" in results["hidden"]["error"]


def test_inherited_tools_reach_the_toolbox(open_runtime: OpenRuntime, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("inherited\n")
    results: Results = {}

    async def worker(turn: Turn) -> str:
        box = build_toolbox(turn, tools=turn.profile.tools, workspace=tmp_path)
        results["names"] = box.names
        return str((await call(box, "read_file", {"path": "notes.txt"}))["content"])

    async def script(turn: Turn, box: ToolBox) -> str:
        done = await call(box, "spawn_subagent", {"agent": "worker", "message": "read"})
        return str(done["output"])

    rt = open_runtime(
        [
            Profile(
                "lead",
                subagents=["worker"],
                tools="read",
                runner=lead_runner(script, {}, workspace=tmp_path),
            ),
            Profile("worker", runner=worker),  # tools=None: inherits "read" from its spawner
        ]
    )
    assert run_lead(rt) == "inherited\n"
    assert results["names"][-4:] == ["read_file", "list_dir", "grep", "find"]


@pytest.mark.parametrize("bad", [None, 7])
def test_call_never_raises_on_odd_inputs(open_runtime: OpenRuntime, bad: Any) -> None:
    results: Results = {}

    async def script(turn: Turn, box: ToolBox) -> str:
        results["name"] = json.loads(await box.call(bad, "{}"))
        results["args"] = json.loads(await box.call("send_message", bad))
        return "ok"

    rt = open_runtime([Profile("lead", runner=lead_runner(script, results))])
    run_lead(rt)
    assert "unknown tool" in results["name"]["error"]
    assert "invalid arguments for send_message" in results["args"]["error"]


def test_call_accepts_arguments_already_decoded(open_runtime: OpenRuntime) -> None:
    results: Results = {}

    async def script(turn: Turn, box: ToolBox) -> str:
        arguments: Any = {"agent": "worker", "message": "as a dict"}
        results["spawn"] = json.loads(await box.call("spawn_subagent", arguments))
        return "ok"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead_runner(script, results)),
         Profile("worker", runner=echo)]
    )  # fmt: skip
    run_lead(rt)
    assert results["spawn"]["output"] == "done:as a dict"
