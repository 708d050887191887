"""The view's actions over HTTP: the page's token and Origin, typed refusals, real state changes.

An in-process writer (gated Python runners, and a model agent on the offline
``retinue/scripted`` model whose ``list_dir`` call waits for approval) served
by the view's app with :class:`~retinue.web.RuntimeActions`; a read-only view
beside a writer process refuses every action and says where to act.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient
from support import wait_until

from retinue import AgentState, Profile, Runtime, Turn
from retinue.testing import Gate
from retinue.web import LiveTree, RuntimeActions, WebOptions, WriterNeeded, create_app, serve
from retinue.web.actions import WRITER_NEEDED
from retinue.web.tokens import TOKEN_HEADER, PageTokens
from web.conftest import Writer

FAST = WebOptions(min_interval_s=0.02, max_interval_s=0.5, heartbeat_s=0.5)
ORIGIN = "http://127.0.0.1"
SETTLE_S = 60.0


def _lead(gate: Gate) -> Any:
    def lead(turn: Turn) -> str:
        for name in ("one", "two"):
            turn.spawn("worker", f"work {name}", name=name)
        return gate(turn)

    return lead


def profiles(gate: Gate) -> list[Profile]:
    """A lead over two gated workers, and a model agent whose list_dir needs an approval."""
    return [
        Profile("lead", subagents=["worker"], runner=_lead(gate)),
        Profile("worker", runner=gate),
        Profile(
            "gated",
            model="retinue/scripted",
            tools=["list_dir", "read_file"],
            approve=["list_dir"],
        ),
    ]


@pytest.fixture
def acting(tmp_path: Path, gate: Gate) -> Iterator[tuple[TestClient, Runtime]]:
    """The view of an in-process writer, with actions, and its runtime (a lead and two workers)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    rt = Runtime.open(tmp_path / "store", profiles=profiles(gate), workspace=workspace)
    live = LiveTree(rt, FAST)
    live.start()
    lead = rt.spawn("lead", "run it", name="ops")
    wait_until(lambda: len(rt.agents()) == 3 and all(a.state == "running" for a in rt.agents()))
    app = create_app(live, actions=RuntimeActions(rt))
    try:
        with TestClient(app, base_url=ORIGIN) as client:
            assert lead.path == "/root/ops"
            yield client, rt
    finally:
        gate.release()
        live.stop()
        rt.shutdown()


def page_token(client: TestClient) -> str:
    """Load the page and return the action token it carries."""
    page = client.get("/")
    assert page.status_code == 200
    found = re.search(r'<meta name="retinue-action-token" content="([^"]*)">', page.text)
    assert found is not None, page.text[:400]
    return found.group(1)


def post(
    client: TestClient,
    action: str,
    body: Any,
    token: str | None,
    *,
    origin: str | None = ORIGIN,
    **headers: str,
) -> Any:
    """POST an action as the page does (its token in the header, its Origin, JSON)."""
    sent = {"content-type": "application/json", **headers}
    if token is not None:
        sent[TOKEN_HEADER] = token
    if origin is not None:
        sent["origin"] = origin
    return client.post(f"/api/actions/{action}", json=body, headers=sent)


def state(rt: Runtime, ref: str) -> AgentState:
    return rt.get(ref).state


def test_an_action_needs_its_pages_token_and_origin(
    acting: tuple[TestClient, Runtime],
) -> None:
    client, rt = acting
    token = page_token(client)
    assert token and page_token(client) != token  # one per page load
    worker = {"agent": "/root/ops/one"}
    refused = {
        "no token": post(client, "interrupt", worker, None),
        "a wrong token": post(client, "interrupt", worker, token[:-2] + "xx"),
        "another server's token": post(client, "interrupt", worker, PageTokens().issue()),
        "no Origin": post(client, "interrupt", worker, token, origin=None),
        "another site's Origin": post(
            client, "interrupt", worker, token, origin="http://evil.example"
        ),
    }
    for why, response in refused.items():
        assert response.status_code == 403, (why, response.text)
    assert "action token" in refused["no token"].json()["error"]
    assert "no Origin header" in refused["no Origin"].json()["error"]
    assert "evil.example" in refused["another site's Origin"].json()["error"]
    assert state(rt, "/root/ops/one") is AgentState.RUNNING  # nothing was done

    bad = {
        "unknown action": (post(client, "explode", worker, token), 404, "no action 'explode'"),
        "not JSON": (
            post(client, "interrupt", worker, token, **{"content-type": "text/plain"}),
            415,
            "JSON",
        ),
        "a bad field": (post(client, "interrupt", {"agnt": "x"}, token), 400, "bad interrupt"),
        "too big": (
            post(client, "interrupt", {"agent": "x" * 20_000}, token),
            413,
            "at most 16384 bytes",
        ),
    }
    for why, (response, status, text) in bad.items():
        assert response.status_code == status, (why, response.text)
        assert text in response.json()["error"], (why, response.json())
    assert client.get("/api/actions/interrupt").status_code == 405
    assert state(rt, "/root/ops/one") is AgentState.RUNNING


