"""``retinue demo``: the code-review example on the offline model, through litellm's path."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cliutil import retinue_cli, tree_json

SPECIALISTS = {
    "/root/review/security/secrets",
    "/root/review/security/injection",
    "/root/review/style/naming",
    "/root/review/style/docs",
    "/root/review/tests/coverage",
    "/root/review/tests/edge_cases",
}


def test_demo_draws_three_levels_by_path_and_ends_with_the_answer(tmp_path: Path) -> None:
    store = tmp_path / "demo"
    done = retinue_cli("demo", "--store", store, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    # Off a terminal: plain lines, each turn that settles names its path.
    settled = re.findall(r"^\[\s*[\d.]+s\] (/root\S*)  \S+  completed g\d", done.stdout, re.M)
    assert set(settled) >= SPECIALISTS
    assert {"/root/review", "/root/review/security", "/root/review/tests"} <= set(settled)
    assert "answer of /root/review (lead):" in done.stdout
    assert "10 agents: 10 completed" in done.stdout
    assert f"store: {store}" in done.stdout
    agents = tree_json(store)
    assert len(agents) == 10 and {a["state"] for a in agents} == {"completed"}
    assert max(a["depth"] for a in agents) == 3
    # The demo wants a fresh store: it never piles a second team into this one.
    again = retinue_cli("demo", "--store", store)
    assert again.returncode == 2 and "is not empty" in again.stderr
    assert len(tree_json(store)) == 10


def test_demo_without_a_store_makes_a_fresh_one(tmp_path: Path) -> None:
    done = retinue_cli("demo", "--json", timeout=180, TMPDIR=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads(done.stdout.splitlines()[-1])
    assert final["event"] == "run_finished" and final["states"] == {"completed": 10}
    store = Path(final["store"])
    assert store.parent == tmp_path and store.name.startswith("retinue-demo-")
    assert len(tree_json(store)) == 10
