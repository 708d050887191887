"""A read-only view's timeline: the turns and model calls the store keeps, over HTTP."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient
from support import wait_settled, wait_until

from retinue import Profile, Runtime
from retinue.web import LiveTree, create_app

SOLO = Profile("solo", model="retinue/scripted", tools="none")


def test_the_timeline_of_a_closed_store_shows_its_turns_and_model_calls(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "store", profiles=[SOLO]) as writer:
        agent = writer.spawn("solo", "say hello", name="solo")
        first = wait_settled(writer, agent.id, 1, timeout=60)  # litellm imports first
        writer.follow_up(agent.id, "say it again")
        wait_settled(writer, agent.id, 2, timeout=30)
        calls = writer.inspect(agent.id).calls
    rt = Runtime.open(tmp_path / "store", readonly=True)
    live = LiveTree(rt)
    live.start()
    try:
        with TestClient(create_app(live), base_url="http://127.0.0.1") as client:
            url = f"/api/timeline?id={agent.id}"
            wait_until(lambda: client.get(url).status_code == 200, what="the first read")
            timeline = client.get(url).json()
    finally:
        live.stop()
        rt.shutdown()
    assert timeline["events"] is False
    spans = timeline["spans"]
    # A model span per call; a turn span for the earlier turn (the last is the agent's row).
    assert [(s["kind"], s["label"]) for s in spans] == [
        ("turn", "g1"),
        ("model", "retinue/scripted"),
        ("model", "retinue/scripted"),
    ]
    assert (spans[0]["start"], spans[0]["end"]) == (first.started_at, calls[0].ended_at)
    assert [(s["start"], s["end"]) for s in spans[1:]] == [
        (c.started_at, c.ended_at) for c in calls
    ]
    assert all(s["agent"] == agent.id and s["detail"].endswith(" tokens") for s in spans[1:])
