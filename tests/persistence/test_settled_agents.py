"""An open leaves the agents nothing runs for in the store; the tree reads them when asked.

The writer's open decodes a sound store's settled agents as their places only
(where each sits, its state and keys) and holds none of their records: a get,
a path lookup, a follow-up, a listing, a close and a compaction each read the
record from the store, and an agent the tree changes is held from then on. A
command that fails after reading or removing a settled agent leaves the table
as it was. A settled record damaged after the open is a typed error, never a
wrong answer.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retinue import AgentState, Limits, Profile, Runtime
from retinue.actors.tree._agents import AGENT_CACHE, AgentTable
from retinue.actors.tree._journal import Journal
from retinue.errors import StoreCorrupted
from retinue.persistence.placed import AgentPlace
from retinue.persistence.restore import restore
from retinue.persistence.store import Snapshot, Store
from retinue.protocol.records import AgentRecord

from . import Trees, agent

PROFILES = [
    Profile("w", runner=lambda turn: f"done:{turn.task}", subagents=("leaf",)),
    Profile("leaf", runner=lambda turn: f"done:{turn.task}"),
]


@pytest.fixture
def trees(monkeypatch: pytest.MonkeyPatch) -> Iterator[Trees]:
    yield Trees(monkeypatch)


def _settled_store(folder: Path, count: int) -> list[str]:
    """Make ``count`` completed agents whose completions the host received (the first
    with a child) and close the runtime; return their ids, the child's last."""
    with Runtime.open(folder, profiles=PROFILES) as rt:
        ids = [rt.spawn("w", f"t{i}", name=f"a{i}").id for i in range(count)]
        kid = rt.spawn("leaf", "kid", parent=ids[0], name="kid")
        for agent_id in ids:
            rt.wait(agent_id, timeout=20)
        rt.wait_idle(timeout=20)
    return [*ids, kid.id]


def test_an_open_holds_no_settled_record_and_reads_each_when_asked(
    tmp_path: Path, trees: Trees
) -> None:
    folder = tmp_path / "store"
    ids = _settled_store(folder, 5)
    with Runtime.open(folder, profiles=PROFILES) as rt:
        table = trees.built[-1].agents
        assert dict.__len__(table) == 0, "nothing runs: no record is held"
        assert sorted(table.settled) == sorted(ids) and len(table) == len(ids)
        assert ids[1] in table and "nobody" not in table
        assert table.get("nobody") is None
        with pytest.raises(KeyError):
            table["nobody"]
        info = rt.get("a1")  # a path lookup reads the record
        assert (info.id, info.state, info.output) == (ids[1], AgentState.COMPLETED, "done:t1")
        assert rt.get("a0/kid").id == ids[-1]
        assert sorted(a.id for a in rt.agents()) == sorted(ids)
        assert [a.path for a in rt.agents(limit=2)] == ["/root/a0", "/root/a0/kid"]
        assert dict.__len__(table) == 0, "reads hold nothing"
        rt.follow_up(ids[2], "again")
        rt.wait_idle(timeout=20)
        assert rt.get(ids[2]).output == "done:again"
        assert ids[2] in dict.keys(table) and ids[2] not in table.settled, "changed: held"
        assert len(table) == len(ids)
        rt.close(ids[3])
        assert rt.get(ids[3]).state is AgentState.CLOSED
    with Runtime.open(folder, profiles=PROFILES) as rt:
        assert rt.get(ids[2]).output == "done:again"
        assert rt.get(ids[3]).state is AgentState.CLOSED
        assert len(trees.built[-1].agents.settled) == len(ids)


