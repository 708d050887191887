"""``retinue fork``: a run's tree copied as of a generation, shown by ``retinue tree``."""

from __future__ import annotations

from pathlib import Path

from cliutil import TEAM, retinue_cli, tree_json


def test_fork_a_run_and_see_it_in_the_tree(tmp_path: Path) -> None:
    store = tmp_path / "store"
    done = retinue_cli("run", TEAM, "review the change", "--store", store, "--json")
    assert done.returncode == 0, done.stderr
    forked = retinue_cli("fork", "/root/review/security", "--at", "1", "--store", store)
    assert forked.returncode == 0, forked.stderr
    lines = forked.stdout.splitlines()
    assert lines[0] == (
        "forked /root/review/security as of generation 1: /root/review/security_fork1 "
        "(3 agents, settled)"
    )
    agents = {a["path"]: a for a in tree_json(store)}
    copy = agents["/root/review/security_fork1"]
    origin = agents["/root/review/security"]
    assert copy["forked_from"]["path"] == "/root/review/security"
    assert copy["forked_from"]["generation"] == 1
    assert (copy["task"], copy["output"]) == (origin["task"], origin["output"])
    assert sorted(p for p in agents if p.startswith("/root/review/security_fork1/")) == [
        "/root/review/security_fork1/injection",
        "/root/review/security_fork1/secrets",
    ]
    plain = retinue_cli("tree", "--store", store)
    assert "/root/review/security_fork1 (fork of /root/review/security@1)" in plain.stdout
    refused = retinue_cli("fork", "/root/review", "--at", "9", "--store", store)
    assert refused.returncode == 2
    assert refused.stderr.startswith("retinue: InvalidArgument: at=9: /root/review has had")
    missing = retinue_cli("fork", "/root/nobody", "--store", store)
    assert (missing.returncode, missing.stderr.split(" (")[0]) == (
        2,
        "retinue: no agent '/root/nobody' in " + str(store),
    )
