"""The store: map growth, schema versions and migrations, durability modes, big stores."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest

from retinue import (
    Durability,
    InvalidArgument,
    Limits,
    Profile,
    Runtime,
    StoreError,
    StoreLocked,
    StoreVersionError,
)
from retinue.persistence import migrations
from retinue.persistence.migrations import SCHEMA_KEY, upgrade
from retinue.persistence.store import DATABASES, Store, Write
from retinue.protocol import paths
from retinue.protocol.messages import AgentState
from retinue.protocol.records import SCHEMA_VERSION, CompletionRecord, MessageRecord

from . import (
    PROMPT_S,
    Child,
    Recorder,
    agent,
    agent_write,
    completions_of,
    decode_db,
    encode,
    read_db,
    write_store,
)

KIB = 1024


def worker_rt(path: Path, runner: Recorder | None = None, **options: Any) -> Runtime:
    """Open a writer runtime with one ``worker`` profile."""
    return Runtime.open(path, profiles=[Profile("worker", runner=runner or Recorder())], **options)


def raw_env(path: Path) -> lmdb.Environment:
    """Open the store's LMDB environment directly (no retinue involved)."""
    path.mkdir(parents=True, exist_ok=True)
    return lmdb.open(str(path), max_dbs=len(DATABASES) + 2, map_size=16 * 1024 * KIB)


def stored_version(path: Path) -> int | None:
    """Return the schema version stamped in a closed store (None if there is none)."""
    raw = read_db(path, "meta").get(SCHEMA_KEY)
    return None if raw is None else msgspec.msgpack.decode(raw, type=int)


# -- map growth ------------------------------------------------------------------------


def test_a_tiny_map_grows_by_itself(tmp_path: Path) -> None:
    store = tmp_path / "store"
    limits = Limits(mailbox_capacity=5000, max_agents=1000, fanout_cap=100, max_tree_agents=200)
    count, size = 2000, 8 * KIB
    errors: list[BaseException] = []
    with worker_rt(store, map_size=64 * KIB, limits=limits) as rt:
        sink = rt.spawn("worker", "sink", name="sink")
        rt.wait(sink.id, timeout=PROMPT_S)

        def send(part: int) -> None:
            try:
                for n in range(part, count, 8):
                    rt.send(sink.id, f"{n:06d}".ljust(size, "."))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=send, args=(p,)) for p in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(PROMPT_S * 2)
        assert not errors, errors[:3]
        # Many agents too (agent records, completions), on the grown map.
        for n in range(50):
            rt.spawn("worker", "t" * 4000, name=f"a{n}")
    messages = decode_db(store, "messages", MessageRecord).values()
    contents = sorted(m.message.content for m in messages)
    assert contents == [f"{n:06d}".ljust(size, ".") for n in range(count)]
    assert (store / "data.mdb").stat().st_size > count * size
    runner = Recorder()
    with worker_rt(store, runner, limits=limits) as rt:
        assert rt.diagnostics == []
        assert len(rt.agents()) == 51
        rt.follow_up(sink.id, "read them")
        assert rt.wait(sink.id, timeout=PROMPT_S).generation == 2
        (turn,) = runner.of(sink.id)
        assert sorted(m.content for m in turn.messages) == contents


@pytest.mark.parametrize("map_size", [4 * KIB, 16 * KIB, 32 * KIB, 64 * KIB])
def test_any_tiny_initial_map_opens_and_grows(tmp_path: Path, map_size: int) -> None:
    store = tmp_path / "store"
    with worker_rt(store, map_size=map_size) as rt:
        info = rt.spawn("worker", "t" * 10_000, name="w")
        rt.wait(info.id, timeout=PROMPT_S)
        # One transition bigger than the whole initial map, several times over.
        rt.send(info.id, "m" * 16_000)
    with worker_rt(store, map_size=map_size) as rt:
        assert [a.name for a in rt.agents()] == ["w"]