def test_compaction_removes_settled_closed_agents(tmp_path: Path, trees: Trees) -> None:
    folder = tmp_path / "store"
    ids = _settled_store(folder, 4)
    with Runtime.open(folder, profiles=PROFILES) as rt:
        for agent_id in ids[1:4]:
            rt.close(agent_id)
    limits = Limits(retain_closed_agents=1)
    kept = sorted([ids[0], ids[3], ids[4]])  # the newest closed one is retained
    with Runtime.open(folder, profiles=PROFILES, limits=limits) as rt:
        table = trees.built[-1].agents
        assert set(table.settled) == set(ids)
        report = rt.compact()
        assert report.agents == 2
        assert sorted(table.settled) == kept, "the oldest closed ones went"
        assert sorted(a.id for a in rt.agents(include_closed=True)) == kept
    store = Store(folder, readonly=True)
    try:
        stored = {key.decode() for key, _ in store.snapshot(("agents",)).records["agents"]}
    finally:
        store.close()
    assert sorted(stored) == kept


def test_a_settled_record_damaged_after_the_open_is_a_typed_error(
    tmp_path: Path, trees: Trees
) -> None:
    folder = tmp_path / "store"
    ids = _settled_store(folder, 2)
    with Runtime.open(folder, profiles=PROFILES) as rt:
        store = trees.built[-1].agents
        assert ids[1] in store.settled
        damage = (  # another process writes over the record (LMDB allows it: one writer at once)
            "import lmdb, sys; env = lmdb.open(sys.argv[1], max_dbs=16); "
            "txn = env.begin(write=True, db=env.open_db(b'agents')); "
            "txn.put(sys.argv[2].encode(), b'\\xc1'); txn.commit()"
        )
        subprocess.run([sys.executable, "-c", damage, str(folder), ids[1]], check=True)
        with pytest.raises(StoreCorrupted, match="does not decode"):
            rt.get(ids[1])
        assert rt.get("a0").id == ids[0], "the others still read"


# -- the table on its own: a journaled command rolled back leaves it as it was ------------


class _Reads:
    """A store of records by id, counting reads."""

    def __init__(self, records: dict[str, AgentRecord]) -> None:
        self.records = records
        self.reads = 0

    def agent(self, agent_id: str) -> AgentRecord:
        self.reads += 1
        return self.records[agent_id]

    def some(self, agent_ids: list[str]) -> list[AgentRecord]:
        self.reads += len(agent_ids)
        return [self.records[key] for key in agent_ids]


_IDS = [f"id{i}" for i in range(6)]
_OPS = st.lists(
    st.tuples(st.sampled_from(["get", "put", "pop", "unswept"]), st.sampled_from(_IDS)),
    max_size=12,
)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(settled=st.sets(st.sampled_from(_IDS)), commands=st.lists(_OPS, max_size=4))
def test_a_table_reads_like_a_dict_and_a_rolled_back_command_leaves_it_as_it_was(
    settled: set[str], commands: list[list[tuple[str, str]]]
) -> None:
    stored = {key: agent(key, f"/root/{key}", state=AgentState.COMPLETED) for key in settled}
    reads = _Reads(stored)
    journal = Journal()
    table = AgentTable(journal)
    table.settle(reads, {key: f"/root/{key}" for key in sorted(settled)})
    model: dict[str, AgentRecord] = dict(stored)
    for number, ops in enumerate(commands):
        before = (dict(model),)
        journal.begin("Command")
        for op, key in ops:
            if op == "get":
                assert table.get(key) == model.get(key)
                assert (key in table) is (key in model)
            elif op == "put":  # as Tree.put_agent changes a record
                new = agent(key, f"/root/{key}", state=AgentState.RUNNING)
                old = table.get(key)
                undo = (dict.__setitem__, (table, key, old)) if old else (dict.pop, (table, key))
                journal.log(undo)
                if table.settled:
                    table.hold(key)
                dict.__setitem__(table, key, new)
                model[key] = new
            elif op == "pop":
                assert table.pop(key, None) == model.pop(key, None)
            else:
                assert all(r.id in model for r in table.unswept(2))
            assert len(table) == len(model) and sorted(table) == sorted(model)
        if number % 2:  # as a failed command: every change undone
            journal.roll_back()
            model = before[0]
        else:
            journal.keep()
        # Held or settled alike: the table reads as the model.
        assert len(table) == len(model) and sorted(table) == sorted(model)
        assert all(table.get(key) == model[key] for key in model)
        assert not any(key in table for key in set(_IDS) - set(model))
        assert not set(dict.keys(table)) & set(table.settled)
        assert dict(table.items()) == model
        assert sorted(record.id for record in table.values()) == sorted(model)
        assert sorted(table.page_keys()) == sorted((r.path, r.id) for r in model.values())
    assert len(table._cache) <= AGENT_CACHE


