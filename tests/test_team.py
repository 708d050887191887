"""Team files: strict decoding that names table and key, the graph check, Runtime.open(team=)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cliutil import TEAM

from retinue import Limits, Runtime, Team, TeamFileError, load_team


def _error(text: str) -> TeamFileError:
    with pytest.raises(TeamFileError) as caught:
        Team.from_toml(text, source="t.toml", environ=False)
    return caught.value


@pytest.mark.parametrize(
    ("text", "table", "key", "words"),
    [
        ("[agents.a]\nmodle = 'x'", "agents.a", "modle", "unknown key; known keys: model,"),
        ("[agents.a]\nmodel = 1", "agents.a", "model", "Expected str, got int"),
        ("[agents.a]\ntools = [1]", "agents.a", "tools[0]", "Expected str, got int"),
        ("[agents.a]\nresult_format = 'prose'", "agents.a", "result_format", "'prose'"),
        ("[agents.a]\nretries = -1", "agents.a", "retries", ">= 0"),
        ("[agents.a]\nsubagents = ['b']", "agents.a", "subagents", "'b' is not an agent"),
        ("[agents.a]\nsubagents = ['a']", "agents.a", "subagents", "cycle detected: a -> a"),
        ("[limits]\nfanout_cap = 'many'\n[agents.a]", "limits", "fanout_cap", "positive integer"),
        ("[limits]\nfan_out = 2\n[agents.a]", "limits", "fan_out", "unknown key"),
        ("[defaults]\nmodel = 2\n[agents.a]", "defaults", "model", "Expected str"),
        ("lead = 'b'\n[agents.a]", "", "lead", "'b' is not an agent"),
        ("colour = 'red'\n[agents.a]", "", "colour", "unknown key"),
        ("[agents.Bad]", "agents.Bad", "", "an agent name is"),
        ("name = 'root'\n[agents.a]", "", "name", "the team name is an agent name"),
        ("x = [", "", "", "not valid TOML"),
        ("", "agents", "", "at least one [agents.<name>]"),
    ],
)
def test_errors_name_the_table_and_the_key(text: str, table: str, key: str, words: str) -> None:
    error = _error(text)
    assert (error.source, error.table, error.key) == ("t.toml", table, key)
    assert words in str(error)
    where = (f"[{table}] " if table else "") + (f"key {key!r}: " if key else "")
    assert str(error).startswith(f"t.toml: {where}")


def test_a_chain_deeper_than_the_cap_is_refused_before_anything_runs() -> None:
    text = "[limits]\ndepth_cap = 1\n[agents.a]\nsubagents=['b']\n"
    text += "[agents.b]\nsubagents=['c']\n[agents.c]"
    error = _error(text)
    assert error.table == "agents" and "exceeds cap 1" in str(error)


def test_defaults_fill_agents_and_the_lead_comes_first() -> None:
    team = Team.from_toml(
        """
        name = "crew"
        lead = "boss"
        [limits]
        depth_cap = 3
        [defaults]
        model = "retinue/scripted"
        tools = "read"
        retries = 1
        [agents.helper]
        model = "openai/gpt-4o-mini"
        temperature = 0.5
        [agents.boss]
        subagents = ["helper"]
        instructions = "lead"
        turn_timeout_s = 90
        """,
        environ=False,
    )
    assert (team.name, team.lead, team.limits.depth_cap) == ("crew", "boss", 3)
    boss, helper = team.profiles()
    assert (boss.name, boss.model, boss.subagents, boss.instructions) == (
        "boss",
        "retinue/scripted",
        ("helper",),
        "lead",
    )
    assert (boss.turn_timeout_s, helper.turn_timeout_s) == (90, None)
    assert helper.model == "openai/gpt-4o-mini"
    assert helper.model_settings == {"retries": 1, "temperature": 0.5}
    assert boss.tools == "read" and boss.model_settings == {"retries": 1}
    moved = team.with_model("openai/other")
    assert {p.model for p in moved.profiles()} == {"openai/other"}


def test_limits_start_from_the_environment_and_the_file_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RETINUE_FANOUT_CAP", "3")
    monkeypatch.setenv("RETINUE_DEPTH_CAP", "4")
    team = Team.from_toml("[limits]\ndepth_cap = 2\n[agents.a]")
    assert (team.limits.depth_cap, team.limits.fanout_cap) == (2, 3)


def test_load_team_errors_are_about_the_file(tmp_path: Path) -> None:
    with pytest.raises(TeamFileError, match="no such file"):
        load_team(tmp_path / "missing.toml")
    with pytest.raises(TeamFileError, match="is a folder"):
        load_team(tmp_path)
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(TeamFileError, match="cannot be read"):
        load_team(tmp_path / "bin.toml")
    bad = tmp_path / "runner.toml"
    bad.write_text("[agents.a]\nrunner = 'nowhere.py:go'\n")
    with pytest.raises(TeamFileError, match=r"\[agents.a\] key 'runner': cannot import"):
        load_team(bad).profiles()


def test_runtime_open_with_a_team_file_runs_its_python_runners(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "store", team=TEAM) as rt:
        assert rt.limits == Limits.from_env()
        info = rt.spawn("lead", "audit", name="review")
        done = rt.wait(info.id, timeout=60)
        assert done.status == "completed"
        assert done.output is not None and done.output.startswith("lead done; security:")
        paths = {a.path for a in rt.agents()}
        assert "/root/review/security/secrets" in paths and len(paths) == 6
    team = load_team(TEAM)
    # lead -> security -> secrets runs at depth 3: the smallest cap it passes.
    with Runtime.open(tmp_path / "other", team=team, limits=Limits(depth_cap=3)) as rt:
        assert rt.limits.depth_cap == 3


SUPERVISED = """
[limits]
usd_per_tree = 2.5
approval_timeout_s = 600

[defaults]
model = "retinue/scripted"
restart = { max_restarts = 2, within_s = 30 }
approve = ["write_file"]

[agents.lead]
subagents = ["worker"]

[agents.worker]
restart = { max_restarts = 5, backoff_s = 0.5, on = ["failed", "lost"] }
approve = ["*"]
"""


def test_restart_and_approve_come_from_defaults_or_the_agents_table() -> None:
    from retinue import Restart

    team = Team.from_toml(SUPERVISED, environ=False)
    lead, worker = team.profiles()
    assert lead.restart == Restart(max_restarts=2, within_s=30)
    assert lead.approve == ("write_file",)
    assert worker.restart == Restart(max_restarts=5, backoff_s=0.5, on=("failed", "lost"))
    assert worker.approve == ("*",)
    assert (team.limits.usd_per_tree, team.limits.approval_timeout_s) == (2.5, 600.0)


@pytest.mark.parametrize(
    ("line", "key", "words"),
    [
        ("restart = { max_restart = 1 }", "restart.max_restart", "known keys: max_restarts"),
        ("restart = { jitter = 3 }", "restart", "Restart.jitter must be a fraction"),
        ("restart = { on = ['crashed'] }", "restart.on[0]", "Invalid enum value 'crashed'"),
        ("restart = 3", "restart", "Expected object"),
        ("approve = 'bash'", "approve", "Expected array"),
    ],
)
def test_bad_supervision_settings_name_the_key(line: str, key: str, words: str) -> None:
    with pytest.raises(TeamFileError) as caught:
        Team.from_toml(f"[agents.a]\n{line}\n", source="team.toml", environ=False)
    assert caught.value.key == key
    assert words in str(caught.value)
