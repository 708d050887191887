"""The durable-steps benchmark (``python -m stress --only durable_steps``) on a tiny workload.

Every contender runs two agents of two steps each in its own interpreter, as
the benchmark runs it: each must do every step, and the data the part writes
as JSON must hold the figures the table prints. A peer that is not installed
(the ``bench`` extra) is skipped with its reason, by the benchmark and here.
No figure is asserted: timings are the benchmark's output, not a test's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # ``pytest`` (not ``python -m pytest``) leaves the repo off the path
    sys.path.insert(0, str(ROOT))

from stress.bench import durable_peers, durable_steps  # noqa: E402
from stress.bench.durable_table import level_tables  # noqa: E402

LEVEL = (2, 2, 1)
FIELDS = {
    "agents",
    "steps_per_agent",
    "rounds",
    "steps_done",
    "steps_expected",
    "wall_s",
    "steps_per_s",
    "p50_ms",
    "p99_ms",
    "samples",
    "cpu_ms_per_step",
    "load_avg_1m_before",
}
RETINUE = ("retinue", "retinue_commits_only", "raw_litellm_loop")


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    """The benchmark's data for one tiny level, every installed contender in its child."""
    got = durable_steps.run([LEVEL], timeout_s=600.0)
    tables, ratios = level_tables(got)
    return {**got, "tables": tables, "ratios": ratios}


def _rows(data: dict[str, Any], name: str) -> list[dict[str, Any]]:
    if name in data["skipped"]:
        pytest.skip(f"{name}: {data['skipped'][name]}")
    assert name not in data["failed"], data["failed"][name]
    rows: list[dict[str, Any]] = data["rows"][name]
    return rows


@pytest.mark.parametrize("name", ["fsync", "dbos", "langgraph", *RETINUE])
def test_each_contender_does_every_step_of_a_tiny_workload(data: dict[str, Any], name: str) -> None:
    (row,) = _rows(data, name)
    assert set(row) >= FIELDS, FIELDS - set(row)
    assert row["steps_done"] == row["steps_expected"] == 4
    assert row["samples"] == 2  # one interval per agent: its first step is not counted
    assert row["steps_per_s"] > 0


def test_the_retinue_side_commits_its_steps_in_the_store(data: dict[str, Any]) -> None:
    (row,) = _rows(data, "retinue")
    # Two LlmStep transitions per tool step, plus the final answer's and the input's.
    assert row["llm_step_commands"] >= 2 * row["steps_done"]
    assert row["commits"] > 0


def test_the_commits_only_side_commits_two_steps_per_tool_step_and_nothing_more(
    data: dict[str, Any],
) -> None:
    (row,) = _rows(data, "retinue_commits_only")
    # As a model turn: its state handed at its start (no LlmLoad), its input stored with
    # its first intent. The level's untimed warm-up agent did two steps of its own.
    assert row["llm_step_commands"] == 2 * (row["steps_done"] + 2)


def test_the_data_holds_levels_ratios_and_every_contender(data: dict[str, Any]) -> None:
    assert data["levels"] == [{"agents": 2, "steps_per_agent": 2, "rounds": 1}]
    assert data["failed"] == {}
    named = set(data["rows"]) | set(data["skipped"])
    assert named == {"fsync", "dbos", "langgraph", *RETINUE}
    ratios = data["ratios"]["2_agents"]
    assert "retinue_vs_fsync" in ratios
    assert "retinue_cpu_per_step" in data["tables"][0][1]
    for peer in ("dbos", "langgraph"):
        assert (f"retinue_vs_{peer}" in ratios) == (peer in data["rows"])


def test_a_peer_not_installed_is_skipped_with_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(durable_peers.PACKAGES, "dbos", ("retinue_no_such_module",))
    monkeypatch.setattr(durable_steps, "GROUPS", [["dbos"]])
    got = durable_steps.run([LEVEL], timeout_s=600.0)
    assert got["rows"] == {} and got["failed"] == {}
    reason = got["skipped"]["dbos"]
    assert "retinue_no_such_module is not installed" in reason
    assert ".[bench]" in reason
    tables, _ = level_tables(got)
    assert "retinue_vs_dbos" not in tables[0][1]


def _row(rate: float, load: float) -> dict[str, Any]:
    return {
        "steps_per_s": rate,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "cpu_ms_per_step": 0.5,
        "load_avg_1m_before": load,
    }


def test_repetitions_give_the_median_row_and_the_median_of_their_own_ratios() -> None:
    commits = {"commits": 5, "llm_step_commands": 50, "llm_steps_per_commit": 10.0}
    reps = {
        "retinue": [[_row(300, 1.0) | commits, _row(200, 2.0) | commits]],
        "retinue_commits_only": [[_row(900, 1.0), _row(800, 2.0)]],
        "langgraph": [[_row(100, 1.5), _row(100, 3.0)]],
    }
    rows = {name: [durable_steps._median(by_level[0])] for name, by_level in reps.items()}
    assert rows["retinue"][0]["steps_per_s"] == 200  # the lower middle of two
    assert rows["retinue"][0]["steps_per_s_reps"] == [300, 200]
    data: dict[str, Any] = {
        "levels": [{"agents": 100, "steps_per_agent": 10, "rounds": 1}],
        "repetitions": 2,
        "reps": reps,
        "rows": rows,
    }
    tables, ratios = level_tables(data)
    assert ratios["100_agents"]["retinue_vs_langgraph"] == (2.5, "2.0-3.0")
    assert ratios["100_agents"]["best_peer"] == "langgraph"
    # The aim judges the journaled step (commits only): 8x and 9x, median 8.5x.
    assert tables[0][1]["aim"].endswith("NOT met (8.5x)")
    assert tables[0][1]["aim_model_driven"].startswith("a model-driven step is 2.5x")
    assert tables[0][1]["load_avg_1m"] == "1.0-3.0"


def test_agents_and_reps_pick_the_levels_a_run_measures() -> None:
    from stress.parts import Options

    assert durable_steps.levels_for(Options()) == (durable_steps.FULL, durable_steps.FULL_REPS)
    assert durable_steps.levels_for(Options(quick=True)) == (durable_steps.QUICK, 1)
    assert durable_steps.levels_for(Options(agents=(100,))) == ([(100, 10, 1)], 3)
    assert durable_steps.levels_for(Options(agents=(1,), quick=True, reps=2)) == ([(1, 3, 3)], 2)
    assert durable_steps.levels_for(Options(agents=(1, 50))) == ([(1, 20, 10), (50, 10, 1)], 3)