def test_the_cache_keeps_the_newest_reads_only() -> None:
    stored = {f"id{i}": agent(f"id{i}", f"/root/n{i}") for i in range(AGENT_CACHE + 10)}
    reads = _Reads(stored)
    table = AgentTable(Journal())
    table.settle(reads, {key: record.path for key, record in stored.items()})
    for key in stored:
        assert table[key] is table[key]
    assert reads.reads == len(stored) and len(table._cache) == AGENT_CACHE
    table.get("id0")
    assert reads.reads == len(stored) + 1, "the oldest read went from the cache"
    table.read_ahead(["id1", "id2", "id0", "nobody"])  # a page's: the missing ones at once
    assert reads.reads == len(stored) + 3 and len(table._cache) == AGENT_CACHE
    assert table["id1"].id == "id1" and reads.reads == len(stored) + 3


def test_a_place_has_its_agent_records_fields_by_the_same_names_and_types() -> None:
    record = {field.name: field.type for field in msgspec.structs.fields(AgentRecord)}
    for field in msgspec.structs.fields(AgentPlace):
        assert record[field.name] == field.type, field.name


def test_restore_decodes_places_only_for_a_sound_store_and_says_so() -> None:
    lead = agent("lead", "/root/lead", state=AgentState.COMPLETED)
    busy = agent("kid", "/root/lead/kid", "lead", state=AgentState.RUNNING)
    raws = sorted((r.id.encode(), msgspec.msgpack.encode(r)) for r in (lead, busy))
    sound = restore(Snapshot(records={"agents": list(raws)}), None, index=True, places=True)
    assert sound.places and [type(r) for r in sound.agents] == [AgentPlace, AgentRecord]
    assert sound.agents[1] == busy, "a busy agent is decoded whole"
    moved = msgspec.structs.replace(lead, path="/root/elsewhere")  # the walk rewrites it
    raws = sorted((r.id.encode(), msgspec.msgpack.encode(r)) for r in (moved, busy))
    rewritten = restore(Snapshot(records={"agents": raws}), None, index=True, places=True)
    assert not rewritten.places and rewritten.rewritten == [lead]
    assert all(type(r) is AgentRecord for r in rewritten.agents)


def test_a_command_that_fails_after_changing_a_settled_agent_leaves_it_settled(
    tmp_path: Path, trees: Trees
) -> None:
    """A rolled-back command put the settled agent back in the store, not held in memory:
    the supervisor's memory is exactly as before it (the fault reports it exact), at
    every change of the close (the first, before the agent changed, and every later one)."""
    from retinue.errors import InternalError
    from retinue.testing.faults import disarm, faults_seen, inject_fault

    folder = tmp_path / "store"
    ids = _settled_store(folder, 2)
    with Runtime.open(folder, profiles=PROFILES) as rt:
        table = trees.built[-1].agents
        assert ids[1] in table.settled
        failed = 0
        for at in range(1, 50):
            inject_fault(rt, "Close", at=at)
            try:
                closed = rt.close(ids[1])
            except InternalError:
                failed += 1
                assert faults_seen(rt)[-1] == ("Close", True, ()), at
                assert ids[1] in table.settled and ids[1] not in dict.keys(table), at
                continue
            assert disarm(rt), "the close made fewer changes than the fault's point"
            break
        assert failed >= 2, "a fault before and after the settled agent's change"
        assert failed == at - 1 and len(faults_seen(rt)) == failed
        assert closed.state is AgentState.CLOSED  # and it closes after all
        assert ids[1] in dict.keys(table) and ids[1] not in table.settled
