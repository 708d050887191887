"""What the CLI shows of supervision: the attempt, the last error and the next restart."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import msgspec
from cliutil import retinue_cli
from support import EventFields

from retinue import AgentInfo, AgentState, ApprovalAnswered, ApprovalRequested, TurnRestarting
from retinue.cli.render import PlainView, plain_row, state_text


def info(**changes: Any) -> AgentInfo:
    restarting = AgentInfo(
        id="a",
        name="w",
        path="/root/w",
        profile="worker",
        parent_path="/root",
        depth=1,
        state=AgentState.RESTARTING,
        generation=2,
        task="t",
        created_at=100.0,
        updated_at=100.0,
        attempt=2,
        last_error="RuntimeError: boom",
        restart_due_at=104.0,
    )
    return msgspec.structs.replace(restarting, **changes)


def test_a_restarting_agent_shows_its_attempt_due_time_and_last_error() -> None:
    assert state_text(info(), now=101.0) == "restarting g2 attempt 2 in 3.0s"
    assert "RuntimeError: boom" in plain_row(info(), now=101.0)
    done = info(
        state=AgentState.COMPLETED, restart_due_at=None, output="ok", generation=3, attempt=3
    )
    assert state_text(done, now=101.0) == "completed g3 attempt 3"
    first = info(state=AgentState.RUNNING, attempt=1, restart_due_at=None, generation=1)
    assert state_text(first, now=101.0) == "running g1"


def test_plain_lines_name_restarts_and_approvals() -> None:
    out = io.StringIO()
    view = PlainView(out)
    view.started = 100.0
    common: EventFields = {"agent_id": "a", "path": "/root/w", "at": 101.0}
    view.event(
        TurnRestarting(**common, generation=2, attempt=2, delay_s=1.5, error="RuntimeError: boom"),
        {},
    )
    view.event(ApprovalRequested(**common, request_id="r1", tool="bash", arguments="{}"), {})
    view.event(
        ApprovalAnswered(**common, request_id="r1", tool="bash", approved=False, reason="no"), {}
    )
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("/root/w  restarting g2 attempt 2 in 1.5s  RuntimeError: boom")
    assert "awaiting approval r1: bash {}" in lines[1]
    assert lines[2].endswith("bash denied: no (r1)")


def test_validate_warns_about_a_model_nobody_prices_under_a_cost_budget(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text(
        '[limits]\nusd_per_tree = 2\n[agents.a]\nmodel = "retinue/scripted"\n'
        '[agents.b]\nmodel = "openai/gpt-4o-mini"\nsubagents = []\n'
    )
    done = retinue_cli("validate", team)
    assert done.returncode == 0, done.stderr
    assert "does not price retinue/scripted" in done.stderr
    assert "gpt-4o-mini" not in done.stderr  # litellm's map prices it
    team.write_text('[agents.a]\nmodel = "retinue/scripted"\n')
    assert "price" not in retinue_cli("validate", team).stderr  # no cost budget, no warning


def test_run_warns_about_a_model_nobody_prices_under_a_cost_budget(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text('[limits]\nusd_per_tree = 2\n[agents.a]\nmodel = "retinue/scripted"\n')
    done = retinue_cli("run", team, "say hi", "--store", tmp_path / "s", "--json")
    assert done.returncode == 0, done.stderr
    assert "litellm's cost map does not price retinue/scripted" in done.stderr
    assert "usd_per_agent / usd_per_tree" in done.stderr
    team.write_text('[agents.a]\nmodel = "retinue/scripted"\n')
    done = retinue_cli("run", team, "say hi", "--store", tmp_path / "t", "--json")
    assert done.returncode == 0, done.stderr
    assert "price" not in done.stderr  # no cost budget, no warning


def test_validate_refuses_an_approve_entry_naming_no_tool_of_the_agent(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text('[agents.a]\nmodel = "retinue/scripted"\ntools = "read"\napprove = ["bsh"]\n')
    done = retinue_cli("validate", team)
    assert done.returncode == 2, done.stdout
    assert "approve names 'bsh', which is not one of its tools (read_file" in done.stderr
    team.write_text(
        '[agents.a]\nmodel = "retinue/scripted"\ntools = "modify"\napprove = ["bash"]\n'
    )
    assert retinue_cli("validate", team).returncode == 0
