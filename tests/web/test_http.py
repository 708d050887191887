"""The web view's endpoints over HTTP (Starlette's test client), read-only beside a writer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient
from support import wait_until

from retinue import Runtime
from retinue.web import LiveTree, WebOptions, create_app
from retinue.web.stored import read_spans
from web.conftest import Writer
from web.writer import HOSTILE

FAST = WebOptions(min_interval_s=0.02, max_interval_s=0.5, heartbeat_s=0.5)


@pytest.fixture
def served(writer: Writer) -> Iterator[tuple[TestClient, LiveTree]]:
    """The view of the writer's store, served from a read-only runtime in this process."""
    rt = Runtime.open(writer.store, readonly=True)
    live = LiveTree(rt, FAST)
    live.start()
    with TestClient(create_app(live), base_url="http://127.0.0.1") as client:
        yield client, live
    live.stop()
    rt.shutdown()


def _get(client: TestClient, url: str) -> Any:
    response = client.get(url)
    assert response.status_code == 200, (url, response.text)
    return response.json()


def _children(client: TestClient, parent: str = "") -> dict[str, dict[str, Any]]:
    rows = _get(client, f"/api/children?parent={parent}")["rows"]
    return {row["path"]: row for row in rows}


def _tree(client: TestClient) -> dict[str, dict[str, Any]]:
    """Every agent the view shows, by path (top level and the lead's children)."""
    top = _children(client)
    if "/root/review" not in top:
        return top
    return {**top, **_children(client, top["/root/review"]["id"])}


