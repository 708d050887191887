"""Compaction keeps closed agents and read messages within retention, never anything live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from retinue import Limits, Profile, Runtime, Turn
from retinue.actors.tree._compaction import retention_slack
from retinue.persistence.store import Store
from retinue.protocol.records import CompletionRecord, MessageRecord


def _echo(turn: Turn) -> str:
    return f"{turn.task}:{len(turn.messages)}"


def _count(path: Path, database: str) -> int:
    store = Store(path, readonly=True)
    try:
        return len(store.snapshot([database]).records[database])
    finally:
        store.close()


def _open(path: Path, **limits: Any) -> Runtime:
    profiles = [Profile("lead", subagents=["w"], runner=_echo), Profile("w", runner=_echo)]
    return Runtime.open(path, profiles=profiles, limits=Limits(**limits))


def test_closed_agents_beyond_the_count_go_oldest_first_leaves_before_parents(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    with _open(store, retain_closed_agents=2) as rt:
        lead = rt.spawn("lead", "t", name="lead")
        rt.wait(lead.id, timeout=10)
        kids = [rt.spawn("w", "k", parent=lead.path, name=f"kid{i}") for i in range(3)]
        for kid in kids:
            rt.wait(kid.id, timeout=10)
        keep = rt.spawn("w", "live", name="keeper")
        rt.wait(keep.id, timeout=10)
        closed = rt.close_tree(lead.id)  # children first, in creation order
        assert [c.name for c in closed] == ["kid0", "kid1", "kid2", "lead"]
        report = rt.compact()
        assert report.agents == 2
        left = {a.name for a in rt.agents(include_closed=True)}
        # The two oldest closed leaves went; lead stays while a child record names it.
        assert left == {"kid2", "lead", "keeper"}
        assert rt.compact().agents == 0, "retention reached: nothing more goes"
    with _open(store, retain_closed_agents=2) as rt:
        assert rt.diagnostics == []  # no orphan left behind
        assert {a.name for a in rt.agents(include_closed=True)} == {"kid2", "lead", "keeper"}


def test_a_closed_agent_with_an_unreceived_completion_is_kept(tmp_path: Path) -> None:
    with _open(tmp_path / "s", retain_closed_agents=1) as rt:
        a = rt.spawn("w", "x", name="a")
        b = rt.spawn("w", "y", name="b")
        rt.wait(b.id, timeout=10)
        rt.close(a.id)
        rt.close(b.id)
        rt.compact()
        # a's completion was never received by the host: a stays; b goes.
        names = {x.name for x in rt.agents(include_closed=True)}
        assert names == {"a"}
        assert rt.wait(a.id, timeout=10).output == "x:0"


def test_read_messages_beyond_the_count_go_and_unread_ones_stay(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with _open(store, retain_read_messages=2, mailbox_capacity=10) as rt:
        a = rt.spawn("w", "start", name="a")
        rt.wait(a.id, timeout=10)
        first = [rt.send(a.id, f"m{i}", dedup_key=f"k{i}") for i in range(4)]
        rt.follow_up(a.id, "read them")
        assert rt.wait(a.id, timeout=10).output == "read them:4"
        unread = rt.send(a.id, "later")
        report = rt.compact()
        assert report.messages == 2
        # A dedup key lives as long as its message: k0 is gone, k3 still dedups.
        assert rt.send(a.id, "again", dedup_key="k3").id == first[3].id
        assert rt.send(a.id, "again", dedup_key="k0").id != first[0].id
    messages = []
    reader = Store(store, readonly=True)
    try:
        decoder = msgspec.msgpack.Decoder(MessageRecord)
        messages = [decoder.decode(v) for _, v in reader.snapshot(["messages"]).records["messages"]]
    finally:
        reader.close()
    contents = {m.message.content: m.read for m in messages}
    assert contents == {"m2": True, "m3": True, "later": False, "again": False}
    assert unread.id in {m.message.id for m in messages}


def test_old_delivered_completions_go_but_each_agents_latest_stays(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with _open(store, retain_age_s=0.000001) as rt:
        a = rt.spawn("w", "t0", name="a")
        rt.wait(a.id, timeout=10)
        for i in range(1, 4):
            rt.follow_up(a.id, f"t{i}")
            rt.wait(a.id, timeout=10)
        report = rt.compact()
        assert report.completions == 3
        assert rt.get(a.id).generation == 4
    store_reader = Store(store, readonly=True)
    try:
        decoder = msgspec.msgpack.Decoder(CompletionRecord)
        left = [
            decoder.decode(v)
            for _, v in store_reader.snapshot(["completions"]).records["completions"]
        ]
    finally:
        store_reader.close()
    assert [c.completion.generation for c in left] == [4]
    assert _count(store, "agents") == 1


def test_a_dedup_key_goes_with_the_compacted_closed_agent_that_held_its_message(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    with _open(store, retain_closed_agents=1) as rt:
        gone = rt.spawn("w", "start", name="gone")
        rt.wait(gone.id, timeout=10)
        first = rt.send(gone.id, "hello", dedup_key="k")
        rt.follow_up(gone.id, "read it")
        assert rt.wait(gone.id, timeout=10).output == "read it:1"
        rt.close(gone.id)
        spare = rt.spawn("w", "start", name="spare")
        rt.wait(spare.id, timeout=10)
        rt.close(spare.id)  # closed later: retention keeps it, "gone" goes
        assert rt.compact().agents == 1
        assert {a.name for a in rt.agents(include_closed=True)} == {"spare"}
        other = rt.spawn("w", "start", name="other")
        # The message keyed "k" is gone with its recipient: the key is free again,
        # so the same send creates a new message rather than answering a deleted one.
        again = rt.send(other.id, "hello", dedup_key="k")
        assert again.recipient_id == other.id
        assert again.id != first.id
        assert rt.send(other.id, "hello", dedup_key="k") == again
    with _open(store, retain_closed_agents=1) as rt:  # and a reopen agrees
        assert rt.send("/root/other", "hello", dedup_key="k") == again


def test_the_closed_agent_count_is_enforced_when_crossed_not_only_on_the_timer(
    tmp_path: Path,
) -> None:
    keep = 5
    bound = keep + retention_slack(keep)
    store = tmp_path / "store"
    # The background timer never fires during this test.
    with _open(store, retain_closed_agents=keep, compact_interval_s=3600) as rt:
        most = 0
        for i in range(4 * bound):
            agent = rt.spawn("w", f"t{i}", name="churn")
            rt.wait(agent.id, timeout=10)
            rt.close(agent.id)
            most = max(most, len(rt.agents(include_closed=True)))
        assert keep <= len(rt.agents(include_closed=True)) <= bound
        assert most <= bound
        lead = rt.spawn("lead", "t", name="lead")
        kids = [rt.spawn("w", "k", parent=lead.path, name=f"kid{i}") for i in range(3)]
        for agent in [lead, *kids]:
            rt.wait(agent.id, timeout=10)
        for _ in range(2 * bound):  # close_tree crosses it too
            rt.close_tree(lead.id)
            lead = rt.spawn("lead", "t", name="lead")
            rt.wait(lead.id, timeout=10)
        assert len(rt.agents(include_closed=True)) <= bound + 1
    assert _count(store, "agents") <= bound + 1
