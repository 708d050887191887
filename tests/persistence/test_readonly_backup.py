"""Readers beside a writer, and hot backups.

A read-only runtime (in this process) reads consistent snapshots while a
writer (in a child process: py-lmdb opens one environment once per process)
keeps spawning and sending, and refuses every mutating call. ``rt.backup``
copies a live store that opens as the same tree.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import lmdb
import pytest
from support import wait_until

from retinue import (
    AgentInfo,
    InvalidArgument,
    Limits,
    Profile,
    Runtime,
    RuntimeClosed,
    RuntimeState,
    StoreCorrupted,
    StoreError,
    StoreReadOnly,
    UnknownAgent,
)
from retinue.persistence import damage
from retinue.persistence.store import Store
from retinue.protocol import paths
from retinue.protocol.records import MessageRecord

from . import (
    PROMPT_S,
    Child,
    agent,
    agent_write,
    decode_db,
    read_db,
    write_store,
)

WRITER = r"""
import sys
from retinue import Limits, Profile, Runtime
ok = lambda turn: "ok"
profiles = [
    Profile("worker", runner=ok, wake_on_completion=False),
    Profile("lead", subagents=("worker",), runner=ok, wake_on_completion=False),
]
limits = Limits(max_agents=100000, max_tree_agents=100, fanout_cap=100)
rt = Runtime.open(sys.argv[1], profiles=profiles, limits=limits)
tops = []
i = 0
while True:
    i += 1
    top = rt.spawn("lead", f"top {i}")
    tops.append(top.id)
    print("ACK", top.id, flush=True)
    for k in range(3):
        kid = rt.spawn("worker", f"kid {i}.{k}", parent=top.id)
        print("ACK", kid.id, flush=True)
        sent = rt.send(kid.id, f"message {i}.{k}")
        print("MSG", sent.id, flush=True)
    if i % 3 == 0:  # close a whole earlier subtree in one call
        for closed in rt.close_tree(tops[i // 3 - 1]):
            print("CLOSED", closed.id, flush=True)
    if i == 3:
        print("READY", flush=True)
"""

GROWER = r"""
import sys
from retinue import Limits, Profile, Runtime
profiles = [Profile("worker", runner=lambda turn: "ok")]
limits = Limits(mailbox_capacity=1_000_000)
rt = Runtime.open(sys.argv[1], profiles=profiles, limits=limits, map_size=64 * 1024,
                  durability="buffered")
sink = rt.spawn("worker", "sink", name="sink")
print("READY", flush=True)
while True:
    rt.send(sink.id, "x" * 8192)
"""


def acked(child: Child, prefix: str = "ACK ") -> set[str]:
    """Return the ids the child acknowledged so far."""
    return {line.split()[1] for line in list(child.lines) if line.startswith(prefix)}


def check_tree(infos: list[AgentInfo]) -> None:
    """Every agent's parent is there (live under live), ids and paths are unique, depths match.

    Paths are unique even among closed agents here: every writer in this
    module uses derived (id-based) names.
    """
    by_path = {i.path: i for i in infos}
    assert len({i.id for i in infos}) == len(infos)
    assert len(by_path) == len(infos)
    for info in infos:
        assert info.parent_path == paths.ROOT or info.parent_path in by_path, info.path
        assert info.depth == paths.depth(info.path)
        if info.state != "closed" and info.parent_path != paths.ROOT:
            assert by_path[info.parent_path].state != "closed", f"{info.path} under a closed one"


def check_closed(child: Child, infos: list[AgentInfo], before: set[str]) -> None:
    """Every close acknowledged before the snapshot shows as closed in it."""
    state = {i.id: i.state for i in infos}
    for agent_id in before:
        assert state[agent_id] == "closed", agent_id


def test_readers_see_consistent_growing_snapshots_while_a_writer_runs(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Child(WRITER, store) as writer:
        writer.expect("READY")
        seen = 0
        rounds = 0
        while rounds < 12 or seen < 60:
            rounds += 1
            before = acked(writer)
            closed_before = acked(writer, "CLOSED ")
            with Runtime.open(store, readonly=True, limits=Limits()) as rt:
                assert rt.diagnostics == []
                infos = rt.agents(include_closed=True)
                check_tree(infos)
                check_closed(writer, infos, closed_before)
                live = {i.id for i in rt.agents()}
                assert not live & closed_before
                found = {i.id for i in infos}
                assert before <= found, "an acknowledged spawn is missing"
                assert len(found) >= seen, "a later snapshot lost agents"
                seen = len(found)
                sample = random.Random(rounds).sample(sorted(before), min(5, len(before)))
                by_id = {i.id: i for i in infos}
                for agent_id in sample:
                    info = rt.get(agent_id)  # each call reads a newer snapshot
                    assert (info.id, info.path) == (agent_id, by_id[agent_id].path)
                    if info.state == "closed":
                        continue  # a closed agent holds no path
                    try:
                        assert rt.get(info.path).id == agent_id
                    except UnknownAgent:  # only if it was closed meanwhile
                        assert rt.get(agent_id).state == "closed"
        # A runtime kept open reads a new snapshot on every call.
        with Runtime.open(store, readonly=True, limits=Limits()) as rt:
            for _ in range(12):
                before = acked(writer)
                closed_before = acked(writer, "CLOSED ")
                infos = rt.agents(include_closed=True)
                check_tree(infos)
                check_closed(writer, infos, closed_before)
                found = {i.id for i in infos}
                assert before <= found
                assert len(found) >= seen
                seen = len(found)
            # A reader can take a hot backup too.
            before = acked(writer)
            messages_before = acked(writer, "MSG ")
            copy = rt.backup(tmp_path / "copy")
    with Runtime.open(copy, readonly=True, limits=Limits()) as rt:
        assert rt.diagnostics == []
        infos = rt.agents(include_closed=True)
        check_tree(infos)
        assert before <= {i.id for i in infos}
    stored = {r.message.id for r in decode_db(copy, "messages", MessageRecord).values()}
    assert messages_before <= stored


def test_a_reader_survives_the_writer_growing_the_map(tmp_path: Path) -> None:
    store = tmp_path / "store"
    data = store / "data.mdb"
    mib = 1024 * 1024
    with Child(GROWER, store) as writer:
        writer.expect("READY")
        # Past the reader's initial 64 MiB mapping while the writer keeps writing.
        with Runtime.open(store, readonly=True, limits=Limits()) as rt:
            while data.stat().st_size < 72 * mib:
                assert [a.name for a in rt.agents()] == ["sink"]
            assert [a.name for a in rt.agents()] == ["sink"]
        # A reader opened on a store bigger than that, with the writer still going.
        while data.stat().st_size < 80 * mib:
            with Runtime.open(store, readonly=True, limits=Limits()) as rt:
                assert rt.get("/root/sink").name == "sink"


def test_a_reader_opened_as_the_writer_grows_the_map_opens_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LMDB refuses an open whose map a writer grew meanwhile: the open is retried, not failed.

    The growth lands between LMDB reading the map size and its first
    transaction (``MDB_MAP_RESIZED``); the test above meets it by chance,
    this one on the first open.
    """
    store = tmp_path / "store"
    _build(store)
    real_open = lmdb.open
    calls: list[int] = []

    def open_once_resized(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise lmdb.MapResizedError("mdb_txn_begin", -30785)  # MDB_MAP_RESIZED: grew meanwhile
        return real_open(*args, **kwargs)

    monkeypatch.setattr(lmdb, "open", open_once_resized)
    with Runtime.open(store, readonly=True, limits=Limits()) as rt:
        assert rt.get("/root/top").name == "top"
    assert len(calls) == 2


def _build(store: Path) -> None:
    with Runtime.open(store, profiles=[Profile("worker", runner=lambda t: "ok")]) as rt:
        top = rt.spawn("worker", "top", name="top")
        rt.wait(top.id, timeout=PROMPT_S)
        rt.send(top.id, "unread")


def test_every_mutating_call_on_a_reader_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _build(store)
    before = {db: read_db(store, db) for db in ("agents", "messages", "completions", "meta")}
    rt = Runtime.open(store, readonly=True, limits=Limits())
    try:
        assert rt.readonly
        top = rt.get("/root/top")
        calls: dict[str, Callable[[], Any]] = {
            "spawn": lambda: rt.spawn("worker", "more"),
            "spawn child": lambda: rt.spawn("worker", "more", parent=top.id),
            "send": lambda: rt.send(top.id, "hi"),
            "follow_up": lambda: rt.follow_up(top.id, "again"),
            "interrupt": lambda: rt.interrupt(top.id),
            "close": lambda: rt.close(top.id),
            "close_tree": lambda: rt.close_tree(top.id),
            "resume": lambda: rt.resume(top.id),
        }
        for name, call in calls.items():
            with pytest.raises(StoreReadOnly, match="read-only"):
                call()
            assert name
        coroutines: list[Callable[[], Coroutine[Any, Any, Any]]] = [
            lambda: rt.spawn_async("worker", "more"),
            lambda: rt.send_async(top.id, "hi"),
            lambda: rt.follow_up_async(top.id, "again"),
            lambda: rt.interrupt_async(top.id),
            lambda: rt.close_async(top.id),
        ]
        for make in coroutines:
            with pytest.raises(StoreReadOnly):
                asyncio.run(make())
        # Reads still work, sync and async alike, and nothing changed.
        assert [a.path for a in rt.agents()] == ["/root/top"]
        assert rt.get(top.id).state == "completed"
        assert asyncio.run(rt.get_async("/root/top")) == rt.get(top.id)
        assert asyncio.run(rt.agents_async(include_closed=True)) == rt.agents(include_closed=True)
        with pytest.raises(UnknownAgent):
            asyncio.run(rt.get_async("/root/nobody"))
    finally:
        rt.shutdown()
    assert rt.closed
    after = {db: read_db(store, db) for db in before}
    assert after == before


def test_a_reader_of_a_crashed_store_writes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(store, [agent_write(agent("run", "/root/run", state="running"))])
    before = {db: read_db(store, db) for db in ("agents", "completions", "meta")}
    with Runtime.open(store, readonly=True, limits=Limits()) as rt:
        assert [a.id for a in rt.agents()] == ["run"]
    assert {db: read_db(store, db) for db in before} == before
    with Runtime.open(store, profiles=[Profile("worker", runner=lambda t: "ok")]) as rt:
        assert rt.get("run").state == "interrupted"


def test_a_reader_does_not_create_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(StoreError):
        Runtime.open(missing, readonly=True)
    assert not missing.exists()


def test_backup_while_other_threads_write(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ok = lambda turn: "ok"  # noqa: E731
    profiles = [
        Profile("worker", runner=ok, wake_on_completion=False),
        Profile("lead", subagents=("worker",), runner=ok, wake_on_completion=False),
    ]
    limits = Limits(max_agents=100_000, max_tree_agents=100, fanout_cap=100)
    lock = threading.Lock()
    spawned: dict[str, str | None] = {}  # id -> parent id
    sent: set[str] = set()
    stop = threading.Event()
    errors: list[BaseException] = []
    # A small map, so the store also grows while backups run.
    rt = Runtime.open(store, profiles=profiles, limits=limits, map_size=256 * 1024)

    def write(worker: int) -> None:
        rng = random.Random(worker)
        tops: list[str] = []
        try:
            while not stop.is_set():
                if not tops or rng.random() < 0.3:
                    info = rt.spawn("lead", f"top of {worker}")
                    tops.append(info.id)
                    parent = None
                else:
                    parent = rng.choice(tops)
                    info = rt.spawn("worker", "x" * 2000, parent=parent)
                msg = rt.send(info.id, "y" * 2000)
                with lock:
                    spawned[info.id] = parent
                    sent.add(msg.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    backups: list[tuple[Path, set[str], set[str]]] = []
    try:
        for n in range(4):
            while True:  # let some writes land between backups
                with lock:
                    if len(spawned) >= 30 * (n + 1):
                        acked_ids, acked_msgs = set(spawned), set(sent)
                        break
                assert not errors, errors
                stop.wait(0.005)
            backups.append((rt.backup(tmp_path / f"backup{n}"), acked_ids, acked_msgs))
    finally:
        stop.set()
        for thread in threads:
            thread.join(PROMPT_S)
    assert not errors, errors
    try:
        # Quiescent: a backup is the same tree as the live one.
        deadline_rounds = 0
        while any(a.state in ("starting", "running") for a in rt.agents()):
            deadline_rounds += 1
            assert deadline_rounds < 2000, "turns did not settle"
            stop.wait(0.005)
        live_view = rt.agents(include_closed=True)
        quiet = rt.backup(tmp_path / "quiet")
    finally:
        rt.shutdown()
    with Runtime.open(quiet, readonly=True, limits=limits) as copy:
        assert copy.agents(include_closed=True) == live_view
    final = set(spawned)
    for folder, acked_ids, acked_msgs in backups:
        with Runtime.open(folder, readonly=True, limits=limits) as copy:
            assert copy.diagnostics == []
            infos = copy.agents(include_closed=True)
        check_tree(infos)
        found = {i.id for i in infos}
        assert acked_ids <= found <= final, folder.name
        by_id = {i.id: i for i in infos}
        for agent_id in found:
            parent = spawned[agent_id]
            assert parent is None or parent in found
            assert by_id[agent_id].parent_path == (
                paths.ROOT if parent is None else by_id[parent].path
            )
        stored = {r.message.id for r in decode_db(folder, "messages", MessageRecord).values()}
        assert acked_msgs <= stored, folder.name
        # And it opens as a runtime of its own.
        with Runtime.open(folder, profiles=profiles, limits=limits) as copy:
            assert copy.diagnostics == []
            assert {a.id for a in copy.agents(include_closed=True)} == found


def test_backup_into_a_store_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    other = tmp_path / "other"
    _build(other)
    other_before = read_db(other, "agents")
    with Runtime.open(store, profiles=[Profile("worker", runner=lambda t: "ok")]) as rt:
        rt.spawn("worker", "mine", name="mine")
        with pytest.raises(InvalidArgument):
            rt.backup(other)
        with pytest.raises(InvalidArgument):
            rt.backup(store)  # onto itself
        first = rt.backup(tmp_path / "copy")
        with pytest.raises(InvalidArgument):
            rt.backup(first)  # a second backup does not overwrite the first
        empty = tmp_path / "empty"
        empty.mkdir()
        assert rt.backup(empty) == empty
    assert read_db(other, "agents") == other_before
    for folder in (first, empty):
        with Runtime.open(folder, readonly=True) as copy:
            assert [a.name for a in copy.agents()] == ["mine"]


def test_backup_is_compacted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    keep = agent("keep", "/root/keep")
    junk = [("messages", f"keep:{n:016x}".encode(), bytes(16 * 1024)) for n in range(1000)]
    write_store(store, [agent_write(keep), *junk])
    write_store(store, [(db, key, None) for db, key, _ in junk])  # freed pages stay in the file
    profiles = [Profile("worker", runner=lambda t: "ok")]
    with Runtime.open(store, profiles=profiles) as rt:
        copy = rt.backup(tmp_path / "copy")
    original = (store / "data.mdb").stat().st_size
    compacted = (copy / "data.mdb").stat().st_size
    assert compacted * 10 < original, (compacted, original)
    with Runtime.open(copy, profiles=profiles) as rt:
        assert [a.id for a in rt.agents()] == ["keep"]


def test_a_read_open_in_one_thread_survives_another_adopting_the_grown_map(
    tmp_path: Path,
) -> None:
    # py-lmdb invalidates every open transaction of an environment as it adopts a map
    # another process grew: the second thread's read waits for the first's to end, then
    # adopts it (before, it adopted at once and the first read failed with "Attempt to
    # operate on closed/deleted/dropped object").
    store = tmp_path / "store"
    data = store / "data.mdb"
    with Child(GROWER, store) as writer:
        writer.expect("READY")
        reader = Store(store, readonly=True)
        try:
            mapped = reader.env.info()["map_size"]
            first_done = threading.Event()
            second: list[object] = []
            with reader.view() as view:
                assert view.get("agents", b"missing") is None
                while data.stat().st_size <= mapped:  # the writer grows past our map
                    pass
                other = threading.Thread(
                    target=lambda: second.append(reader.get("agents", b"missing"))
                )
                other.start()
                other.join(0.5)  # it waits for this read to end (no open read is cut)
                assert second == [] and other.is_alive()
                assert view.get("agents", b"missing") is None  # still a valid transaction
                first_done.set()
            other.join(PROMPT_S)
            assert second == [None] and first_done.is_set()
            assert reader.env.info()["map_size"] > mapped  # adopted
        finally:
            reader.close()


@pytest.mark.parametrize("how", ["backup", "backup_async", "reclaim"])
def test_a_copy_racing_another_threads_close_is_refused_as_a_closed_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The close lands between the copy's barrier and its store call: the caller is told
    ``RuntimeClosed``, as any call on a closed runtime, not the store's own ``StoreError``
    (found by the state machine's close rule racing backups)."""
    inside, closed = threading.Event(), threading.Event()
    name = "reclaim" if how == "reclaim" else "backup"
    real = getattr(Store, name)

    def late(store: Store, *args: Any) -> Any:
        inside.set()
        assert closed.wait(30)  # another thread's shutdown ran meanwhile
        return real(store, *args)

    monkeypatch.setattr(Store, name, late)
    rt = Runtime.open(tmp_path / "s", profiles=[Profile("p", runner=lambda t: t.task)])
    dest = tmp_path / "copy"
    calls: dict[str, Callable[[], Any]] = {
        "backup": lambda: rt.backup(dest),
        "backup_async": lambda: asyncio.run(rt.backup_async(dest)),
        "reclaim": lambda: rt.compact(reclaim=True),
    }
    outcome: list[BaseException] = []

    def copy() -> None:
        try:
            calls[how]()
        except BaseException as exc:  # what the caller is told
            outcome.append(exc)

    thread = threading.Thread(target=copy)
    thread.start()
    assert inside.wait(30)
    rt.shutdown()
    closed.set()
    thread.join(30)
    assert [type(e) for e in outcome] == [RuntimeClosed], outcome


def test_damage_a_backup_finds_as_the_runtime_closes_is_reported_as_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backup's page check finds damage while another thread's close is under way (the
    store still open): the caller is told ``StoreCorrupted``, not ``RuntimeClosed``
    (review56: every store error of a closing runtime read as the close)."""
    rt = Runtime.open(tmp_path / "s", profiles=[Profile("p", runner=lambda t: t.task)])
    closer: list[threading.Thread] = []

    def damaged(self: damage.Guard, txn: object = None) -> None:
        thread = threading.Thread(target=rt.shutdown)
        thread.start()
        closer.append(thread)
        wait_until(lambda: rt.state is not RuntimeState.OPEN, PROMPT_S)
        raise StoreCorrupted("page 7 is damaged (injected)")

    monkeypatch.setattr(damage.Guard, "verify", damaged)
    try:
        with pytest.raises(StoreCorrupted, match="page 7"):
            rt.backup(tmp_path / "copy")
    finally:
        for thread in closer:
            thread.join(PROMPT_S)
        rt.shutdown()
