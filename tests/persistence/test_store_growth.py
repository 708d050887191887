"""The store file levels off under churn: compaction's deletes do not grow it.

LMDB copies every page a transaction changes to a free page and can reuse the
pages it frees only after it commits: one transaction deleting a compaction's
thousands of records, spread over the key space, needed that many free pages
at once, and the file's high-water mark grew by them (a churned store ended
at ~1.4x a compacting copy of itself). The writer now commits a compaction's
deletes in small transactions of their own (``spread`` writes). The long
version of the churn is ``python -m stress --only store_growth``.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from retinue import Runtime
from retinue.persistence.store import Store
from stress.store_growth import MAX_RATIO, Scenario, run

from . import PROMPT_S, Child


def test_tree_churn_levels_off_near_a_compacting_copy() -> None:
    """Trees of a lead and 3 leaves, churned past retention: the file stays near its copy."""
    row = run(Scenario("ci", tops=1_000, retain=1_000), samples=2)
    assert row["ratio_to_copy"] <= MAX_RATIO, row


def test_single_agent_churn_levels_off_near_a_compacting_copy() -> None:
    """The same for single agents (no children), more of them per compaction."""
    row = run(Scenario("ci", tops=3_000, leaves=0, retain=1_000), samples=2)
    assert row["ratio_to_copy"] <= MAX_RATIO, row


def test_spread_writes_commit_in_small_transactions_after_the_writes(tmp_path: Path) -> None:
    """A transition's spread writes follow its writes, a few per commit; then it is answered."""
    store = Store(tmp_path / "s", durability="buffered")
    try:
        store.write_now([("meta", f"k{i:04}".encode(), b"v" * 200) for i in range(2_000)])
        before = store.stats.commits
        answered: list[object] = []
        spread = [("meta", f"k{i:04}".encode(), None) for i in range(2_000)]
        store.submit([("meta", b"own", b"1")], answered.append, spread)
        store.flush()
        assert answered == [None]
        assert store.get("meta", b"own") == b"1"
        assert store.get("meta", b"k1999") is None
        assert store.stats.commits - before > 10  # not one transaction of 2,000 deletes
    finally:
        store.close()


def test_what_follows_spread_writes_is_committed_after_them(tmp_path: Path) -> None:
    """A transition queued behind spread writes sees them done: a key they delete, rewritten."""
    store = Store(tmp_path / "s", durability="buffered")
    try:
        store.write_now([("meta", f"k{i:04}".encode(), b"old") for i in range(500)])
        order: list[str] = []
        spread = [("meta", f"k{i:04}".encode(), None) for i in range(500)]
        store.submit_group(
            [
                ([], lambda error: order.append("compaction"), spread),
                ([("meta", b"k0499", b"new")], lambda error: order.append("rewrite")),
            ]
        )
        store.flush()
        assert order == ["compaction", "rewrite"]
        assert store.get("meta", b"k0499") == b"new"
    finally:
        store.close()


CUT_CHILD = r"""
import os, signal, sys
from retinue import Limits, Profile, Runtime
import retinue.persistence.writer as writer

folder, cut_at = sys.argv[1], int(sys.argv[2])

def lead(turn):
    turn.run_many([("leaf", "a"), ("leaf", "b")], timeout=60)
    return "lead"

profiles = [
    Profile("lead", subagents=["leaf"], runner=lead, wake_on_completion=False),
    Profile("leaf", runner=lambda turn: "leaf"),
]
with Runtime.open(folder, profiles=profiles, durability="buffered") as rt:
    for _ in range(150):
        top = rt.spawn("lead", "go")
        rt.wait(top.id, timeout=60)
        rt.close_tree(top.id)
print("CHURNED", flush=True)

commit = writer.Writer._commit
deletes = [0]

def cutting(self, writes, *, timed=False):
    answered = commit(self, writes, timed=timed)
    if writes and all(value is None for _, _, value in writes):
        deletes[0] += 1
        if deletes[0] == cut_at:
            print("CUT", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    return answered

writer.Writer._commit = cutting
rt = Runtime.open(folder, profiles=profiles, limits=Limits(retain_closed_agents=1))
print("REPORT", rt.compact(), flush=True)
"""


@pytest.mark.parametrize(("cut_at", "agents_left"), [(1, 450), (40, 450), (100, None)])
def test_a_crash_inside_a_spread_compaction_leaves_a_consistent_store(
    tmp_path: Path, cut_at: int, agents_left: int | None
) -> None:
    """Killed between two of a compaction's delete transactions, the store opens clean.

    The deletes are ordered so that any prefix is consistent: an agent's
    messages, completions, transcript and kept generations before its record,
    leaves before parents (450 agents: about 84 transactions of 16 other
    deletes, then 28 of agents). Reopened, restore has nothing to skip or repair.
    """
    folder = tmp_path / "store"
    with Child(CUT_CHILD, folder, str(cut_at)) as child:
        child.expect("CHURNED", timeout=PROMPT_S * 3)
        child.expect("CUT")
        assert child.finish() == -signal.SIGKILL
    with Runtime.open(folder, readonly=True) as rt:
        assert list(rt.diagnostics) == []
        left = len(rt.agents(include_closed=True))
    if agents_left is not None:
        assert left == agents_left
    else:
        assert 0 < left < 450  # some went, not all
