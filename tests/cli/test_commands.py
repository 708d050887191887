"""The retinue command as a user meets it: help, versions, input errors, team files, runs.

Runs go through ``python -m retinue.cli`` in a subprocess, as a user or a
script would; help texts and input errors (which open no store) are checked
through ``main()`` in this process to keep the suite fast, with one subprocess
each to show the real process behaves the same.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from cliutil import TEAM, command, env, retinue_cli, tree_json

from retinue.cli import main

SUBCOMMANDS = [
    "demo",
    "run",
    "resume",
    "fork",
    "tree",
    "inspect",
    "validate",
    "backup",
    "compact",
    "web",
    "fuzz",
]


def _main(argv: list[str | Path], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_help_explains_every_command_without_markup(capsys: pytest.CaptureFixture[str]) -> None:
    code, top, _ = _main(["--help"], capsys)
    assert code == 0
    for name in SUBCOMMANDS:
        assert re.search(rf"^\s+{name}\s+\S", top, re.M), name
        code, sub, _ = _main([name, "--help"], capsys)
        assert code == 0, name
        assert "`" not in sub, name
        # Every option has a help text: its line goes on after the option's name.
        options = re.findall(r"^  (--?[a-z][\w-]*)( [A-Z{][^ ]*)?(.*)$", sub, re.M)
        assert options, name
        for option, _, rest in options:
            assert rest.strip() or option in {"--workspace", "--durability"}, (name, option)
    _, run, _ = _main(["run", "--help"], capsys)
    assert "(default: the team's lead)" in run and "$RETINUE_STORE" in run
    assert retinue_cli("resume", "--help").returncode == 0


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(["--version"], capsys)
    assert code == 0
    assert re.fullmatch(r"retinue \d+\.\d+\.\d+\S*\n", out)


def test_usage_errors_exit_2_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a store")
    cases: list[tuple[list[str | Path], str]] = [
        (["tree", "--store", tmp_path / "nothing"], "no retinue store at"),
        (["tree", "--store", a_file], "is a file"),
        (["run", TEAM, "go", "--store", a_file], "is a file"),
        (["demo", "--store", a_file], "is a file"),
        (["inspect", "/root/x", "--store", a_file], "is a file"),
        (["compact", "--store", tmp_path / "nothing"], "no retinue store at"),
        (["run", tmp_path / "missing.toml", "go"], "missing.toml: no such file"),
        (["run", TEAM, "go", "--agent", "nobody", "--store", tmp_path / "s"], "nobody"),
        (["run", TEAM, "go", "--workspace", a_file, "--store", tmp_path / "s"], "not a folder"),
        (["run", TEAM, "  ", "--store", tmp_path / "s"], "TASK is empty"),
        (["resume", "--store", tmp_path / "nothing"], "no retinue store at"),
    ]
    for argv, expected in cases:
        code, _, err = _main(argv, capsys)
        assert code == 2, (argv, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("retinue: "), (argv, err)
        assert expected in lines[0], (argv, lines[0])
    assert not (tmp_path / "s").exists()  # nothing was created for a refused run
    code, _, err = _main(["tree", "--no-such-option"], capsys)
    assert code == 2 and "unrecognized arguments" in err
    # The same through a real process: one line, no traceback, exit 2.
    done = retinue_cli("demo", "--store", a_file)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"retinue: --store {a_file} is a file; the demo needs a new, empty folder"
    ]


@pytest.mark.parametrize(
    ("toml", "table", "key"),
    [
        ('[agents.lead]\nmodle = "x"\n', "[agents.lead]", "'modle'"),
        ("[agents.lead]\nturn_timeout_s = -1\n", "[agents.lead]", "'turn_timeout_s'"),
        ('[agents.lead]\nsubagents = ["ghost"]\n', "[agents.lead]", "'subagents'"),
        ("[limits]\ndepth_cap = 0\n[agents.lead]\n", "[limits]", "'depth_cap'"),
        ('[defaults]\ndurability = "sometimes"\n[agents.lead]\n', "[defaults]", "'durability'"),
    ],
)
def test_a_bad_team_file_is_named_by_table_and_key(
    tmp_path: Path, toml: str, table: str, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    team = tmp_path / "team.toml"
    team.write_text(toml)
    argvs: list[list[str | Path]] = [
        ["validate", team],
        ["run", team, "go", "--store", tmp_path / "store"],
    ]
    for argv in argvs:
        code, _, err = _main(argv, capsys)
        assert code == 2, err
        line = err.strip()
        assert "\n" not in line
        assert f"{team}: {table} key {key}:" in line, line
    assert not (tmp_path / "store" / "data.mdb").exists()  # nothing ran


def test_a_bad_team_file_in_a_real_process(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text("[agents.lead]\nmodel = 3\n")
    done = retinue_cli("run", team, "go", "--store", tmp_path / "store")
    assert done.returncode == 2
    assert done.stderr == f"retinue: {team}: [agents.lead] key 'model': Expected str, got int\n"


def test_validate_describes_a_good_team(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(["validate", TEAM], capsys)
    assert code == 0, err
    assert "ok" in out and "6 agents" in out
    assert "lead 'lead' at /root/review" in out


def test_run_json_is_one_event_per_line_then_a_summary(tmp_path: Path) -> None:
    store = tmp_path / "store"
    done = retinue_cli("run", TEAM, "review the change", "--store", store, "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[-1]["event"] == "run_finished"
    assert events[-1]["exit_code"] == 0 and events[-1]["agents"] == 6
    assert events[-1]["roots"][0]["path"] == "/root/review"
    settled = {e["path"] for e in events if e["event"] == "turn_settled"}
    assert "/root/review/security/secrets" in settled and "/root/review" in settled
    kinds = {e["event"] for e in events[:-1]}
    assert {"agent_spawned", "turn_started", "turn_settled"} <= kinds
    # Running the same team again in the same store makes a second, unique root.
    again = retinue_cli("run", TEAM, "review again", "--store", store, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[-1])["roots"][0]["path"] == "/root/review_2"


def test_run_json_prints_the_live_tool_and_model_call_events(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "code_review" / "team.toml"
    done = retinue_cli(
        "run", example, "review the change", "--store", tmp_path / "store", "--json", timeout=120
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()][:-1]
    kinds = [e["event"] for e in events]
    assert {"tool_call_started", "tool_call_finished", "model_call_finished"} <= set(kinds)
    calls = [e for e in events if e["event"] == "model_call_finished"]
    assert all(c["model"] == "retinue/scripted" and c["prompt_tokens"] > 0 for c in calls)
    started = [e for e in events if e["event"] == "tool_call_started"]
    assert any(e["tool"] == "spawn_subagents" and e["path"] == "/root/review" for e in started)
    # In each agent's lines, its turn_started comes before its calls.
    first: dict[tuple[str, str], int] = {}
    for index, event in enumerate(events):
        first.setdefault((event["path"], event["event"]), index)
    for event in started:
        assert first[(event["path"], "turn_started")] < first[(event["path"], "tool_call_started")]


def test_plain_run_shows_paths_and_a_failed_child_fails_the_run(tmp_path: Path) -> None:
    store = tmp_path / "store"
    done = retinue_cli("run", TEAM, "check", "--store", store, CLI_TEST_FAIL="naming")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    # Off a terminal every line is plain and names a path.
    assert "/root/review/style/naming  naming  failed g1" in done.stdout
    # The error is shown whole: the number it reports is not cut off.
    assert "failed: /root/review/style/naming g1: ValueError: fanout_cap is 8 but" in done.stdout
    assert "wanted 12" in done.stdout
    assert "failed: None" not in done.stdout
    assert "6 agents: 5 completed, 1 failed" in done.stdout
    states = {a["path"]: a["state"] for a in tree_json(store)}
    assert states["/root/review/style/naming"] == "failed"


def test_inspect_backup_and_compact_report_in_words(tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert retinue_cli("run", TEAM, "check", "--store", store).returncode == 0
    shown = retinue_cli("inspect", "/root/review/security", "--store", store)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^state\s+completed \(generation 1\)$", shown.stdout, re.M)
    assert re.search(r"^task\s+check / security$", shown.stdout, re.M)
    as_json = json.loads(retinue_cli("inspect", "/root/review", "--store", store, "--json").stdout)
    assert as_json["agent"]["state"] == "completed" and as_json["unread"] == []
    missing = retinue_cli("inspect", "/root/nobody", "--store", store)
    assert missing.returncode == 2 and "no agent '/root/nobody'" in missing.stderr
    copy = tmp_path / "copy"
    backup = retinue_cli("backup", copy, "--store", store)
    assert backup.returncode == 0, backup.stderr
    assert "backed up" in backup.stdout
    assert [a["path"] for a in tree_json(copy)] == [a["path"] for a in tree_json(store)]
    compact = retinue_cli("compact", "--store", store)
    assert compact.returncode == 0, compact.stderr
    assert re.fullmatch(
        rf"compacted {re.escape(str(store))}: removed \d+ closed agents, \d+ read messages "
        r"and \d+ delivered completions\n",
        compact.stdout,
    )
    paths = [a["path"] for a in tree_json(store)]
    reclaim = retinue_cli("compact", "--reclaim", "--store", store)
    assert reclaim.returncode == 0, reclaim.stderr
    sizes = re.search(
        r"^reclaimed (\d+) bytes: the file went from (\d+) to (\d+) bytes$", reclaim.stdout, re.M
    )
    assert sizes is not None, reclaim.stdout
    freed, before, after = map(int, sizes.groups())
    assert freed == before - after and after == (store / "data.mdb").stat().st_size
    assert [a["path"] for a in tree_json(store)] == paths


def test_a_closed_standard_output_is_a_usage_error_not_an_internal_one(tmp_path: Path) -> None:
    for args in (["tree", "--store", str(tmp_path)], ["tree", "--json"], ["validate", str(TEAM)]):
        done = subprocess.run(
            command(*args),
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
            check=False,
            timeout=60,
            preexec_fn=lambda: os.close(1),  # retinue ... >&-
        )
        assert done.returncode == 2, done.stderr
        assert "standard output is closed" in done.stderr
        assert "internal error" not in done.stderr


def test_a_failure_a_later_turn_replaced_is_still_shown_and_summed_up() -> None:
    """An agent failed at g1, then a wake turn completed at g2: the plain line of g1 shows
    g1's error and the summary lists it, though the agent's record now holds g2."""
    import io

    from retinue import AgentInfo, AgentState, CompletionStatus, TurnSettled
    from retinue.cli.follow import Outcome
    from retinue.cli.render import PlainView

    now = AgentInfo(
        id="a1",
        name="lead",
        path="/root/lead",
        profile="lead",
        parent_path="/root",
        depth=1,
        state=AgentState.COMPLETED,
        generation=2,
        task="t",
        output="fine at last",
    )
    failed = TurnSettled(
        agent_id="a1",
        path="/root/lead",
        at=0.0,
        generation=1,
        status=CompletionStatus.FAILED,
        error="ModelCallFailed: openai status 503",
    )
    out = io.StringIO()
    PlainView(out).event(failed, {"a1": now})
    assert "failed g1  ModelCallFailed: openai status 503" in out.getvalue()
    seen = ("/root/lead", 1, "ModelCallFailed: openai status 503", "ModelCallFailed")
    outcome = Outcome(False, [now], 1.0, [seen])
    assert outcome.failed() == [seen]
