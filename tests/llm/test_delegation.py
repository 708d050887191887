"""Delegation through tool calls: the scripted model and litellm's OpenAI path over local HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm.conftest import SETTLE_S, run, stub_runner
from retinue import AgentState, Profile, Runtime, Team
from retinue.llm import SCRIPTED_MODEL
from retinue.protocol.tools import COORDINATOR_TOOLS, READ_TOOLS
from retinue.testing import OpenAIStub

pytestmark = pytest.mark.usefixtures("litellm")


def _spawn_enum(request_tools: list[dict[str, Any]]) -> list[str]:
    (spawn,) = [t for t in request_tools if t["function"]["name"] == "spawn_subagents"]
    text = json.dumps(spawn["function"]["parameters"])
    start = text.index('"enum": [') + len('"enum": ')
    return list(json.loads(text[start : text.index("]", start) + 1]))


def test_two_level_delegation_over_the_openai_http_path(llm_runtime: Any, stub: OpenAIStub) -> None:
    runner = stub_runner(stub)
    rt = llm_runtime(
        [
            Profile("lead", subagents=["reviewer", "tester"], runner=runner),
            Profile("reviewer", runner=runner),
            Profile("tester", runner=runner),
        ]
    )
    lead = run(rt, "lead", "review the API", name="review")
    assert lead.state is AgentState.COMPLETED
    children = [a for a in rt.agents() if a.parent_path == lead.path]
    assert sorted(c.profile for c in children) == ["reviewer", "tester"]
    assert all(c.state is AgentState.COMPLETED for c in children)
    lines = (lead.output or "").splitlines()
    assert lines[0] == "Summary of 2 subagent results for: review the API"
    assert sorted(lines[1:]) == sorted(
        f"- {c.path} (completed): Done: review the API" for c in children
    )
    # The lead was offered the spawn tool with exactly the profiles it may spawn.
    assert _spawn_enum(stub.requests[0].body["tools"]) == ["reviewer", "tester"]
    # Four model calls: the lead twice (delegate, summarise), each child once.
    assert len(stub.requests) == 4
    total = sum(a.usage.total_tokens for a in rt.agents())
    assert lead.tree_usage is not None and lead.tree_usage.total_tokens == total > 0


def test_the_scripted_team_reads_the_workspace(llm_runtime: Any, tmp_path: Path) -> None:
    workspace = tmp_path / "repo"
    workspace.mkdir()
    (workspace / "auth.py").write_text("def login(): ...\n")
    (workspace / "README").write_text("The service.\nMore.\n")
    rt = llm_runtime(
        [
            Profile("lead", subagents=["reader"], model=SCRIPTED_MODEL, tools="read"),
            Profile("reader", tools="read"),  # inherits the scripted model
        ],
        workspace=workspace,
    )
    lead = run(rt, "lead", "describe the repo")
    assert lead.state is AgentState.COMPLETED, lead.error
    (reader,) = [a for a in rt.agents() if a.profile == "reader"]
    assert reader.output == "Done: describe the repo (read 2 files: The service.; def login(): ...)"
    assert f"- {reader.path} (completed): {reader.output}" in (lead.output or "")


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "code_review" / "team.toml"


def test_each_agent_of_the_example_team_is_offered_one_fixed_tool_set(
    stub: OpenAIStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leads get every coordinator tool, leaves send_message alone; the same on every call."""
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    text = EXAMPLE.read_text(encoding="utf-8").replace(
        'model = "retinue/scripted"', f'model = "openai/stub-model"\napi_base = "{stub.url}"'
    )
    team = Team.from_toml(text, source=EXAMPLE)
    with Runtime.open(tmp_path / "store", team=team) as rt:
        lead = rt.spawn(team.lead, "review the change", name="review")
        done = rt.wait(lead.id, timeout=SETTLE_S)
    assert done.status == "completed", done
    by_instructions = {spec.instructions.strip(): name for name, spec in team.agents.items()}
    offered: dict[str, list[list[str]]] = {}
    for request in stub.requests:
        system = request.messages[0]["content"].strip()
        offered.setdefault(by_instructions[system], []).append(request.tool_names)
    assert set(offered) == set(team.agents)
    for name, calls in offered.items():
        coordinator = COORDINATOR_TOOLS if team.agents[name].subagents else ("send_message",)
        assert calls == [[*coordinator, *READ_TOOLS]] * len(calls), name
    # A leaf reads the workspace first: several calls, one tool set.
    assert len(offered["secrets"]) > 1
