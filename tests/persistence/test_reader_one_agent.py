"""A reader's ``get`` and ``inspect`` read one agent's own records, with restore's answers.

Each store here is hand-written (sound records, running turns that took inputs,
and damage of every kind restore handles); for every reference a user can pass
(every id, every stored path, relative and unknown ones, malformed ones), the
one-agent read (``StoreReader(direct=True)``, what ``Runtime.open(...,
readonly=True)`` uses) answers exactly as the whole-store read
(``direct=False``: restore, then the tree) does, value or error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from retinue import Limits, Runtime, UnknownAgent
from retinue.actors.system._agent_read import find_record, read_detail
from retinue.actors.system._reader import StoreReader
from retinue.persistence.store import Store, Write
from retinue.protocol.messages import AgentState
from retinue.protocol.records import (
    AgentRecord,
    TranscriptMessage,
    TranscriptRecord,
    completion_key,
    message_key,
)

from . import (
    agent,
    agent_write,
    completion,
    completion_write,
    encode,
    message,
    message_write,
    write_store,
)

RUNNING = AgentState.RUNNING


def sound_store() -> tuple[list[Write], list[AgentRecord]]:
    """A tree with running turns that took inputs, closed agents and a transcript."""
    lead = agent("lead", "/root/lead", state=RUNNING, generation=2, created_at=1000.0)
    done = agent("done", "/root/lead/done", "lead", created_at=1001.0)
    busy = agent("busy", "/root/lead/busy", "lead", state=RUNNING, created_at=1002.0)
    gone = agent("gone", "/root/lead/gone", "lead", state=AgentState.CLOSED, created_at=1003.0)
    again = agent("again", "/root/lead/gone", "lead", created_at=1004.0)  # the path, reused
    leaf = agent("leaf", "/root/lead/done/leaf", "done", created_at=1005.0)
    other = agent("other", "/root/other", created_at=999.0)
    records = [lead, done, busy, gone, again, leaf, other]
    writes = [agent_write(r) for r in records]
    writes += [
        message_write(message(lead, 1, "unread")),
        message_write(message(lead, 5, "unread later", sender=done)),
        message_write(message(other, 2, "read long ago", read=True)),
    ]
    # Read by the lead's running turn (generation 2): a crash gives it back.
    held = message(lead, 3, "read by the running turn", read=True)
    writes.append(message_write(msgspec.structs.replace(held, read_generation=2)))
    # Read by an earlier turn: gone for good.
    old = message(lead, 4, "read by turn 1", read=True)
    writes.append(message_write(msgspec.structs.replace(old, read_generation=1)))
    # Stored before messages carried their seq.
    legacy = message(busy, 6, "legacy")
    legacy = msgspec.structs.replace(legacy, message=msgspec.structs.replace(legacy.message, seq=0))
    writes.append(message_write(legacy))
    writes += [
        completion_write(completion(done, 1, 7, recipient_id="lead")),
        completion_write(completion(leaf, 1, 8, recipient_id="done", delivered=True)),
        completion_write(completion(other, 1, 9)),  # to the host
        completion_write(completion(again, 1, 10, recipient_id="lead", delivered=True)),
    ]
    taken = completion(gone, 1, 11, recipient_id="lead", delivered=True)
    writes.append(
        completion_write(msgspec.structs.replace(taken, delivered_generation=2))
    )  # taken by the running turn: pending again
    transcript = TranscriptRecord(
        agent_id="lead",
        messages=tuple(
            TranscriptMessage(role="user" if i % 2 == 0 else "assistant", content=f"m{i}")
            for i in range(7)
        ),
        cut=2,
    )
    writes.append(("transcripts", b"lead", encode(transcript)))
    return writes, records


def damaged_store() -> list[Write]:
    """Damage restore skips, beside sound agents (no path it would rename or rewrite)."""
    writes, _ = sound_store()
    top = agent("top", "/root/top", created_at=2000.0)
    orphan = agent("orphan", "/root/missing/orphan", "missing", created_at=2004.0)
    child_of_orphan = agent("kid", "/root/missing/orphan/kid", "orphan", created_at=2005.0)
    cyc1 = agent("cyc1", "/root/cyc2/cyc1", "cyc2")
    cyc2 = agent("cyc2", "/root/cyc1/cyc2", "cyc1")
    below_bad = agent("below_bad", "/root/bad/below_bad", "bad", created_at=2006.0)
    writes += [agent_write(r) for r in (top, orphan, child_of_orphan, cyc1, cyc2)]
    writes += [
        ("agents", b"bad", b"\xc1"),  # undecodable
        agent_write(below_bad),
        ("agents", b"mismatch", encode(agent("someone", "/root/someone"))),
        ("messages", message_key("lead", 99), b"\xc1"),
        ("completions", completion_key("done", 9), b"\xc1"),
        # A completion routed to top from an agent restore drops: top's detail needs the
        # whole view.
        completion_write(completion(orphan, 1, 20, recipient_id="top")),
        message_write(message(orphan, 22, "to the orphan")),
    ]
    return writes


def refs(writes: list[Write], whole: StoreReader) -> Iterator[Any]:
    """Every reference worth asking for: ids, stored and restored paths, and bad ones."""
    seen = {a.path for a in whole.agents(True)}
    for database, key, value in writes:
        if database != "agents" or value is None:
            continue
        seen.add(key.decode())
        try:
            record = msgspec.msgpack.decode(value, type=AgentRecord)
        except msgspec.DecodeError:
            continue
        seen |= {record.path, record.path.removeprefix("/root/"), record.parent_path}
    yield from sorted(seen)
    yield from ("", "/root", "nope", "/root/nope", "/root/lead/nope", "Bad Name", "/root//x")
    yield from ("/root/" + "x" * 50, "lead/../other", 42, None)


def outcome(call: Callable[..., Any], *args: Any) -> Any:
    """The value of ``call(*args)``, or its error's type and message."""
    try:
        return call(*args)
    except Exception as exc:
        return (type(exc).__name__, str(exc))


