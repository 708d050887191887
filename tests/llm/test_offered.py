"""Kept tool schemas: a turn of the default builder that calls no tool builds no toolbox.

Its schemas are those the runner's last turn of the same profile, limits and
spawn right offered (:mod:`retinue.llm.turn._offered`); a turn that calls a
tool builds its toolbox then, and offers the same schemas as one built at once.
"""

from __future__ import annotations

from typing import Any

import pytest
from support import wait_settled

from llm.conftest import SETTLE_S, stub_runner, tool_call
from retinue import AgentState, Limits, Profile
from retinue.llm.tools import _coordinator, _toolbox
from retinue.llm.turn._offered import OfferedSchemas
from retinue.testing import OpenAIStub, StubReply


def _counting_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the default builder's builds (each builds the coordinator tools once)."""
    built: list[str] = []
    real = _coordinator.coordinator_tools

    def counted(turn: Any, **kwargs: Any) -> Any:
        built.append(turn.profile.name)
        return real(turn, **kwargs)

    monkeypatch.setattr(_toolbox, "coordinator_tools", counted)
    return built


def test_a_turn_that_calls_no_tool_offers_the_kept_schemas_and_builds_no_toolbox(
    stub: OpenAIStub, llm_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = _counting_builds(monkeypatch)

    def handler(request: Any) -> StubReply:
        if request.number == 3:  # the third turn calls a tool: its toolbox is built then
            return StubReply(message=tool_call("list_agents", {}, "c1"))
        return StubReply(message={"role": "assistant", "content": f"done {request.number}"})

    stub.handler = handler
    profiles = [
        Profile("lead", runner=stub_runner(stub), subagents=["helper"]),
        Profile("helper", runner=stub_runner(stub)),
    ]
    rt = llm_runtime(profiles)
    lead = rt.spawn("lead", "first", name="lead")
    wait_settled(rt, lead.id, timeout=SETTLE_S)
    rt.follow_up(lead.id, "second")
    wait_settled(rt, lead.id, generation=2, timeout=SETTLE_S)
    assert built == ["lead"]  # the second turn took the first one's schemas
    rt.follow_up(lead.id, "third")
    done = wait_settled(rt, lead.id, generation=3, timeout=SETTLE_S)
    assert done.state == AgentState.COMPLETED
    assert built == ["lead", "lead"]  # built when its model called list_agents
    first, second, third, after_tool = stub.requests
    assert "spawn_subagent" in first.tool_names
    assert first.body["tools"] == second.body["tools"] == third.body["tools"]
    assert after_tool.body["tools"] == first.body["tools"]


def test_kept_schemas_are_one_profile_and_limits_objects_and_spawn_rights() -> None:
    offered = OfferedSchemas()
    profile, limits = Profile("lead", subagents=["helper"]), Limits()
    box = _toolbox.ToolBox([])
    offered.keep(profile, limits, True, box, ())
    assert offered.get(profile, limits, True) == []
    assert offered.get(profile, limits, False) is None  # another spawn right
    assert offered.get(Profile("lead", subagents=["helper"]), limits, True) is None
    assert offered.get(profile, Limits(), True) is None
    offered.keep(profile, limits, False, box, ("read_file",))  # a built-in: not kept
    assert offered.get(profile, limits, False) is None


def test_a_runner_keeps_a_bounded_number_of_offers() -> None:
    offered = OfferedSchemas()
    box = _toolbox.ToolBox([])
    kept = [(Profile(f"p{i}"), Limits()) for i in range(200)]
    for profile, limits in kept:
        offered.keep(profile, limits, False, box, ())
    assert offered.get(*kept[-1], False) == []
    assert sum(offered.get(p, lim, False) is not None for p, lim in kept) <= 64