def test_a_refused_action_answers_its_typed_error_text(
    acting: tuple[TestClient, Runtime],
) -> None:
    client, rt = acting
    token = page_token(client)
    cases = [
        ("resume", {"agent": "/root/ops/one"}, 409, "AgentStateError: ", "only an interrupted"),
        ("close", {"agent": "/root/ops"}, 409, "ActiveDescendants: ", "live children"),
        ("interrupt", {"agent": "/root/nobody"}, 404, "UnknownAgent: ", "/root/nobody"),
        ("approve", {"request": "nope"}, 404, "UnknownApproval: ", "nope"),
        ("deny", {"request": "nope", "reason": " "}, 400, "InvalidArgument: ", "blank"),
    ]
    for action, body, status, kind, text in cases:
        response = post(client, action, body, token)
        assert response.status_code == status, (action, response.text)
        answer = response.json()
        assert answer["ok"] is False and answer["type"] == kind[:-2], answer
        assert answer["error"].startswith(kind) and text in answer["error"], answer
    assert [a.state for a in rt.agents()] == [AgentState.RUNNING] * 3


def test_actions_change_the_state(acting: tuple[TestClient, Runtime], gate: Gate) -> None:
    client, rt = acting
    token = page_token(client)

    def act(action: str, body: dict[str, Any]) -> str:
        response = post(client, action, body, token)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["ok"] is True, answer
        done: str = answer["done"]
        return done

    assert act("interrupt", {"agent": "/root/ops/one"}) == (
        "interrupted /root/ops/one: now interrupted"
    )
    assert state(rt, "/root/ops/one") is AgentState.INTERRUPTED
    assert act("resume", {"agent": "/root/ops/one"}).startswith("resumed /root/ops/one: now")
    wait_until(lambda: state(rt, "/root/ops/one") is AgentState.RUNNING)
    done = act("interrupt_tree", {"agent": "/root/ops"})
    assert done == "interrupted the tree: 3 live agents, 3 now interrupted"
    assert {a.state for a in rt.agents()} == {AgentState.INTERRUPTED}
    assert act("close", {"agent": "/root/ops/two"}) == "closed /root/ops/two: now closed"
    assert state(rt, "/root/ops/one") is AgentState.INTERRUPTED
    assert [a.path for a in rt.agents()] == ["/root/ops", "/root/ops/one"]

    # A model's call that waits for approval: listed in the agent's detail, answered there.
    for name in ("yes", "no"):
        rt.spawn("gated", "look around", name=name)
    parked = {"/root/yes", "/root/no"}
    wait_until(
        lambda: {a.path for a in rt.agents() if a.state is AgentState.AWAITING_APPROVAL} == parked,
        timeout=SETTLE_S,
    )
    detail = client.get("/api/agent?id=/root/yes").json()
    (request,) = detail["approvals"]
    assert (request["tool"], request["arguments"]) == ("list_dir", '{"path": "."}')
    assert act("approve", {"request": request["id"], "note": "fine"}) == (
        f"approved request {request['id']}"
    )
    assert rt.wait("/root/yes", timeout=SETTLE_S).status == "completed"
    (denied,) = client.get("/api/agent?id=/root/no").json()["approvals"]
    act("deny", {"request": denied["id"], "reason": "not today"})
    assert rt.wait("/root/no", timeout=SETTLE_S).status == "completed"
    transcript = client.get("/api/agent?id=/root/no").json()["transcript"]
    assert any("denied: not today" in (m["content"] or "") for m in transcript)
    # Answered once: a second answer is refused with its reason.
    again = post(client, "approve", {"request": request["id"]}, token)
    assert again.status_code == 409 and again.json()["type"] == "ApprovalAlreadyAnswered"


