"""The floor bench (:mod:`stress.bench.llm_floor`): raw calls wrapped in durable actor commits.

Tiny runs on the offline model (and one of the whole part's row, HTTP stub
included): every wrapped call's two records are in the LMDB env, each answered
after a commit, and every figure of the row is there. No time is asserted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lmdb
import msgspec
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # ``pytest`` (not ``python -m pytest``) leaves the repo off the path
    sys.path.insert(0, str(ROOT))

pytest.importorskip("litellm")

from retinue.llm import SCRIPTED_MODEL  # noqa: E402
from stress.bench import llm_floor  # noqa: E402
from stress.bench.llm import WARM_UP  # noqa: E402


@pytest.mark.parametrize("sync", [True, False])
def test_every_wrapped_call_writes_its_two_records(tmp_path: Path, sync: bool) -> None:
    turns = 12
    wall, cpu, commits = llm_floor.floor_calls(
        tmp_path / "env", turns, 4, sync, model=SCRIPTED_MODEL
    )
    assert wall > 0 and cpu > 0
    # answered after a commit: the timed window's commands took at least one commit,
    # and at most one each (two commands a call)
    assert 1 <= commits <= 2 * turns
    env = lmdb.open(str(tmp_path / "env"), readonly=True, lock=False)
    try:
        with env.begin() as txn:
            records = [
                (key.decode(), msgspec.msgpack.decode(value, type=llm_floor._Record))
                for key, value in txn.cursor()
            ]
    finally:
        env.close()
    assert len(records) == 2 * (turns + WARM_UP)
    kinds = sorted(record.kind for _, record in records)
    assert kinds == ["answer"] * (turns + WARM_UP) + ["start"] * (turns + WARM_UP)
    for key, record in records:
        assert key == f"{record.agent}:{record.kind}"
        assert record.text if record.kind == "answer" else record.text.startswith("task ")
    assert 150 <= len(msgspec.msgpack.encode(records[0][1])) <= 260


def test_run_row() -> None:
    row = llm_floor.run(6, bound=3, reps=1, costs_turns=6)
    assert row["turns"] == 6
    for model in ("http", "offline"):
        assert row[f"{model}_retinue_completed"] == 6
        assert row[f"{model}_raw_calls_per_s"] > 0
        for side in ("floor", "floor_nosync", "floor_batched", "retinue"):
            ratio, spread = row[f"{model}_{side}_vs_raw_median_range"]
            assert ratio > 0 and "-" in spread
        assert len(row[f"{model}_cpu_ms_per_call_raw_floor_nosync_batched_retinue"]) == 5
        for made in row[f"{model}_commits_per_call_floor_nosync_batched"]:
            assert 0 < made <= 2
        for side in llm_floor.SIDES:
            if (model, side) != ("http", "retinue"):
                assert "voluntary" in row[f"costs_{model}_{side}_per_call_ms_median"]
        assert "actor" in row[f"costs_{model}_floor_batched_per_call_ms_median"]
    assert "supervisor" in row["costs_offline_retinue_per_call_ms_median"]
    assert row["machine_before"]["cpus"] == row["machine_after"]["cpus"]
