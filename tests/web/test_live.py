"""The live tree behind the view: versions and deltas, parents under path reuse, pacing, events."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from starlette.testclient import TestClient
from support import wait_until
from support.meta_flush import free_pages, meta_page_ahead

from retinue import (
    AgentInfo,
    AgentState,
    InvalidArgument,
    ModelCallFinished,
    Profile,
    Runtime,
    ToolCallFinished,
    ToolCallStarted,
)
from retinue.errors import ArgumentTypeError
from retinue.testing import Gate
from retinue.web import LiveTree, WebOptions, create_app
from retinue.web.live import next_pause
from retinue.web.snapshot import ROOT, build


class SomethingNew(msgspec.Struct, frozen=True, kw_only=True, tag="something_new"):
    """An event kind the view does not know."""

    agent_id: str
    path: str
    at: float


# ------------------------------------------------------------------------------------------


def _info(agent_id: str, path: str, created: float, state: str = "completed") -> AgentInfo:
    parent = path.rsplit("/", 1)[0]
    return AgentInfo(
        id=agent_id,
        name=path.rsplit("/", 1)[1],
        path=path,
        profile="p",
        parent_path=parent,
        depth=path.count("/") - 1,
        state=AgentState(state),
        generation=1,
        task="t",
        created_at=created,
        updated_at=created,
    )


def test_a_child_belongs_to_the_holder_of_its_parent_path_when_it_was_made() -> None:
    # /root/a was closed and its name reused: each child hangs under the right holder.
    agents = [
        _info("a1", "/root/a", 1.0, "closed"),
        _info("k1", "/root/a/k", 2.0, "closed"),
        _info("a2", "/root/a", 3.0),
        _info("k2", "/root/a/k", 4.0),
        _info("j2", "/root/a/j", 5.0),
    ]
    snap = build(agents, 1, 0.0, {})
    assert snap.parent == {"a1": ROOT, "k1": "a1", "a2": ROOT, "k2": "a2", "j2": "a2"}
    assert snap.kids[ROOT] == ["a1", "a2"] and snap.kids["a2"] == ["k2", "j2"]
    rows, total = snap.children(ROOT, closed=False, offset=0, limit=10)
    assert [r["id"] for r in rows] == ["a2"] and total == 1
    rows, total = snap.children(ROOT, closed=True, offset=1, limit=1)
    assert [r["id"] for r in rows] == ["a2"] and total == 2
    assert snap.rows["a2"]["kids"] == 2 and snap.rows["a1"]["kids"] == 0
    assert snap.rows["a1"]["kids_all"] == 1
    assert snap.subtree("a2", 10) == ["a2", "k2", "j2"] and snap.subtree("a2", 2) == ["a2", "k2"]
    assert snap.top_of("j2") == "a2" and snap.ancestors("j2") == ["a2"]
    # An unchanged agent keeps its row object, so changes are found by identity.
    again = build(agents, 2, 0.0, {"k2": "grep"}, snap)
    assert again.rows["a2"] is snap.rows["a2"]
    assert again.rows["k2"] is not snap.rows["k2"] and again.rows["k2"]["tool"] == "grep"


def test_pacing_follows_the_read_cost_within_its_bounds() -> None:
    opts = WebOptions(min_interval_s=0.25, max_interval_s=5.0, cost_factor=3.0)
    assert next_pause(0.001, opts) == 0.25
    assert next_pause(0.5, opts) == pytest.approx(1.5)
    assert next_pause(2.0, opts) == 5.0  # a 100,000-agent read: every 5 s at most


def test_options_are_checked() -> None:
    for bad in (
        {"min_interval_s": 0},
        {"min_interval_s": float("nan")},
        {"page_size": -1},
        {"min_interval_s": 9.0, "max_interval_s": 1.0},
        {"page_size": 2000},
        {"transcript_tail": 600},
    ):
        with pytest.raises(InvalidArgument):
            WebOptions(**bad)
    with pytest.raises(ArgumentTypeError):
        WebOptions(page_size="10")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        WebOptions(page_size=1.5)  # type: ignore[arg-type]


@pytest.fixture
def writer_view(tmp_path: object, gate: Gate) -> Iterator[tuple[Runtime, LiveTree]]:
    """An in-process writer (gated workers) and a live tree over it that is not polling."""
    rt = Runtime.open(
        f"{tmp_path}/store",
        profiles=[
            Profile("lead", subagents=["worker"], runner=gate),
            Profile("worker", runner=gate),
        ],
    )
    live = LiveTree(rt, WebOptions(history=3, max_changes=4))
    yield rt, live
    gate.release()
    live.stop()
    rt.shutdown()


def test_versions_give_what_changed_or_a_reset(writer_view: tuple[Runtime, LiveTree]) -> None:
    rt, live = writer_view
    assert live.delta(0) is None  # nothing read yet
    lead = rt.spawn("lead", "plan", name="lead")
    assert live.poll() is True
    first = live.snapshot(0)
    assert first is not None and first.version == 1
    assert live.poll() is False and live.skips == 1  # no commit since: no read at all
    assert live.poll(force=True) is False  # read again: nothing changed, no new version
    child = rt.spawn("worker", "check", name="check", parent=lead.id)
    assert live.poll() is True
    delta = live.delta(1)
    assert delta is not None and not delta.reset
    assert {r["id"] for r in delta.rows} == {child.id, lead.id}  # the lead's child count changed
    assert live.delta(2) is None
    for n in range(3):  # three more versions: version 1 leaves the history (history=3)
        rt.spawn("worker", f"more {n}", parent=lead.id)
        assert live.poll()
    old = live.delta(1)
    assert old is not None and old.reset
    many = live.delta(2)  # 3 new agents + the lead = 4 changed: within max_changes=4
    assert many is not None and not many.reset and len(many.rows) == 4
    rt.spawn("worker", "one too many", parent=lead.id)
    assert live.poll()
    too_many = live.delta(2)
    assert too_many is not None and too_many.reset


def test_events_show_the_tool_in_progress_and_feed_the_timeline(
    writer_view: tuple[Runtime, LiveTree], gate: Gate
) -> None:
    rt, live = writer_view
    live.start()  # subscribes: the events below arrive as the runtime would deliver them
    lead = rt.spawn("lead", "plan", name="lead")
    gate.wait_started(1)
    wait_until(
        lambda: (s := live.snapshot(0)) and s.rows.get(lead.id, {}).get("state") == "running"
    )
    start = ToolCallStarted(
        agent_id=lead.id, path=lead.path, at=100.0, call_id="c1", tool="grep", arguments_preview=""
    )
    live.observe(start)
    live.observe(SomethingNew(agent_id=lead.id, path=lead.path, at=100.5))  # ignored
    assert live.activity.tools() == {lead.id: "grep"}
    with TestClient(create_app(live), base_url="http://127.0.0.1") as client:
        assert client.get(f"/api/agent?id={lead.id}").json()["tool"] == "grep"
        live.observe(
            ToolCallFinished(
                agent_id=lead.id,
                path=lead.path,
                at=101.0,
                call_id="c1",
                tool="grep",
                ok=False,
                duration_s=1.0,
                error="no such file",
            )
        )
        live.observe(
            ModelCallFinished(
                agent_id=lead.id,
                path=lead.path,
                at=102.0,
                model="m",
                prompt_tokens=10,
                completion_tokens=5,
                cost_usd=0.0,
                duration_s=0.5,
            )
        )
        assert live.activity.tools() == {}
        gate.release()
        wait_until(lambda: rt.get(lead.id).state == "completed")
        wait_until(lambda: [s.kind for s in live.activity.spans_of([lead.id], 10)][-1] == "turn")
        timeline = client.get(f"/api/timeline?id={lead.id}").json()
        spans = [(s["kind"], s["label"], s["ok"]) for s in timeline["spans"]]
        assert spans == [("tool", "grep", False), ("model", "m", True), ("turn", "g1", True)]
        tool = timeline["spans"][0]
        assert (tool["start"], tool["end"], tool["detail"]) == (100.0, 101.0, "no such file")
        assert timeline["events"] is True and timeline["spans_dropped"] == 0


def test_a_closed_runtime_stops_the_view_with_a_reason(tmp_path: object) -> None:
    rt = Runtime.open(f"{tmp_path}/store", profiles=[Profile("p", runner=lambda t: "ok")])
    live = LiveTree(rt, WebOptions(min_interval_s=0.01, max_interval_s=0.05))
    live.start()
    assert live.snapshot(10) is not None
    rt.shutdown()
    # The runtime is gone: the poller finds out at its next read and stops.
    wait_until(lambda: live.stopping, what="the poller to stop")
    assert live.error == "the runtime is closed"
    live.stop()


def test_a_read_only_view_sees_a_commit_whose_meta_page_came_before_its_readers(
    tmp_path: Path,
) -> None:
    """LMDB writes a commit's meta page before readers see the commit (a durable commit
    flushes it in between). A view that polls in that moment must not take the file's
    newest transaction as read: once readers see it, the next poll reads it."""
    from control.writer import Writer as ControlWriter

    import retinue

    writer = ControlWriter(tmp_path / "store")
    try:
        with retinue.connect(writer.store) as remote:
            free_pages(remote)  # the interrupt's commit keeps the file's size
            remote.spawn("holder", "hold", name="b")
            blocker = remote.spawn("blocker", "hold", name="c", parent="/root/b")
            rt = Runtime.open(writer.store, readonly=True)
            try:
                wait_until(lambda: rt.get(blocker.id).state == AgentState.RUNNING)
                meta_page_ahead(writer.store, rt)
                live = LiveTree(rt, WebOptions(min_interval_s=0.02, max_interval_s=0.5))
                assert live.poll() is True
                remote.interrupt(blocker.id)  # the commit readers see next
                wait_until(lambda: rt.get(blocker.id).state == AgentState.INTERRUPTED)
                assert live.poll() is True
                snap = live.snapshot(0)
                assert snap is not None and snap.rows[blocker.id]["state"] == "interrupted"
            finally:
                rt.shutdown()
    finally:
        writer.stop()