def test_a_single_commit_larger_than_the_map(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", map_size=64 * KIB)
    try:
        big: list[Write] = [("messages", f"k{n}".encode(), bytes(64 * KIB)) for n in range(40)]
        store.write_now(big)
        assert store.get("messages", b"k39") == bytes(64 * KIB)
    finally:
        store.close()


# -- schema version ----------------------------------------------------------------------


def test_a_new_store_is_stamped_with_the_current_version(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with worker_rt(store):
        pass
    assert stored_version(store) == SCHEMA_VERSION


@pytest.mark.parametrize("readonly", [False, True], ids=["writer", "reader"])
def test_a_store_from_a_newer_schema_is_refused(tmp_path: Path, readonly: bool) -> None:
    store = tmp_path / "store"
    write_store(store, [agent_write(agent("a", "/root/a"))])
    newer = SCHEMA_VERSION + 1
    env = raw_env(store)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(SCHEMA_KEY, msgspec.msgpack.encode(newer), db=meta)
    env.close()
    for _ in range(2):  # the refusal leaves no lock behind: the second try is refused alike
        with pytest.raises(StoreVersionError) as caught:
            if readonly:
                Runtime.open(store, readonly=True)
            else:
                worker_rt(store)
        assert str(newer) in str(caught.value)
        assert str(SCHEMA_VERSION) in str(caught.value)
    assert stored_version(store) == newer, "the newer store is left as it was"


def test_a_store_with_data_but_no_version_is_migrated_and_stamped(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = raw_env(store)
    dbs = {name: env.open_db(name.encode()) for name in DATABASES}
    old = agent("old", "/root/old", state="running")
    with env.begin(write=True) as txn:
        txn.put(b"old", encode(old), db=dbs["agents"])
    env.close()
    assert stored_version(store) is None
    with worker_rt(store) as rt:
        assert [(a.id, a.state) for a in rt.agents()] == [("old", "interrupted")]
        assert all(d.code not in ("undecodable", "orphan") for d in rt.diagnostics)
    assert stored_version(store) == SCHEMA_VERSION


def test_an_empty_unversioned_store_is_stamped_without_migrating(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = raw_env(store)
    for name in DATABASES:
        env.open_db(name.encode())
    env.close()
    with worker_rt(store) as rt:
        assert rt.diagnostics == []
    assert stored_version(store) == SCHEMA_VERSION


def test_upgrade_runs_every_step_in_order_inside_the_transaction(tmp_path: Path) -> None:
    env = raw_env(tmp_path / "env")
    dbs = {name: env.open_db(name.encode()) for name in DATABASES}
    ran: list[int] = []

    def step(version: int) -> migrations.Migration:
        def run(txn: Any, databases: Mapping[str, Any]) -> None:
            assert databases is dbs
            ran.append(version)
            txn.put(f"step{version}".encode(), b"done", db=databases["meta"])

        return run

    steps = {v: step(v) for v in range(4)}
    with env.begin(write=True) as txn:
        assert upgrade(txn, dbs, 1, 4, steps) == [1, 2, 3]
    assert ran == [1, 2, 3]
    with env.begin() as txn:
        assert txn.get(b"step0", db=dbs["meta"]) is None
        assert txn.get(b"step3", db=dbs["meta"]) == b"done"
    with env.begin(write=True) as txn:
        assert upgrade(txn, dbs, 4, 4, steps) == []
    assert ran == [1, 2, 3]
    env.close()


def test_upgrade_refuses_a_missing_step_and_a_newer_store(tmp_path: Path) -> None:
    env = raw_env(tmp_path / "env")
    dbs = {name: env.open_db(name.encode()) for name in DATABASES}
    ran: list[int] = []
    steps: dict[int, migrations.Migration] = {
        0: lambda txn, d: ran.append(0),
        2: lambda txn, d: ran.append(2),
    }
    with env.begin(write=True) as txn:
        with pytest.raises(StoreVersionError, match="1"):
            upgrade(txn, dbs, 0, 3, steps)
        assert 2 not in ran, "no step past the gap runs"
        with pytest.raises(StoreVersionError):
            upgrade(txn, dbs, 5, 3, steps)
    env.close()


def test_the_shipped_migrations_reach_the_current_version(tmp_path: Path) -> None:
    env = raw_env(tmp_path / "env")
    dbs = {name: env.open_db(name.encode()) for name in DATABASES}
    with env.begin(write=True) as txn:
        assert upgrade(txn, dbs, 0, SCHEMA_VERSION) == list(range(SCHEMA_VERSION))
    env.close()


# -- durability ---------------------------------------------------------------------------

DURABLE_WRITER = r"""
import sys
from retinue import Limits, Profile, Runtime
rt = Runtime.open(sys.argv[1], profiles=[Profile("worker", runner=lambda turn: "ok")],
                  durability=sys.argv[2], limits=Limits(max_agents=100000))
n = 0
while True:
    n += 1
    info = rt.spawn("worker", f"task {n}")
    sent = rt.send(info.id, f"message {n}")
    # One write per line: unbuffered, print writes its words apart, and a kill between
    # them would leave a line cut short.
    sys.stdout.write(f"ACK {info.id} {sent.id}\n")
    sys.stdout.flush()
"""


@pytest.mark.parametrize("durability", ["buffered", "full"])
def test_acknowledged_writes_survive_a_killed_writer(tmp_path: Path, durability: str) -> None:
    store = tmp_path / "store"
    with Child(DURABLE_WRITER, store, durability) as child:
        for _ in range(60):
            child.expect("ACK")
        child.kill()
    acks = [line.split()[1:] for line in child.lines if line.startswith("ACK ")]
    assert len(acks) >= 60
    with worker_rt(store) as rt:
        assert rt.diagnostics == []
        found = {a.id for a in rt.agents()}
    messages = {m.message.id for m in decode_db(store, "messages", MessageRecord).values()}
    for agent_id, message_id in acks:
        assert agent_id in found
        assert message_id in messages


@pytest.mark.parametrize("durability", ["buffered", Durability.BUFFERED, "full", Durability.FULL])
def test_both_modes_work_end_to_end(tmp_path: Path, durability: Any) -> None:
    store = tmp_path / "store"
    runner = Recorder()
    with worker_rt(store, runner, durability=durability) as rt:
        info = rt.spawn("worker", "first", name="w")
        assert rt.wait(info.id, timeout=PROMPT_S).output == "done:first"
        rt.send(info.id, "note")
        rt.follow_up(info.id, "second")
        assert rt.wait(info.id, timeout=PROMPT_S).output == "done:second"
    with worker_rt(store, runner, durability=durability) as rt:
        (again,) = rt.agents()
        assert (again.id, again.state, again.generation) == (info.id, "completed", 2)
    assert [m.content for m in runner.of(info.id)[1].messages] == ["note"]
    assert [c.completion.generation for c in completions_of(store, info.id)] == [1, 2]


@pytest.mark.parametrize("bad", ["fast", "FULL ", "", None, 1])
def test_an_unknown_durability_is_an_invalid_argument(tmp_path: Path, bad: Any) -> None:
    store = tmp_path / "store"
    with pytest.raises(InvalidArgument):
        worker_rt(store, durability=bad)
    with pytest.raises(InvalidArgument):
        Store(store, durability=bad)
    with worker_rt(store) as rt, pytest.raises(StoreLocked):
        worker_rt(store)
    assert rt.closed


def test_group_commit_shares_commits_and_answers_after_them(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    seen: list[bool] = []
    done = threading.Event()
    total = 300

    def callback_for(key: bytes) -> Any:
        def callback(error: BaseException | None) -> None:
            assert error is None
            seen.append(store.get("agents", key) is not None)
            if len(seen) == total:
                done.set()

        return callback

    try:
        for n in range(total):
            key = f"k{n}".encode()
            writes: list[Write] = [("agents", key, b"v")]
            store.submit(writes, callback_for(key))
        assert done.wait(PROMPT_S)
        assert seen == [True] * total, "every callback ran after its commit"
        assert store.stats.transitions == total
        assert store.stats.commits < total, "transitions queued together share commits"
    finally:
        store.close()


def test_submit_group_commits_once_in_order_and_keeps_each_keys_last_write(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "store")
    order: list[tuple[int, bytes | None]] = []
    done = threading.Event()

    def callback_for(n: int) -> Any:
        def callback(error: BaseException | None) -> None:
            assert error is None
            order.append((n, store.get("agents", b"a")))
            if n == 3:
                done.set()

        return callback

    try:
        store.submit_group(
            [
                ([("agents", b"a", b"first"), ("agents", b"b", b"x")], callback_for(1)),
                ([("agents", b"a", b"second")], callback_for(2)),
                ([("agents", b"b", None)], callback_for(3)),
            ]
        )
        assert done.wait(PROMPT_S)
        assert order == [(1, b"second"), (2, b"second"), (3, b"second")]
        assert store.get("agents", b"b") is None  # deleted by the group's last write of it
        assert (store.stats.commits, store.stats.transitions, store.stats.writes) == (1, 3, 2)
    finally:
        store.close()


def test_submit_group_on_a_closed_store_is_a_store_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.submit_group([([("agents", b"a", b"v")], lambda error: None)])


# -- a big store -----------------------------------------------------------------------------


def build_store(folder: Path, agents: int) -> set[str]:
    """Write ``agents`` agents, tops with 7 children each, 1% running; return the running."""
    store = Store(folder, durability="buffered")
    batch: list[Write] = []
    running: set[str] = set()
    made = 0
    while made < agents:
        top_id = uuid.uuid4().hex
        top_path = paths.join(paths.ROOT, paths.derive_name(top_id))
        family: list[tuple[str, str | None, str]] = [(top_id, None, top_path)]
        for _ in range(min(7, agents - made - 1)):
            kid_id = uuid.uuid4().hex
            family.append((kid_id, top_id, paths.join(top_path, paths.derive_name(kid_id))))
        for agent_id, parent_id, path in family:
            made += 1
            state = AgentState.COMPLETED
            if made % 100 == 0:
                state = AgentState.RUNNING
                running.add(agent_id)
            batch.append(agent_write(agent(agent_id, path, parent_id, state=state)))
        if len(batch) >= 5000:
            store.write_now(batch)
            batch = []
    store.write_now(batch)
    store.close()
    return running


def test_a_store_of_20000_agents_reopens_whole_and_lazily(tmp_path: Path) -> None:
    store = tmp_path / "store"
    running = build_store(store, 20_000)
    runner = Recorder()
    threads_before = threading.active_count()
    with worker_rt(store, runner, limits=Limits(max_agents=100_000)) as rt:
        # Restore is lazy: no actor (thread) per agent, and no turn runs.
        assert threading.active_count() - threads_before < 16
        assert rt.diagnostics == []
        infos = rt.agents()
        assert len(infos) == 20_000
        interrupted = {i.id for i in infos if i.state == "interrupted"}
        assert interrupted == running
        assert sum(i.state == "completed" for i in infos) == 20_000 - len(running)
        assert runner.count() == 0
    completions = decode_db(store, "completions", CompletionRecord).values()
    assert sorted(c.completion.id for c in completions) == sorted(f"{i}:1" for i in running)
