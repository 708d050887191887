"""A clean shutdown keeps the tree's agent indexes; the next open takes them and walks no agent.

Each test shuts a runtime down cleanly (the index is written for trees of at
least ``OPEN_INDEX_AT`` agents: lowered here to 1), then opens the store and
compares what the open built with what a walk of every agent builds from a
copy of the same store. An index the store has moved past (a later write, a
crash's recovery, another LMDB writer), one that does not decode, or one
with an agent deeper than the open's cap is not taken: the open walks.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from retinue import AgentState, Limits, Profile, Restart, Runtime
from retinue.actors.system import _boot
from retinue.actors.tree import (
    OPEN_INDEX_DATABASE,
    OPEN_INDEX_KEY,
    Tree,
    _open_index,
    read_open_index,
)
from retinue.persistence.store import Store

from . import CHILD_ENV, REPO, Trees

LEAF = Profile("leaf", runner=lambda turn: f"done:{turn.task}")
LEAD = Profile("lead", runner=lambda turn: f"done:{turn.task}", subagents=("leaf",))


def _fails(turn: Any) -> str:
    raise RuntimeError("down")


FLAKY = Profile(
    "flaky", runner=_fails, restart=Restart(on=("failed",), backoff_s=3600.0, backoff_max_s=3600.0)
)
PROFILES = [LEAD, LEAF, FLAKY]


@pytest.fixture
def trees(monkeypatch: pytest.MonkeyPatch) -> Iterator[Trees]:
    monkeypatch.setattr(_open_index, "OPEN_INDEX_AT", 1)
    yield Trees(monkeypatch)


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each open took an index (True) or walked the agents (False)."""
    seen: list[bool] = []
    read = read_open_index

    def reading(store: Store, cap: int | None) -> Any:
        index = read(store, cap)
        seen.append(index is not None)
        return index

    monkeypatch.setattr(_boot, "read_open_index", reading)
    return seen


def _build(folder: Path) -> dict[str, str]:
    """Leads with leaves (one closed, one spawned with a key), a restarting agent; close."""
    with Runtime.open(folder, profiles=PROFILES) as rt:
        ids: dict[str, str] = {}
        for lead in ("a", "b"):
            ids[lead] = rt.spawn("lead", lead, name=lead).id
            for leaf in ("x", "y"):
                key = f"{lead}{leaf}" if leaf == "x" else None
                made = rt.spawn("leaf", leaf, parent=ids[lead], name=leaf, idempotency_key=key)
                ids[f"{lead}/{leaf}"] = made.id
        rt.wait_idle(timeout=20)
        rt.close(ids["b/y"])
        ids["flaky"] = rt.spawn("flaky", "go", name="flaky").id
        for _ in range(400):  # its first attempt fails; the restart waits an hour
            if rt.get("flaky").state is AgentState.RESTARTING:
                break
            time.sleep(0.05)
        assert rt.get("flaky").state is AgentState.RESTARTING
    return ids


def _indexes(tree: Tree) -> dict[str, Any]:
    """What an open builds of the agents: every index, and every agent's record."""
    return {
        "state_counts": dict(tree.state_counts),
        "live_profiles": dict(tree.live_profiles),
        "live_paths": dict(tree.live_paths),
        "children": {key: set(kids) for key, kids in tree.children.items() if kids},
        "top_of": dict(tree.top_of),
        "busy": set(tree.busy),
        "closed": dict(tree.closed),
        "stored_children": dict(tree.stored_children),
        "tree_count": dict(tree.tree_count),
        "spawn_keys": dict(tree.spawn_keys),
        "live_count": tree.live_count,
        "held": set(dict.keys(tree.agents)),
        "settled": dict(tree.agents.settled),
        "records": dict(tree.agents.items()),
    }


def _has_index(folder: Path) -> bool:
    store = Store(folder, readonly=True)
    try:
        return store.get(OPEN_INDEX_DATABASE, OPEN_INDEX_KEY) is not None
    finally:
        store.close()


def _moved_past(folder: Path) -> None:
    """Commit one write after the index, as another LMDB writer could."""
    store = Store(folder)
    try:
        store.write_now([("meta", b"another-write", b"1")])
    finally:
        store.close()


