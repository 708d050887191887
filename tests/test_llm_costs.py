"""The llm bench's diagnostic (:mod:`stress.bench.llm_costs`): where a one-call turn's time goes.

A tiny run of both sides on the offline model: every figure is there, and the
counts that do not depend on timing are what a one-call turn is (three
commands: the spawn, the host's wait, the settle with its last step). No
time is asserted.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # ``pytest`` (not ``python -m pytest``) leaves the repo off the path
    sys.path.insert(0, str(ROOT))

from stress.bench import llm_costs  # noqa: E402


def test_thread_groups() -> None:
    assert llm_costs.thread_group("MainThread", main=True) == "host"
    assert llm_costs.thread_group("retinue-loop", main=False) == "loop"
    assert llm_costs.thread_group("SupervisorActor-3 (urn:uuid:x)", main=False) == "supervisor"
    assert llm_costs.thread_group("retinue-store-writer:s", main=False) == "writer"
    assert llm_costs.thread_group("asyncio_0", main=False) == "litellm"
    assert llm_costs.thread_group("retinue-compactor", main=False) == "other"


def test_costs_row(tmp_path: Path) -> None:
    row = llm_costs.costs(tmp_path / "costs", turns=8, bound=4)
    assert row["costs_turns"] == 8
    assert row["costs_retinue_commands_writer_groups"][0] == 3.0  # spawn, wait, settle
    commits, fsyncs = row["costs_retinue_commits_fsyncs"]
    assert 0 < commits <= fsyncs
    for key in (
        "costs_user_cpu_ms_raw_call_retinue_turn",
        "costs_sys_cpu_ms_raw_call_retinue_turn",
        "costs_gc_ms_raw_retinue",
        "costs_loop_wakes_raw_retinue",
    ):
        raw, ours = row[key]
        assert raw >= 0 and ours >= 0, key
    assert "supervisor" in row["costs_cpu_ms_by_thread_retinue"]