def _sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Parse a server-sent event stream into (event, data) pairs (comments skipped)."""
    messages = []
    for block in text.strip().split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":")
        )
        if "event" in fields:
            messages.append((fields["event"], json.loads(fields["data"])))
    return messages


def test_the_page_is_static_and_its_script_never_writes_html(
    served: tuple[TestClient, LiveTree],
) -> None:
    client, _ = served
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script src="/static/app.js"></script>' in page.text
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    for name in ("listing.js", "detail.js", "actions.js", "timeline.js", "app.js"):
        assert f'<script src="/static/{name}"></script>' in page.text
        script = client.get(f"/static/{name}")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        # Agent output is untrusted: the page only ever sets text, never markup.
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in script.text, (name, sink)
    assert "node.textContent = String(text)" in client.get("/static/app.js").text  # el()
    assert client.get("/static/style.css").status_code == 200
    assert client.get("/static/secret.py").status_code == 404
    assert client.get("/static/..%2Fapp.py").status_code == 404
    assert client.get("/favicon.ico").status_code == 204


def test_a_read_only_view_follows_its_writer_in_another_process(
    served: tuple[TestClient, LiveTree], writer: Writer
) -> None:
    client, live = served
    # _tree reads two pages, maybe from two reads of the store: wait for both to agree.
    # The writer process imports litellm before its first model call (seconds, more
    # on a loaded machine), so the first wait allows for that.
    tree = wait_until(
        lambda: len(t := _tree(client)) == 3 and t["/root/review"]["kids"] == 2 and t,
        timeout=60,
        what="the three agents",
    )
    assert tree["/root/review"]["profile"] == "lead" and tree["/root/review"]["kids"] == 2
    worker, hostile = tree["/root/review/worker"], tree["/root/review/hostile"]
    assert worker["state"] == "running" and worker["parent"] == tree["/root/review"]["id"]
    wait_until(lambda: _tree(client)["/root/review/hostile"]["state"] == "completed")

    # The lead waits in its spawn_subagents call: the tool in progress, read from its transcript.
    lead = _get(client, f"/api/agent?id={tree['/root/review']['id']}")
    assert lead["state"] == "running" and lead["tool"] == "spawn_subagents"
    assert lead["task"] == "review the change"
    calls = [c["name"] for entry in lead["transcript"] for c in entry["tool_calls"]]
    assert calls == ["spawn_subagents"]
    assert lead["ancestors"] == []
    row = wait_until(lambda: (r := _tree(client)["/root/review"])["tool"] and r)
    assert row["tool"] == "spawn_subagents"

    # Untrusted output goes out as data, exactly as the agent wrote it.
    detail = _get(client, f"/api/agent?id={hostile['id']}")
    assert detail["output"] == HOSTILE
    assert detail["ancestors"] == [{"id": tree["/root/review"]["id"], "path": "/root/review"}]
    by_path = _get(client, "/api/agent?id=/root/review/hostile")
    assert by_path["id"] == hostile["id"]

    timeline = _get(client, f"/api/timeline?id={worker['id']}")
    assert timeline["top"] == tree["/root/review"]["id"]
    assert timeline["agents"][0]["path"] == "/root/review"
    assert {a["path"] for a in timeline["agents"]} == set(tree)
    assert timeline["events"] is False  # a read-only view has the store's times only
    # The lead's first model call (it answered spawn_subagents), from its stored transcript.
    lead_id = tree["/root/review"]["id"]
    models = [s for s in timeline["spans"] if s["kind"] == "model"]
    assert [(s["agent"], s["label"]) for s in models] == [(lead_id, "retinue/scripted")]
    started = next(a for a in timeline["agents"] if a["id"] == lead_id)["started_at"]
    assert started <= models[0]["start"] <= models[0]["end"]
    assert timeline["calls_read"] == 3
    # The reads stop once WebOptions.timeline_read_s is spent (the first is always made).
    ids = [lead_id, worker["id"], hostile["id"]]
    spans, read = asyncio.run(read_spans(live.rt, ids, 10, budget_s=1e-9))
    assert read == 1 and {s.agent_id for s in spans} == {lead_id}

    found = _get(client, "/api/search?q=WORK")
    assert [r["path"] for r in found["rows"]] == ["/root/review/worker"] and found["total"] == 1

    summary = _get(client, "/api/summary")
    assert summary["readonly"] is True and summary["agents"] == 3
    assert summary["states"]["running"] == 2 and summary["states"]["completed"] == 1
    before = summary["version"]

    writer.release()  # the writer finishes its tree; the view sees it without a restart
    wait_until(lambda: all(r["state"] == "completed" for r in _tree(client).values()))
    assert "done" in writer.finish()
    after = _get(client, "/api/summary")
    assert after["version"] > before and after["states"] == {"completed": 3}
    assert after["tokens"] > 0  # the lead's model calls, summed over its tree
    timeline = _get(client, f"/api/timeline?id={lead_id}")
    models = [s for s in timeline["spans"] if s["kind"] == "model"]
    assert [s["agent"] for s in models] == [lead_id, lead_id]  # its answer's call, too
    assert models[0]["end"] <= models[1]["start"]

    # A stream started at an older version gets what changed since, or is told to reload.
    stream = client.get(f"/api/events?since={before}&max_messages=2")
    assert stream.headers["content-type"].startswith("text/event-stream")
    (hello_kind, hello), (kind, update) = _sse(stream.text)
    assert hello_kind == "hello" and hello["version"] == after["version"]
    assert kind in ("update", "reset") and update["version"] == after["version"]
    if kind == "update":
        assert {r["state"] for r in update["rows"]} == {"completed"}
        assert update["summary"]["states"] == {"completed": 3}
    skips = live.skips
    wait_until(lambda: live.skips > skips + 2, what="polls that skip the read")


def test_bad_queries_get_a_reason_and_the_right_status(
    served: tuple[TestClient, LiveTree],
) -> None:
    client, _ = served
    wait_until(lambda: _children(client))
    cases = {
        "/api/children?offset=-1": (400, "offset must be between"),
        "/api/children?limit=abc": (400, "limit must be a whole number"),
        "/api/children?limit=100000": (400, "limit must be between 1 and 1000"),
        "/api/children?closed=maybe": (400, "closed must be 0 or 1"),
        "/api/children?parent=nobody": (404, "no agent 'nobody'"),
        "/api/agent": (400, "id is required"),
        "/api/agent?id=/root/nobody": (404, "/root/nobody"),
        "/api/agent?id=/root/a/../b": (400, ""),
        "/api/agent?id=/root/review&tail=-1": (400, "tail must be between"),
        "/api/timeline?id=nobody": (404, "no agent"),
        "/api/search": (400, "q or state is required"),
        "/api/search?state=asleep": (400, "state must be one of"),
        "/api/events?since=abc": (400, "since must be a version number"),
    }
    for url, (status, text) in cases.items():
        response = client.get(url)
        assert response.status_code == status, (url, response.text)
        assert text in response.json()["error"], (url, response.json())
    assert client.post("/api/summary").status_code == 405
    assert client.delete("/api/agent?id=/root/review").status_code == 405
    # DNS rebinding: a page from another site resolving to 127.0.0.1 is refused.
    assert client.get("/api/summary", headers={"host": "evil.example"}).status_code == 421