def test_an_open_after_a_clean_shutdown_takes_the_index_and_builds_the_walks_tree(
    tmp_path: Path, trees: Trees, taken: list[bool]
) -> None:
    folder, walked = tmp_path / "store", tmp_path / "walked"
    ids = _build(folder)
    assert _has_index(folder), "the clean shutdown kept the index"
    shutil.copytree(folder, walked)
    _moved_past(walked)
    with Runtime.open(walked, profiles=PROFILES):
        by_walk = _indexes(trees.built[-1])
    with Runtime.open(folder, profiles=PROFILES) as rt:
        indexed = trees.built[-1]
        assert _indexes(indexed) == by_walk, "the index builds the walk's tree"
        assert set(dict.keys(indexed.agents)) == {ids["flaky"]}, "only the busy one is held"
        assert rt.get("a/x").id == ids["a/x"]
        again = rt.spawn("leaf", "x", parent=ids["a"], name="x", idempotency_key="ax")
        assert again.id == ids["a/x"], "the spawn key came back with the index"
        assert rt.get("flaky").state is AgentState.RESTARTING
        assert rt.get(ids["b/y"]).state is AgentState.CLOSED
        rt.follow_up(ids["a/y"], "more")
        rt.wait(ids["a/y"], timeout=20)  # the first turn's completion, never received
        assert rt.wait(ids["a/y"], timeout=20).output == "done:more"
    assert taken == [False, False, True], "built, walked (moved past), taken"
    assert _has_index(folder), "and the next clean shutdown keeps a new one"


def test_an_index_with_an_agent_deeper_than_the_cap_is_not_taken(
    tmp_path: Path, trees: Trees, taken: list[bool]
) -> None:
    folder = tmp_path / "store"
    _build(folder)
    with Runtime.open(folder, profiles=[LEAF, FLAKY], limits=Limits(depth_cap=1)) as rt:
        assert sorted(a.path for a in rt.agents()) == ["/root/a", "/root/b", "/root/flaky"]
        assert {d.code for d in rt.diagnostics} == {"too_deep"}
    assert taken == [False, False]


def test_an_index_the_store_moved_past_is_not_taken(
    tmp_path: Path, trees: Trees, taken: list[bool]
) -> None:
    folder = tmp_path / "store"
    _build(folder)
    _moved_past(folder)
    assert _has_index(folder)
    with Runtime.open(folder, profiles=PROFILES):
        tree = trees.built[-1]
    assert len(tree.agents) == 7 and taken == [False, False]


def test_an_index_that_does_not_decode_is_not_taken(
    tmp_path: Path, trees: Trees, taken: list[bool]
) -> None:
    folder = tmp_path / "store"
    _build(folder)
    damage = (  # written over in place, in the index's own transaction id's place: a
        # newer or damaged index the open cannot read (the txn id moves too; both refuse)
        "import lmdb, sys; env = lmdb.open(sys.argv[1], max_dbs=16); "
        "txn = env.begin(write=True, db=env.open_db(b'open_index')); "
        "txn.put(b'tree', b'\\xc1'); txn.commit()"
    )
    subprocess.run([sys.executable, "-c", damage, str(folder)], check=True, env=CHILD_ENV)
    with Runtime.open(folder, profiles=PROFILES) as rt:
        assert len(trees.built[-1].agents) == 7
        assert rt.get("a/x").state is AgentState.COMPLETED
    assert taken == [False, False]


def test_a_crash_leaves_no_fresh_index(tmp_path: Path, trees: Trees) -> None:
    folder = tmp_path / "store"
    _build(folder)
    crash = (
        "import os, sys; from retinue import Profile, Runtime; "
        "rt = Runtime.open(sys.argv[1], profiles=[Profile('leaf', runner=lambda t: 'x')]); "
        "rt.wait(rt.spawn('leaf', 'late', name='late').id, timeout=20); os._exit(9)"
    )
    done = subprocess.run(
        [sys.executable, "-c", crash, str(folder)], env=CHILD_ENV, cwd=REPO, check=False
    )
    assert done.returncode == 9
    assert not _has_index(folder), "the crashed open deleted it and kept none"
    with Runtime.open(folder, profiles=PROFILES) as rt:
        assert rt.get("late").output == "x"
        assert len(trees.built[-1].agents) == 8
