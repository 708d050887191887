"""An open loads only the undelivered completions; the tree reads the others when asked.

Each test settles agents, reopens the store, and then takes one path that needs
a completion delivered before the reopen: a host wait with nothing left, a
lease released after the reopen, a new turn's completion (routing's
exactly-once check), the compaction of old generations and the removal of a
closed agent. A spy counts the store reads, so each test shows the path read
the store (or, for a new turn the host waits on, that the host's receipt mark
spared the read), and the store's ``undelivered`` index is checked against a
scan of the completions after every step.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest

from retinue import Limits, Profile, Runtime
from retinue.actors.system import _boot
from retinue.actors.tree import StoredCompletions, Tree, _completions, load_tree
from retinue.errors import NothingToWaitFor
from retinue.persistence.migrations import SCHEMA_KEY, indexed
from retinue.persistence.store import DATABASES, Snapshot, Store
from retinue.protocol.records import CompletionRecord, completion_key

from . import PROMPT_S, Child, completions_of, write_store

AGE_S = 1e-3  # what the previous runtime settled is older
PROFILES = [Profile("w", runner=lambda turn: f"done:{turn.task}")]


class Spy:
    """The trees the opens built and the agents whose completions were read from the store."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.trees: list[Tree] = []
        self.reads: list[str] = []
        load, of_agent = load_tree, StoredCompletions.of_agent

        def loading(snapshot: Snapshot, cap: int | None, stored: Any = None, **options: Any) -> Any:
            tree, restored = load(snapshot, cap, stored, **options)
            self.trees.append(tree)
            return tree, restored

        def reading(source: StoredCompletions, agent_id: str) -> list[CompletionRecord]:
            self.reads.append(agent_id)
            return of_agent(source, agent_id)

        monkeypatch.setattr(_boot, "load_tree", loading)
        monkeypatch.setattr(StoredCompletions, "of_agent", reading)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spy]:
    yield Spy(monkeypatch)


def index_matches_scan(folder: Path) -> None:
    """Assert the store's ``undelivered`` index lists exactly its undelivered completions."""
    store = Store(folder, readonly=True)
    try:
        snap = store.snapshot(["completions", "undelivered"])
    finally:
        store.close()
    index = {key for key, _ in snap.records["undelivered"]}
    assert index == {key for key, raw in snap.records["completions"] if indexed(raw)}


def settle(folder: Path, limits: Limits | None = None) -> tuple[str, str]:
    """Make an agent whose completion the host received and one it has not; close."""
    with Runtime.open(folder, profiles=PROFILES, limits=limits or Limits()) as rt:
        got = rt.spawn("w", "got")
        rt.wait(got.id, timeout=20)
        left = rt.spawn("w", "left")
        rt.wait_idle(timeout=20)
    index_matches_scan(folder)
    return got.id, left.id


def test_an_open_holds_only_the_undelivered_completions(tmp_path: Path, spy: Spy) -> None:
    folder = tmp_path / "store"
    _, left = settle(folder)
    spy.reads.clear()
    with Runtime.open(folder, profiles=PROFILES) as rt:
        tree = spy.trees[-1]
        assert set(tree.completions) == {left}, "the delivered one stayed in the store"
        assert spy.reads == []
        assert rt.wait(left, timeout=20).output == "done:left"
    index_matches_scan(folder)


def test_a_host_wait_on_a_received_agent_reads_the_store(tmp_path: Path, spy: Spy) -> None:
    folder = tmp_path / "store"
    got, _ = settle(folder)
    spy.reads.clear()
    with Runtime.open(folder, profiles=PROFILES) as rt, pytest.raises(NothingToWaitFor):
        rt.wait(got, timeout=20)
    assert got in spy.reads


def test_a_lease_released_after_a_reopen_gives_the_stored_completion_back(
    tmp_path: Path, spy: Spy
) -> None:
    folder = tmp_path / "store"
    with Runtime.open(folder, profiles=PROFILES) as rt:
        agent = rt.spawn("w", "leased")
        first = rt.wait(agent.id, timeout=20, lease="L1")
    index_matches_scan(folder)
    spy.reads.clear()
    with Runtime.open(folder, profiles=PROFILES) as rt:
        assert rt.release_lease("L1")
        assert agent.id in spy.reads
        tree = spy.trees[-1]
        back = tree.completions[agent.id][1]
        assert not back.delivered and tree.seq >= back.seq > 0, "later arrivals sort after it"
        assert rt.wait(agent.id, timeout=20) == first
        with pytest.raises(NothingToWaitFor):
            rt.wait(agent.id, timeout=20)
    index_matches_scan(folder)


def test_a_new_turn_after_a_reopen_makes_one_completion_and_compaction_reads_the_old(
    tmp_path: Path, spy: Spy
) -> None:
    folder = tmp_path / "store"
    got, _ = settle(folder)
    spy.reads.clear()
    with Runtime.open(folder, profiles=PROFILES) as rt:
        rt.follow_up(got, "again")
        assert rt.wait(got, timeout=20).output == "done:again"
        # The host received generation 1 and the record says generation 2 has not ended:
        # the wait and the settle's exactly-once check need none of the stored ones.
        assert got not in spy.reads, "the receipt mark settles the host wait: no read"
    index_matches_scan(folder)
    assert [r.completion.generation for r in completions_of(folder, got)] == [1, 2]
    spy.reads.clear()
    with Runtime.open(folder, profiles=PROFILES, limits=Limits(retain_age_s=AGE_S)) as rt:
        report = rt.compact()
        assert report.completions == 1
        assert got in spy.reads, "compaction read an agent no command touched"
    index_matches_scan(folder)
    assert [r.completion.generation for r in completions_of(folder, got)] == [2]


