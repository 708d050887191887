"""A bad agent reference is reported under the name of the argument its caller passed.

Every entry point that takes an agent reference (the host's calls and their
async twins, a turn's calls and their async twins, the coordinator tools a
model calls) is given the same malformed reference; the error must start with
the caller's own argument name (``ref``, ``parent``, ``to``, ``agent``), never
with another layer's (``task_name``, or ``ref`` for a tool whose argument is
``to``).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import OpenRuntime

from retinue import CompletionStatus, InvalidAgentPath, Profile, Runtime, Turn
from retinue.llm import build_toolbox
from retinue.testing import echo

BAD = "Bad Ref"


@dataclass(frozen=True)
class Case:
    """One entry point: who calls it (``host``, ``turn``, ``tool``), how, and its argument."""

    field: str
    where: str
    call: Callable[[Any], Any]
    value: str = BAD
    rule: str = "every name in it must use lowercase letters"


def _host(field: str, call: Callable[[Runtime], Any]) -> Case:
    return Case(field, "host", call)


def _host_async(field: str, call: Callable[[Runtime], Any]) -> Case:
    return Case(field, "host", lambda rt: asyncio.run(call(rt)))


def _tool(field: str, name: str, arguments: dict[str, Any], **expect: str) -> Case:
    return Case(field, "tool", lambda _: (name, arguments), **expect)


CASES: dict[str, Case] = {
    # The host: sync and async.
    "rt.get": _host("ref", lambda rt: rt.get(BAD)),
    "rt.send": _host("ref", lambda rt: rt.send(BAD, "hi")),
    "rt.follow_up": _host("ref", lambda rt: rt.follow_up(BAD, "t")),
    "rt.resume": _host("ref", lambda rt: rt.resume(BAD)),
    "rt.interrupt": _host("ref", lambda rt: rt.interrupt(BAD)),
    "rt.interrupt_tree": _host("ref", lambda rt: rt.interrupt_tree(BAD)),
    "rt.close": _host("ref", lambda rt: rt.close(BAD)),
    "rt.close_tree": _host("ref", lambda rt: rt.close_tree(BAD)),
    "rt.wait": _host("ref", lambda rt: rt.wait(BAD, timeout=1)),
    "rt.spawn": _host("parent", lambda rt: rt.spawn("worker", "t", parent=BAD)),
    "rt.get_async": _host_async("ref", lambda rt: rt.get_async(BAD)),
    "rt.send_async": _host_async("ref", lambda rt: rt.send_async(BAD, "hi")),
    "rt.follow_up_async": _host_async("ref", lambda rt: rt.follow_up_async(BAD, "t")),
    "rt.resume_async": _host_async("ref", lambda rt: rt.resume_async(BAD)),
    "rt.interrupt_async": _host_async("ref", lambda rt: rt.interrupt_async(BAD)),
    "rt.interrupt_tree_async": _host_async("ref", lambda rt: rt.interrupt_tree_async(BAD)),
    "rt.close_async": _host_async("ref", lambda rt: rt.close_async(BAD)),
    "rt.close_tree_async": _host_async("ref", lambda rt: rt.close_tree_async(BAD)),
    "rt.wait_async": _host_async("ref", lambda rt: rt.wait_async(BAD, timeout=1)),
    "rt.spawn_async": _host_async("parent", lambda rt: rt.spawn_async("worker", "t", parent=BAD)),
    # A read-only runtime answers reads from the store, under the same rule.
    "readonly rt.get": Case("ref", "readonly", lambda rt: rt.get(BAD)),
    "readonly rt.get_async": Case("ref", "readonly", lambda rt: asyncio.run(rt.get_async(BAD))),
    # A turn: sync calls run in a sync runner, async twins in an async runner.
    "turn.send": Case("ref", "turn", lambda t: t.send(BAD, "hi")),
    "turn.wait": Case("ref", "turn", lambda t: t.wait(BAD, timeout=1)),
    "turn.interrupt": Case("ref", "turn", lambda t: t.interrupt(BAD)),
    "turn.interrupt_tree": Case("ref", "turn", lambda t: t.interrupt_tree(BAD)),
    "turn.close": Case("ref", "turn", lambda t: t.close(BAD)),
    "turn.close_tree": Case("ref", "turn", lambda t: t.close_tree(BAD)),
    "turn.send_async": Case("ref", "turn_async", lambda t: t.send_async(BAD, "hi")),
    "turn.wait_async": Case("ref", "turn_async", lambda t: t.wait_async(BAD, timeout=1)),
    "turn.interrupt_async": Case("ref", "turn_async", lambda t: t.interrupt_async(BAD)),
    "turn.interrupt_tree_async": Case("ref", "turn_async", lambda t: t.interrupt_tree_async(BAD)),
    "turn.close_async": Case("ref", "turn_async", lambda t: t.close_async(BAD)),
    "turn.close_tree_async": Case("ref", "turn_async", lambda t: t.close_tree_async(BAD)),
    # The coordinator tools a model calls.
    "tool send_message": _tool("to", "send_message", {"to": BAD, "message": "hi"}),
    "tool wait_agent": _tool("agent", "wait_agent", {"agent": BAD, "timeout_ms": 1000}),
    "tool interrupt_agent": _tool("agent", "interrupt_agent", {"agent": BAD}),
    "tool close_agent": _tool("agent", "close_agent", {"agent": BAD}),
    "tool close_agent recursive": _tool("agent", "close_agent", {"agent": BAD, "recursive": True}),
    # A task name is not a reference, but a model's one is refused under its own name too.
    "tool spawn_subagent task_name": _tool(
        "task_name",
        "spawn_subagent",
        {"agent": "worker", "message": "m", "task_name": "root"},
        value="root",
        rule="must use lowercase letters",
    ),
    "tool spawn_subagents task_name": _tool(
        "task_name",
        "spawn_subagents",
        {"tasks": [{"agent": "worker", "message": "m", "task_name": "root"}]},
        value="root",
        rule="must use lowercase letters",
    ),
}


def _sync_lead(turn: Turn) -> str:
    try:
        CASES[turn.task].call(turn)
    except InvalidAgentPath as exc:
        return str(exc)
    return "no error"


async def _async_lead(turn: Turn) -> str:
    case = CASES[turn.task]
    if case.where == "tool":
        box = build_toolbox(turn, tools="none")
        name, arguments = case.call(turn)
        result = json.loads(await box.call(name, json.dumps(arguments)))
        if name == "spawn_subagents":
            result = result["results"][0]
        return str(result.get("error", f"no error: {result}"))
    try:
        await case.call(turn)
    except InvalidAgentPath as exc:
        return str(exc)
    return "no error"


@pytest.mark.parametrize("label", list(CASES))
def test_a_bad_reference_names_the_callers_argument(
    open_runtime: OpenRuntime, store_path: Path, label: str
) -> None:
    case = CASES[label]
    rt = open_runtime(
        [
            Profile("sync_lead", subagents=["worker"], runner=_sync_lead),
            Profile("async_lead", subagents=["worker"], runner=_async_lead, tools="none"),
            Profile("worker", runner=echo),
        ]
    )
    if case.where in ("host", "readonly"):
        if case.where == "readonly":
            rt.shutdown()
            rt = Runtime.open(store_path, readonly=True)
        try:
            with pytest.raises(InvalidAgentPath) as caught:
                case.call(rt)
        finally:
            rt.shutdown()
        message = str(caught.value)
    else:
        lead = "sync_lead" if case.where == "turn" else "async_lead"
        done = rt.wait(rt.spawn(lead, label).id, timeout=30)
        assert done.status is CompletionStatus.COMPLETED, done
        message = str(done.output)
    expected = rf"^{case.field} '{case.value}':? {case.rule}"
    assert re.match(expected, message), (label, message)
