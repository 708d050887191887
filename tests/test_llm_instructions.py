"""The instructions-per-turn benchmark (``python -m stress --only llm_instructions``).

Its driver runs as a plain script here (no valgrind: that is the benchmark's
job, 30-100x slower), on a tiny N, both sides; the callgrind-output parser
reads a sample file's totals; a missing valgrind is a skip with its reason.
No figure is asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # ``pytest`` (not ``python -m pytest``) leaves the repo off the path
    sys.path.insert(0, str(ROOT))

from stress.bench import llm_instructions  # noqa: E402

SAMPLE = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 4828
cmd:  /usr/bin/python3 -m stress.bench.llm_instructions retinue 2
part: 1

desc: I1 cache:
positions: line
events: Ir
summary: 15524407862

fl=(1) ???
fn=(1) 0x0000000000001100
0 3

totals: 15524407862
"""


@pytest.mark.parametrize(
    ("module", "kind"),
    [
        ("stress.bench.llm_instructions", "raw"),
        ("stress.bench.llm_instructions", "retinue"),
        ("stress.bench.llm_instructions", "retinue_run"),
        ("stress.bench.llm_instructions_scale", "raw"),
        ("stress.bench.llm_instructions_scale", "retinue"),
        ("stress.bench.lifecycle_instructions", "lifecycle"),
        ("stress.bench.lifecycle_instructions", "tree"),
    ],
)
def test_driver_runs_as_a_plain_script(module: str, kind: str) -> None:
    """Each instruction bench's driver (the process callgrind runs) works without valgrind."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), LITELLM_LOCAL_MODEL_COST_MAP="True")
    done = subprocess.run(
        [sys.executable, "-m", module, kind, "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "2"


def test_a_toggled_driver_waits_at_the_warm_up_end_until_told() -> None:
    """Toggled (as callgrind runs it), the driver says ``measure`` and goes on once told."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), LITELLM_LOCAL_MODEL_COST_MAP="True")
    env[llm_instructions.TOGGLE_ENV] = "1"
    with subprocess.Popen(
        [sys.executable, "-m", "stress.bench.llm_instructions", "raw", "2"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line.strip())
            if lines[-1] == llm_instructions.MEASURE:
                break
        assert lines[-1] == llm_instructions.MEASURE
        process.stdin.write("go\n")
        process.stdin.close()
        rest = process.stdout.read().strip().splitlines()
        assert process.wait(timeout=300) == 0
    assert rest[-1] == "2"


def test_driver_rejects_a_bad_side() -> None:
    with pytest.raises(ValueError, match="usage: raw"):
        llm_instructions.drive("both", 1)


def test_measure_reports_every_side_under_its_own_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """``measure`` runs each side with n and 2n; ``retinue_run`` has its own keys beside
    the others (which keep their meaning)."""
    per_piece = {"raw": 100, "retinue": 125, "retinue_run": 110}
    seen: list[tuple[str, int]] = []

    def fake(side: str, n: int, out: Path) -> int:
        seen.append((side, n))
        return 1_000 + per_piece[side] * n

    monkeypatch.setattr(llm_instructions, "_instructions", fake)
    row = llm_instructions.measure(3)
    assert seen == [(s, k) for s in ("raw", "retinue", "retinue_run") for k in (3, 6)]
    assert row == {
        "instructions_turns": 3,
        "instructions_per_raw_call": 100,
        "instructions_per_retinue_turn": 125,
        "instructions_ratio_raw_vs_retinue": 0.8,
        "instructions_per_retinue_run_turn": 110,
        "instructions_ratio_raw_vs_retinue_run": 0.909,
    }


def test_parser_reads_the_summary_line() -> None:
    assert llm_instructions.callgrind_total(SAMPLE) == 15524407862


def test_parser_falls_back_to_totals() -> None:
    text = SAMPLE.replace("summary: 15524407862\n", "")
    assert llm_instructions.callgrind_total(text.replace("totals: 15524407862", "totals: 7 1")) == 7


def test_parser_rejects_other_text() -> None:
    with pytest.raises(ValueError, match="callgrind"):
        llm_instructions.callgrind_total("events: Ir\n")


def test_missing_valgrind_is_a_skip_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_instructions, "VALGRIND", "no-such-valgrind-here")
    row = llm_instructions.run(1)
    assert "valgrind is not installed" in row["instructions"]