def test_a_browsers_cookie_alone_never_acts(tmp_path: Path, gate: Gate) -> None:
    # Off loopback a browser holds the server's cookie (it stands for the bearer token);
    # another site can make it send that cookie, but an action also needs the page's token.
    with Runtime.open(tmp_path / "store", profiles=[Profile("w", runner=gate)]) as rt:
        rt.spawn("w", "work", name="w")
        web = serve(rt, port=0, token="s3cret", actions=True, options=FAST)
        try:
            with httpx.Client(base_url=web.url, timeout=10, follow_redirects=True) as browser:
                assert browser.get("/").status_code == 401
                assert browser.get("/?token=s3cret").status_code == 200  # via the cookie
                found = re.search(r'token" content="([^"]+)"', browser.get("/").text)
                assert found is not None
                headers = {"origin": web.url.rstrip("/")}
                body = {"agent": "/root/w"}
                cookie_only = browser.post("/api/actions/interrupt", json=body, headers=headers)
                assert cookie_only.status_code == 403, cookie_only.text
                assert "action token" in cookie_only.json()["error"]
                assert rt.get("/root/w").state is AgentState.RUNNING
                headers[TOKEN_HEADER] = found.group(1)
                done = browser.post("/api/actions/interrupt", json=body, headers=headers)
                assert done.status_code == 200 and done.json()["ok"] is True, done.text
            assert rt.get("/root/w").state is AgentState.INTERRUPTED
            # Without the cookie (or bearer header) the server's own guard refuses first.
            anonymous = httpx.post(web.url + "api/actions/resume", json=body, headers=headers)
            assert anonymous.status_code == 401
        finally:
            web.stop()


def test_a_view_without_actions_refuses_every_post(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "store", profiles=[Profile("p", runner=lambda t: "ok")]) as rt:
        live = LiveTree(rt, FAST)
        live.start()
        try:
            with TestClient(create_app(live), base_url=ORIGIN) as client:
                assert page_token(client) == ""  # no token: the page shows no buttons
                assert client.get("/api/summary").json()["actions"] is False
                response = post(client, "interrupt", {"agent": "/root/x"}, "anything")
                assert response.status_code == 403
                assert "started without actions" in response.json()["error"]
        finally:
            live.stop()


def test_a_read_only_view_says_actions_need_the_writer(writer: Writer) -> None:
    rt = Runtime.open(writer.store, readonly=True)
    web = serve(rt, port=0, actions=True, options=FAST)
    try:
        url = web.url
        page = httpx.get(url, timeout=10)
        found = re.search(r'name="retinue-action-token" content="([^"]+)"', page.text)
        assert found is not None
        summary = httpx.get(url + "api/summary", timeout=10).json()
        assert summary["actions"] is True and summary["readonly"] is True
        headers = {
            TOKEN_HEADER: found.group(1),
            "origin": url.rstrip("/"),
            "content-type": "application/json",
        }
        response = httpx.post(
            url + "api/actions/interrupt_tree",
            json={"agent": "/root/review"},
            headers=headers,
            timeout=10,
        )
        assert response.status_code == 503
        assert response.json() == {
            "ok": False,
            "error": f"StoreReadOnly: {WRITER_NEEDED}",
            "type": "StoreReadOnly",
        }
        assert rt.get("/root/review").state is AgentState.RUNNING
    finally:
        web.stop()
        rt.shutdown()


def test_writer_needed_answers_every_action() -> None:
    import asyncio

    refuse = WriterNeeded()

    async def every() -> list[str]:
        answers = [
            await refuse.approve("r", None),
            await refuse.deny("r", "no"),
            await refuse.interrupt("a"),
            await refuse.interrupt_tree("a"),
            await refuse.resume("a"),
            await refuse.close("a"),
        ]
        return [f"{a.status} {a.text}" for a in answers]

    assert set(asyncio.run(every())) == {f"503 StoreReadOnly: {WRITER_NEEDED}"}
