"""Restore diagnostics: every bad record is skipped on its own, with a stable code.

Each test hand-corrupts records of a real store, reopens it with
``Runtime.open`` and checks ``rt.diagnostics`` (database, key, code, message)
and that everything good is still there.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from retinue import Diagnostic, Limits, Profile, Runtime
from retinue.protocol import paths
from retinue.protocol.messages import AgentState
from retinue.protocol.records import AgentRecord, completion_key, message_key

from . import (
    PROMPT_S,
    Recorder,
    agent,
    agent_write,
    completion,
    completion_write,
    encode,
    message,
    message_write,
    read_db,
    write_store,
)


def open_rt(path: Path, runner: Recorder | None = None, **limits: int) -> Runtime:
    """Open a writer runtime with the ``worker``/``lead`` profiles the records use."""
    run = runner or Recorder()
    profiles = [Profile("worker", runner=run), Profile("lead", subagents=("worker",), runner=run)]
    return Runtime.open(path, profiles=profiles, limits=Limits(**limits))


def triples(diagnostics: list[Diagnostic]) -> set[tuple[str, str, str]]:
    """Return ``(database, key, code)`` of every diagnostic."""
    return {(d.database, d.key, d.code) for d in diagnostics}


def codes_by_key(diagnostics: list[Diagnostic]) -> dict[str, set[str]]:
    """Return the codes reported for each key."""
    out: dict[str, set[str]] = {}
    for d in diagnostics:
        out.setdefault(d.key, set()).add(d.code)
    return out


def bad_path_record(agent_id: str, name: str, path: str) -> AgentRecord:
    """An agent record whose name or path breaks the path rules (built without checks)."""
    return AgentRecord(
        id=agent_id,
        name=name,
        path=path,
        profile="worker",
        parent_id=None,
        parent_path=paths.ROOT,
        depth=1,
        state=AgentState.COMPLETED,
        generation=1,
        task="t",
        created_at=1000.0,
        updated_at=1000.0,
    )


def test_diagnostics_are_structs_with_key_code_and_message(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(store, [("agents", b"junk", b"\xc1\xc1\xc1")])
    with open_rt(store) as rt:
        assert len(rt.diagnostics) == 1
        diag = rt.diagnostics[0]
        assert isinstance(diag, Diagnostic)
        assert (diag.database, diag.key, diag.code) == ("agents", "junk", "undecodable")
        assert isinstance(diag.message, str) and diag.message


def test_undecodable_records_in_every_database(tmp_path: Path) -> None:
    store = tmp_path / "store"
    good = agent("good", "/root/good")
    write_store(
        store,
        [
            agent_write(good),
            ("agents", b"garbage", b"\xc1 not msgpack"),
            ("agents", b"wrong_shape", encode({"id": "wrong_shape", "depth": "deep"})),
            ("agents", b"truncated", encode(agent("truncated", "/root/t"))[:-5]),
            ("agents", b"\xff\xfe", b"\xc1"),
            ("messages", b"good:0000000000000bad", b"\xc1"),
            ("completions", b"good:0000000009", encode([1, 2, 3])),
            message_write(message(good, 1, "hello")),
            completion_write(completion(good, 1, 2)),
        ],
    )
    with open_rt(store) as rt:
        found = triples(rt.diagnostics)
        assert found == {
            ("agents", "garbage", "undecodable"),
            ("agents", "wrong_shape", "undecodable"),
            ("agents", "truncated", "undecodable"),
            ("agents", "\\xff\\xfe", "undecodable"),
            ("messages", "good:0000000000000bad", "undecodable"),
            ("completions", "good:0000000009", "undecodable"),
        }
        assert [a.id for a in rt.agents()] == ["good"]
        assert rt.wait("good", timeout=PROMPT_S).id == "good:1"


def test_key_mismatch(tmp_path: Path) -> None:
    store = tmp_path / "store"
    record = agent("real_id", "/root/real")
    write_store(
        store, [("agents", b"other_key", encode(record)), agent_write(agent("ok", "/root/ok"))]
    )
    with open_rt(store) as rt:
        assert triples(rt.diagnostics) == {("agents", "other_key", "key_mismatch")}
        assert [a.id for a in rt.agents(include_closed=True)] == ["ok"]


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("Bad-Name", "/root/Bad-Name"),
        ("x", "/elsewhere/x"),
        ("x", "/root/x/"),
        ("root", "/root/root"),
        ("y" * 41, "/root/" + "y" * 41),
    ],
)
def test_bad_path(tmp_path: Path, name: str, path: str) -> None:
    store = tmp_path / "store"
    bad = bad_path_record("bad", name, path)
    kid = agent("kid", "/root/x/kid", "bad")
    write_store(store, [agent_write(bad), agent_write(kid), agent_write(agent("ok", "/root/ok"))])
    with open_rt(store) as rt:
        by_key = codes_by_key(rt.diagnostics)
        assert by_key["bad"] == {"bad_path"}
        assert by_key["kid"] == {"orphan"}, "a child of a dropped agent is dropped too"
        assert [a.id for a in rt.agents()] == ["ok"]


def test_orphans_and_their_records(tmp_path: Path) -> None:
    store = tmp_path / "store"
    orphan = agent("orphan", "/root/gone/orphan", "ghost")
    grandchild = agent("grandchild", "/root/gone/orphan/gc", "orphan")
    ok = agent("ok", "/root/ok")
    write_store(
        store,
        [
            agent_write(orphan),
            agent_write(grandchild),
            agent_write(ok),
            message_write(message(orphan, 1, "to the orphan")),
            completion_write(completion(orphan, 1, 2)),
            message_write(message(ok, 3, "to ok")),
        ],
    )
    with open_rt(store) as rt:
        assert triples(rt.diagnostics) == {
            ("agents", "orphan", "orphan"),
            ("agents", "grandchild", "orphan"),
            ("messages", message_key("orphan", 1).decode(), "dangling_message"),
            ("completions", completion_key("orphan", 1).decode(), "dangling_completion"),
        }
        assert [a.id for a in rt.agents(include_closed=True)] == ["ok"]


def test_cycles(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = agent("a", "/root/b/a", "b")
    b = agent("b", "/root/a/b", "a")
    self_loop = agent("loop", "/root/loop/loop", "loop")
    below = agent("below", "/root/b/a/below", "a")
    ok = agent("ok", "/root/ok")
    ok_kid = agent("ok_kid", "/root/ok/kid", "ok")
    write_store(store, [agent_write(r) for r in (a, b, self_loop, below, ok, ok_kid)])
    with open_rt(store) as rt:
        by_key = codes_by_key(rt.diagnostics)
        assert by_key["a"] == {"cycle"}
        assert by_key["b"] == {"cycle"}
        assert by_key["loop"] == {"cycle"}
        assert by_key["below"] == {"orphan"}, "hanging below a cycle: its parent was dropped"
        assert set(by_key) == {"a", "b", "loop", "below"}
        assert {x.id for x in rt.agents()} == {"ok", "ok_kid"}


def test_too_deep_every_dropped_agent_has_a_diagnostic(tmp_path: Path) -> None:
    store = tmp_path / "store"
    chain = [
        agent("d1", "/root/a"),
        agent("d2", "/root/a/b", "d1"),
        agent("d3", "/root/a/b/c", "d2"),
        agent("d4", "/root/a/b/c/d", "d3"),
    ]
    write_store(store, [agent_write(r) for r in chain])
    with open_rt(store, depth_cap=2) as rt:
        by_key = codes_by_key(rt.diagnostics)
        assert by_key.get("d3") == {"too_deep"}
        # d4 is deeper than the cap too, and its parent was dropped: it must
        # not vanish silently ("dropped with a diagnostic each").
        assert by_key.get("d4") in ({"too_deep"}, {"orphan"}), rt.diagnostics
        assert {x.id for x in rt.agents()} == {"d1", "d2"}


def test_dropped_records_stay_on_disk_and_come_back_when_valid(tmp_path: Path) -> None:
    store = tmp_path / "store"
    chain = [
        agent("d1", "/root/a"),
        agent("d2", "/root/a/b", "d1"),
        agent("d3", "/root/a/b/c", "d2"),
        agent("d4", "/root/a/b/c/d", "d3"),
    ]
    write_store(
        store, [agent_write(r) for r in chain] + [message_write(message(chain[3], 1, "hi"))]
    )
    with open_rt(store, depth_cap=2) as rt:
        assert {x.id for x in rt.agents()} == {"d1", "d2"}
        first = triples(rt.diagnostics)
    with open_rt(store, depth_cap=2) as rt:
        assert triples(rt.diagnostics) == first, "codes are stable from one open to the next"
    # The cap is a property of the opening runtime: with room, all come back.
    runner = Recorder()
    with open_rt(store, runner, depth_cap=5) as rt:
        assert rt.diagnostics == []
        assert {x.id for x in rt.agents()} == {"d1", "d2", "d3", "d4"}
        rt.follow_up("d4", "again")
        assert rt.wait("d4", timeout=PROMPT_S).generation == 2
        assert [m.content for m in runner.of("d4")[0].messages] == ["hi"]


def test_a_path_that_disagrees_with_its_parent_is_rewritten(tmp_path: Path) -> None:
    store = tmp_path / "store"
    top = agent("top", "/root/top")
    kid = agent("kid", "/root/elsewhere/kid", "top")
    write_store(store, [agent_write(top), agent_write(kid)])
    with open_rt(store) as rt:
        assert triples(rt.diagnostics) == {("agents", "kid", "path_rewritten")}
        info = rt.get("kid")
        assert (info.path, info.parent_path, info.depth) == ("/root/top/kid", "/root/top", 2)
        assert rt.get("/root/top/kid").id == "kid"
    with open_rt(store) as rt:
        assert rt.diagnostics == []


def test_path_collision_renames_the_later_agent(tmp_path: Path) -> None:
    store = tmp_path / "store"
    closed = agent("closed", "/root/dup", state=AgentState.CLOSED, created_at=500.0)
    first = agent("first", "/root/dup", created_at=1000.0)
    later = agent("later", "/root/dup", created_at=2000.0)
    kid = agent("kid", "/root/dup/kid", "later", created_at=2500.0)
    write_store(store, [agent_write(r) for r in (closed, first, later, kid)])
    new_name = paths.derive_name("later")
    new_path = f"/root/{new_name}"
    with open_rt(store) as rt:
        collisions = [d for d in rt.diagnostics if d.code == "path_collision"]
        assert [(d.database, d.key) for d in collisions] == [("agents", "later")]
        assert new_path in collisions[0].message, "the diagnostic says what it was renamed to"
        assert {d.code for d in rt.diagnostics} <= {"path_collision", "path_rewritten"}
        assert rt.get("/root/dup").id == "first"
        renamed = rt.get("later")
        assert (renamed.name, renamed.path) == (new_name, new_path)
        assert rt.get(new_path).id == "later"
        assert rt.get("kid").path == f"{new_path}/kid", "children follow the renamed parent"
        assert rt.get("closed").state == AgentState.CLOSED, "a closed agent holds no path"
        assert {x.id for x in rt.agents(include_closed=True)} == {"closed", "first", "later", "kid"}
    with open_rt(store) as rt:
        assert rt.diagnostics == [], "the repair was persisted"
        assert rt.get("later").path == new_path
        assert rt.get("/root/dup").id == "first"


def test_dangling_messages_and_completions(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ok = agent("ok", "/root/ok")
    ghost = ("ghost", "/root/ghost")
    write_store(
        store,
        [
            agent_write(ok),
            message_write(message(ghost, 1, "nobody reads this")),
            message_write(message(ghost, 2, "read already", read=True)),
            completion_write(completion(ghost, 1, 3)),
            message_write(message(ok, 4, "for ok")),
            completion_write(completion(ok, 1, 5)),
        ],
    )
    with open_rt(store) as rt:
        assert triples(rt.diagnostics) == {
            ("messages", message_key("ghost", 1).decode(), "dangling_message"),
            ("messages", message_key("ghost", 2).decode(), "dangling_message"),
            ("completions", completion_key("ghost", 1).decode(), "dangling_completion"),
        }
        assert rt.wait("ok", timeout=PROMPT_S).id == "ok:1"


def test_one_bad_record_never_loses_the_rest(tmp_path: Path) -> None:
    store = tmp_path / "store"
    good: list[AgentRecord] = []
    writes = []
    seq = 0
    for t in range(10):
        top = agent(f"top{t}", f"/root/top{t}", created_at=1000.0 + t)
        good.append(top)
        for k in range(4):
            good.append(agent(f"top{t}_k{k}", f"/root/top{t}/k{k}", top.id, created_at=1100.0 + k))
    for record in good:
        writes.append(agent_write(record))
        seq += 1
        writes.append(message_write(message(record, seq, f"unread for {record.id}")))
        seq += 1
        writes.append(completion_write(completion(record, 1, seq, recipient_id=record.parent_id)))
    bad = [
        ("agents", b"undecodable", b"\xc1"),
        ("agents", b"mismatch", encode(agent("someone_else", "/root/else"))),
        ("agents", b"badpath", encode(bad_path_record("badpath", "B", "/root/B"))),
        agent_write(agent("orphan", "/root/top0/x/orphan", "missing")),
        agent_write(agent("cyc1", "/root/cyc2/cyc1", "cyc2")),
        agent_write(agent("cyc2", "/root/cyc1/cyc2", "cyc1")),
        agent_write(agent("deep", "/root/top1/k0/deep", "top1_k0")),
        agent_write(agent("twin", "/root/top2", created_at=5000.0)),
        message_write(message(("ghost", "/root/ghost"), 9999, "dangling")),
        completion_write(completion(("ghost", "/root/ghost"), 1, 9998)),
        ("messages", b"top3:00000000000fffff", b"\xc1"),
        ("completions", b"top3:0000000042", b"\xc1"),
    ]
    write_store(store, writes + bad)
    bad_keys = {k.decode() for _, k, _ in bad}

    reader = Runtime.open(store, readonly=True, limits=Limits(depth_cap=2))
    try:
        reader_view = triples(reader.diagnostics)
        # A read-only view drops no agent for its depth: it shows what the writer kept.
        assert "deep" in {a.id for a in reader.agents()}
    finally:
        reader.shutdown()

    runner = Recorder()
    with open_rt(store, runner, depth_cap=2) as rt:
        by_key = codes_by_key(rt.diagnostics)
        assert set(by_key) == bad_keys, "exactly the bad records are reported"
        assert by_key["twin"] == {"path_collision"}
        assert by_key["deep"] == {"too_deep"}
        writer_view = {t for t in triples(rt.diagnostics) if t[2] != "too_deep"}
        assert writer_view == reader_view, "a reader sees the same problems but the cap's"
        restored = {a.id: a for a in rt.agents()}
        assert set(restored) == {r.id for r in good} | {"twin"}
        for record in good:
            info = restored[record.id]
            assert (info.path, info.state, info.generation) == (record.path, "completed", 1)
        # Their records came back too: the unread message reaches the next turn.
        rt.follow_up("top5_k2", "again")
        assert rt.wait("top5_k2", timeout=PROMPT_S).generation == 1
        assert rt.wait("top5_k2", timeout=PROMPT_S).generation == 2
        (turn,) = runner.of("top5_k2")
        assert "unread for top5_k2" in [m.content for m in turn.messages]

    # Skipped records stay on disk untouched (a newer retinue may read them).
    raw = read_db(store, "agents")
    for database, key, value in bad:
        if database == "agents" and key != b"twin":
            assert raw[key] == value
    assert read_db(store, "messages")[b"top3:00000000000fffff"] == b"\xc1"


def test_diagnostic_is_a_frozen_msgspec_struct() -> None:
    diag = Diagnostic(database="agents", key="k", code="orphan", message="m")
    assert msgspec.json.decode(msgspec.json.encode(diag), type=Diagnostic) == diag
    with pytest.raises(AttributeError):
        diag.code = "other"  # type: ignore[misc]
