"""``retinue run --json`` and ``retinue tree --json`` name each failure's class (``error_type``)."""

from __future__ import annotations

import json
from pathlib import Path

from cliutil import TEAM, retinue_cli, tree_json


def test_run_json_names_the_class_of_each_failure(tmp_path: Path) -> None:
    store = tmp_path / "store"
    done = retinue_cli("run", TEAM, "check", "--store", store, "--json", CLI_TEST_FAIL="naming")
    assert done.returncode == 1, done.stdout + done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    settled = [e for e in events if e["event"] == "turn_settled" and e["status"] == "failed"]
    assert [(e["path"], e["error_type"]) for e in settled] == [
        ("/root/review/style/naming", "ValueError")
    ]
    finished = events[-1]
    assert finished["event"] == "run_finished"
    (failed,) = finished["failed"]
    assert (failed["path"], failed["error_type"]) == ("/root/review/style/naming", "ValueError")
    assert failed["error"].startswith("ValueError: fanout_cap is 8")
    ok = [e for e in events if e["event"] == "turn_settled" and e["status"] == "completed"]
    assert ok and all(e["error_type"] is None for e in ok)
    shown = {a["path"]: a["error_type"] for a in tree_json(store)}
    assert shown["/root/review/style/naming"] == "ValueError"
    assert shown["/root/review"] is None