def readers(folder: Path) -> tuple[Store, StoreReader, StoreReader]:
    store = Store(folder, readonly=True)
    limits = Limits()
    return store, StoreReader(store, limits, direct=True), StoreReader(store, limits, direct=False)


@pytest.mark.parametrize(
    "make", [lambda: sound_store()[0], damaged_store], ids=["sound", "damaged"]
)
def test_one_agent_reads_answer_as_the_whole_store_does(
    tmp_path: Path, make: Callable[[], list[Write]]
) -> None:
    writes = make()
    write_store(tmp_path / "store", writes)
    store, direct, whole = readers(tmp_path / "store")
    try:
        asked = 0
        for ref in refs(writes, whole):
            for field in ("ref", "agent"):
                assert outcome(direct.get, ref, field) == outcome(whole.get, ref, field), ref
            for tail in (0, 3, 50):
                mine = outcome(direct.inspect, ref, tail)
                assert mine == outcome(whole.inspect, ref, tail), (ref, tail)
            asked += 1
        assert asked > 20
        for closed in (False, True):
            assert outcome(direct.agents, closed) == outcome(whole.agents, closed)
    finally:
        direct.close()
        whole.close()
        store.close()


def test_a_running_turns_inputs_show_as_unread_and_pending(tmp_path: Path) -> None:
    writes, _ = sound_store()
    write_store(tmp_path / "store", writes)
    reader = Runtime.open(tmp_path / "store", readonly=True)
    try:
        detail = reader.inspect("/root/lead", transcript_tail=3)
        assert [m.content for m in detail.unread] == [
            "unread",
            "read by the running turn",
            "unread later",
        ]
        assert [c.agent_id for c in detail.pending] == ["done", "gone"]
        assert [m.content for m in detail.transcript] == ["m4", "m5", "m6"]
        assert (detail.transcript_length, detail.transcript_cut) == (7, 2)
        assert reader.inspect("busy").unread[0].seq == 6  # the legacy record's seq
        assert reader.get("lead/gone").id == "again"  # the live holder of a reused path
        assert reader.get("gone").state == AgentState.CLOSED
    finally:
        reader.shutdown()


def test_a_sound_store_is_read_one_agent_at_a_time(tmp_path: Path) -> None:
    """The one-agent read answers itself for every agent of a sound store (no fallback)."""
    writes, records = sound_store()
    write_store(tmp_path / "store", writes)
    store = Store(tmp_path / "store", readonly=True)
    try:
        with store.view() as view:
            for record in records:
                found = find_record(view, record.id)
                assert found == record
                assert read_detail(view, found, 5) is not None
                if record.state is not AgentState.CLOSED:
                    assert find_record(view, record.path) == record
    finally:
        store.close()


def test_a_store_whose_paths_restore_renamed_is_read_whole(tmp_path: Path) -> None:
    first = agent("first", "/root/dup", created_at=1000.0)
    later = agent("later", "/root/dup", created_at=2000.0)
    kid = agent("kid", "/root/dup/kid", "later", created_at=2500.0)
    write_store(tmp_path / "store", [agent_write(r) for r in (first, later, kid)])
    reader = Runtime.open(tmp_path / "store", readonly=True)
    try:
        assert {d.code for d in reader.diagnostics} == {"path_collision", "path_rewritten"}
        assert reader.get("/root/dup").id == "first"
        renamed = reader.get("later")
        assert renamed.path != "/root/dup"
        assert reader.get("kid").path == f"{renamed.path}/kid"
        assert reader.inspect(renamed.path).info.id == "later"
        assert reader.inspect(f"{renamed.path}/kid").info.id == "kid"
    finally:
        reader.shutdown()


def test_a_store_whose_paths_restore_rewrote_is_read_whole(tmp_path: Path) -> None:
    top = agent("top", "/root/top")
    stale = agent("stale", "/root/elsewhere/stale", "top")
    deep = agent("deep", "/root/top/deep", "top", depth=7)
    write_store(tmp_path / "store", [agent_write(r) for r in (top, stale, deep)])
    reader = Runtime.open(tmp_path / "store", readonly=True)
    try:
        assert {d.code for d in reader.diagnostics} == {"path_rewritten"}
        assert reader.get("/root/top/stale").id == "stale"
        assert reader.inspect("top/stale").info.path == "/root/top/stale"
        assert reader.get("deep").depth == 2
        with pytest.raises(UnknownAgent):
            reader.get("/root/elsewhere/stale")
    finally:
        reader.shutdown()
