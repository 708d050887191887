"""``retinue fuzz``: a sound team passes, a broken one fails with its shortest sequence printed.

Most runs go through ``main()`` in this process (litellm is imported once);
one goes through a subprocess, as a user runs it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cliutil import SOURCE, retinue_cli

from retinue.cli import main
from retinue.llm.model import load_litellm

CODE_REVIEW = SOURCE / "examples" / "code_review" / "team.toml"

LEAKY_TEAM = """
name = "leaky"
lead = "lead"

[agents.lead]
model = "retinue/scripted"
subagents = ["helper"]

[agents.helper]
runner = "helper.py:run"
"""

LEAKY_RUNNER = '''
import threading

_forever = threading.Event()


def run(turn):
    """A Python agent that leaves a thread behind on every turn: a bug to find."""
    threading.Thread(target=_forever.wait, name="leaked-by-helper", daemon=True).start()
    return "done"
'''


def fuzz(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    load_litellm()
    code = main(["fuzz", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_code_review_team_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fuzz(capsys, CODE_REVIEW, "--examples", "4", "--seed", "3")
    assert code == 0, out + err[-3000:]
    assert re.search(r"no invariant broken: 4 examples, \d+ operations, \d+ agents", out)
    assert err.count("retinue fuzz: example") == 4


def test_a_broken_team_fails_with_its_shortest_sequence_and_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    team = tmp_path / "team.toml"
    team.write_text(LEAKY_TEAM)
    (tmp_path / "helper.py").write_text(LEAKY_RUNNER)
    code, out, _ = fuzz(capsys, team, "--examples", "10", "--seed", "1")
    assert code == 1
    assert "invariants broken" in out and "the shortest failing example" in out
    (step,) = re.findall(r"^\s+\d+\. (.+?)  =>", out, re.M)  # shrunk to one operation
    assert step in ("spawn helper", "spawn lead")  # the lead (scripted) spawns the helper
    assert "thread_left_behind" in out and "leaked-by-helper" in out
    replay = re.search(r"--replay '(.+)'$", out, re.M)
    assert replay is not None
    assert json.loads(replay.group(1))["ops"] == [{"kind": "spawn", "profile": step.split()[1]}]
    code, again, _ = fuzz(capsys, team, "--replay", replay.group(1))
    assert code == 1 and "leaked-by-helper" in again


def test_a_crash_and_reopen_replayed_breaks_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    example = {
        "seed": 5,
        "ops": [
            {"kind": "spawn", "profile": "lead"},
            {"kind": "crash", "value": 0.3},
            {"kind": "resume", "deep": True},
            {"kind": "reopen"},
            {"kind": "wait", "value": 3.0},
        ],
    }
    code, out, err = fuzz(capsys, CODE_REVIEW, "--replay", json.dumps(example))
    assert code == 0, out + err[-3000:]
    assert "broke no invariant" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--examples", "0"], "--examples must be at least 1"),
        (["--call-timeout", "0"], "--call-timeout must be a positive number"),
        (["--replay", "{not json"], "--replay takes the example"),
        (["--replay", '{"seed": 1, "ops": [{"kind": "explode"}]}'], "unknown operations"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = fuzz(capsys, CODE_REVIEW, *argv)
    assert code == 2
    assert message in err


def test_a_missing_team_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = fuzz(capsys, tmp_path / "nope.toml")
    assert code == 2 and "no such file" in err


def test_the_command_runs_as_a_user_runs_it() -> None:
    done = retinue_cli("fuzz", CODE_REVIEW, "--examples", "2", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "no invariant broken: 2 examples" in done.stdout