def test_removing_a_closed_agent_deletes_its_stored_completions(tmp_path: Path, spy: Spy) -> None:
    folder = tmp_path / "store"
    got, _ = settle(folder)
    with Runtime.open(folder, profiles=PROFILES) as rt:
        rt.follow_up(got, "again")
        rt.wait(got, timeout=20)
        rt.close(got)
    spy.reads.clear()
    with Runtime.open(folder, profiles=PROFILES, limits=Limits(retain_age_s=AGE_S)) as rt:
        assert rt.compact().agents == 1
        assert got in spy.reads
    assert completions_of(folder, got) == []
    index_matches_scan(folder)


def unindex(folder: Path) -> None:
    """Make ``folder`` a schema-1 store: no ``undelivered`` index, stamped version 1."""
    env = lmdb.open(str(folder), max_dbs=len(DATABASES) + 2)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(b"undelivered", txn=txn), delete=True)
        txn.put(SCHEMA_KEY, msgspec.msgpack.encode(1), db=env.open_db(b"meta", txn=txn))
    env.close()


def test_a_store_without_the_index_is_read_whole_then_migrated(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    got, left = settle(folder)
    write_store(folder, [("completions", completion_key("x", 1), b"\xc1")])  # undecodable
    unindex(folder)
    store = Store(folder, readonly=True)  # a reader does not migrate: it reads them all
    try:
        snap = store.snapshot(undelivered_only=True)
        assert not snap.partial and len(snap.records["completions"]) == 3
    finally:
        store.close()
    with Runtime.open(folder, profiles=PROFILES) as rt:
        assert "migrated" in [d.code for d in rt.diagnostics]
        assert "undecodable" in [d.code for d in rt.diagnostics], "still read at the open"
        assert rt.wait(left, timeout=20).output == "done:left"
        with pytest.raises(NothingToWaitFor):
            rt.wait(got, timeout=20)
    index_matches_scan(folder)


RANDOM_CHILD = r"""
import random, sys
from retinue import Limits, Profile, Runtime
from retinue.errors import RetinueError

folder, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)

def lead(turn):
    turn.run_many([("leaf", f"l{i}") for i in range(rng.randint(0, 3))], timeout=60)
    return "lead"

profiles = [
    Profile("lead", subagents=["leaf"], runner=lead, wake_on_completion=False),
    Profile("leaf", runner=lambda turn: "leaf"),
]
limits = Limits(retain_closed_agents=2, retain_age_s=0.05)
with Runtime.open(folder, profiles=profiles, limits=limits) as rt:
    step = 0
    while True:
        tops = [a.id for a in rt.agents() if a.parent_path == "/root" and a.state != "closed"]
        pick = rng.choice(tops) if tops else None
        op = rng.choice(["spawn", "spawn", "wait", "lease", "again", "close", "compact"])
        try:
            if op == "spawn" or pick is None:
                rt.spawn("lead", "go")
            elif op == "wait":
                rt.wait(pick, timeout=5)
            elif op == "lease":
                lease = f"L{seed}-{step}"
                rt.wait(pick, timeout=5, lease=lease)
                rt.release_lease(lease) if rng.random() < 0.5 else rt.ack_lease(lease)
            elif op == "again":
                rt.follow_up(pick, "again")
            elif op == "close":
                rt.close_tree(pick)
            else:
                rt.compact()
        except RetinueError:
            pass
        step += 1
        print("STEP", step, flush=True)
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_index_equals_a_scan_after_random_work_sigkills_and_compactions(
    tmp_path: Path, seed: int
) -> None:
    folder = tmp_path / "store"
    rng = random.Random(seed)
    for round_ in range(4):
        with Child(RANDOM_CHILD, folder, str(seed * 10 + round_)) as child:
            child.expect(f"STEP {rng.randint(3, 40)}", timeout=PROMPT_S * 3)
            child.kill()
        index_matches_scan(folder)
    with Runtime.open(folder, profiles=PROFILES) as rt:  # the last kill's replays written
        rt.wait_idle(timeout=20)
    index_matches_scan(folder)


def test_reads_alone_hold_a_bounded_number_of_agents(
    tmp_path: Path, spy: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_completions, "READ_CACHE", 2)
    folder = tmp_path / "store"
    with Runtime.open(folder, profiles=PROFILES) as rt:
        ids = [rt.spawn("w", f"t{i}").id for i in range(5)]
        for agent_id in ids:
            rt.wait(agent_id, timeout=20)
            rt.follow_up(agent_id, "again")
            rt.wait(agent_id, timeout=20)
    spy.reads.clear()
    with Runtime.open(folder, profiles=PROFILES) as rt:  # young generations: none goes
        tree = spy.trees[-1]
        assert rt.compact().completions == 0
        assert sorted(spy.reads) == sorted(ids), "each agent read once"
        assert list(tree.read_only) == spy.reads[-2:]
        assert set(tree.completions) == set(spy.reads[-2:])
        first = spy.reads[0]
        with pytest.raises(NothingToWaitFor):  # refused: what it read is forgotten with it
            rt.wait(first, timeout=20)
        assert spy.reads[-1] == first
        assert set(tree.read_only) == set(spy.reads[-3:-1])
