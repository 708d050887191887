"""The page in a real browser (headless Chromium) while a writer process runs a tree.

Needs Debian's ``chromium`` and the ``playwright`` package (``.ci/extras-web.sh``
installs both); without them the test skips and says why. With
``RETINUE_WEB_SCREENSHOT=docs/web-view.png`` it also saves a screenshot.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import wait_until

from retinue import AgentState, Runtime
from retinue.testing import Gate
from retinue.web import WebOptions, serve
from web.conftest import Writer
from web.test_actions import FAST, profiles
from web.writer import HOSTILE, WIDE_PATHS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on this machine (apt-get install -y chromium)"
)
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 20_000


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium driven by playwright (skips, saying why, without it)."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
    )
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _page(browser: Any) -> tuple[Any, list[str]]:
    """A new page, and the script errors it raises."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return page, errors


def test_the_page_shows_a_running_tree_live_and_escapes_output(
    wide_writer: Writer, browser: Any
) -> None:
    rt = Runtime.open(wide_writer.store, readonly=True)
    web = serve(rt, port=0, options=WebOptions(min_interval_s=0.05, max_interval_s=0.5))
    try:
        page, errors = _page(browser)
        _drive(page, web.url, wide_writer)
        assert errors == []
    finally:
        web.stop()
        rt.shutdown()


def _row(page: Any, path: str) -> Any:
    return page.locator(f'tbody tr[data-path="{path}"]')


def _state(page: Any, path: str) -> Any:
    return _row(page, path).locator("td:nth-child(3)")


def _open(page: Any, path: str) -> None:
    """Click an agent's row and wait until its detail (and its buttons) is shown."""
    _row(page, path).click()
    heading = page.locator("#detail h3")
    wait_until(lambda: heading.count() == 1 and heading.inner_text() == path)


def _drive(p: Any, url: str, writer: Writer) -> None:
    p.goto(url)
    # A small tree opens expanded: every path of the six appears without a click, each
    # row carrying its full path (in the DOM, and on hover).
    for path in WIDE_PATHS:
        _row(p, path).wait_for()
    rows = p.locator("tbody tr")
    shown = [rows.nth(i).get_attribute("data-path") for i in range(rows.count())]
    assert sorted(shown) == sorted(WIDE_PATHS)
    assert [rows.nth(i).get_attribute("title") for i in range(rows.count())] == shown
    for at, path in enumerate(shown):  # each parent above its children
        assert path.rsplit("/", 1)[0] in ("/root", *shown[:at])
    assert _state(p, "/root/review/worker").inner_text() == "running"
    hostile_state = _state(p, "/root/review/hostile")
    wait_until(lambda: hostile_state.inner_text() == "completed", 20)
    # The running lead shows the tool it is in (its spawn_subagents call).
    lead = _row(p, "/root/review")
    lead_result = lead.locator("td.result")
    wait_until(lambda: "spawn_subagents" in lead_result.inner_text(), 20)
    # A parent whose subtree holds a failed agent is marked, up to the top.
    wait_until(lambda: _state(p, "/root/review/checker/two").inner_text() == "failed", 30)
    marked = p.locator("tbody tr.has-failed")
    wait_until(lambda: marked.count() == 2)
    marked_paths = {marked.nth(i).get_attribute("data-path") for i in range(2)}
    assert marked_paths == {"/root/review", "/root/review/checker"}
    for parent in ("/root/review", "/root/review/checker"):
        assert _row(p, parent).locator(".mark-failed").inner_text() == "⚠ 1"
    assert _row(p, "/root/review/worker").locator(".mark").count() == 0

    # The state filter: counts to click; the list gives full paths.
    failed = p.locator('#filters button[data-state="failed"]')
    wait_until(lambda: failed.get_attribute("data-count") == "1")
    failed.click()
    wait_until(lambda: rows.count() == 1 and rows.first.get_attribute("data-path") == WIDE_PATHS[5])
    assert "two" in rows.first.locator("td.path").inner_text()
    assert "1 failed agents" in p.locator("#results").inner_text()
    failed.click()  # off again: the whole tree
    wait_until(lambda: rows.count() == 6)
    # Search by profile (hostile is also a name) and by path.
    p.fill("#search", "checker")
    wait_until(lambda: rows.count() == 3)  # the checker and its two leaves, by path
    p.fill("#search", "LEAF")
    wait_until(lambda: rows.count() == 2)  # one and two, by profile
    p.locator("#results button").click()
    wait_until(lambda: rows.count() == 6 and p.input_value("#search") == "")

    # Clicking an agent shows its transcript.
    lead.locator("td.path span").first.click()
    p.locator("#transcript .entry").first.wait_for()
    transcript = p.locator("#transcript").inner_text()
    assert "spawn_subagents" in transcript and "review the change" in transcript
    p.locator("#timeline .tl-row").nth(5).wait_for()
    assert p.locator("#actions").count() == 0  # started without actions: no buttons

    # A hostile output is text: shown verbatim, never run, no element made of it.
    _row(p, "/root/review/hostile").locator("td.path span").first.click()
    output = p.locator("#detail pre").nth(1)
    wait_until(lambda: output.inner_text() == HOSTILE, 20)
    assert p.evaluate("window.__pwned") is None
    assert p.locator("#detail script, #detail img, #rows img").count() == 0
    assert HOSTILE[:40] in _row(p, "/root/review/hostile").locator("td.result").inner_text()

    # A state change shows without a reload: the marker set now survives.
    p.evaluate("window.__same_page = true")
    worker_state = _state(p, "/root/review/worker")
    _row(p, "/root/review/worker").locator("td.path span").first.click()
    shot = os.environ.get("RETINUE_WEB_SCREENSHOT")
    if shot:
        lead.locator("td.path span").first.click()
        p.locator("#transcript .entry").first.wait_for()
        p.wait_for_timeout(600)
        Path(shot).parent.mkdir(parents=True, exist_ok=True)
        p.screenshot(path=shot)
    assert p.locator("#conn").inner_text() == "live"
    writer.release()
    wait_until(lambda: worker_state.inner_text() == "completed", 30)
    lead_state = _state(p, "/root/review")
    wait_until(lambda: lead_state.inner_text() == "completed", 30)
    assert p.evaluate("window.__same_page") is True
    assert "done" in writer.finish()
    # The writer closed the store: no process writes it now, and the badge says so.
    wait_until(lambda: p.locator("#conn").inner_text() == "writer stopped", 30)


def test_a_dead_writer_is_shown_with_what_was_running(writer: Writer, browser: Any) -> None:
    rt = Runtime.open(writer.store, readonly=True)
    web = serve(rt, port=0, options=WebOptions(min_interval_s=0.05, max_interval_s=0.5))
    try:
        p, errors = _page(browser)
        p.goto(web.url)
        worker = _state(p, "/root/review/worker")
        wait_until(lambda: worker.inner_text() == "running", 60)
        badge = p.locator("#conn")
        wait_until(lambda: badge.inner_text() == "live")
        writer.kill()
        wait_until(lambda: badge.inner_text() == "writer stopped", 30)
        assert "exited without closing it" in (badge.get_attribute("title") or "")
        assert worker.inner_text() == "running when the writer stopped"
        assert _state(p, "/root/review").inner_text() == "running when the writer stopped"
        # Its time stops with the writer: it does not count on.
        time_cell = _row(p, "/root/review/worker").locator("td:nth-child(4)")
        before = time_cell.inner_text()
        p.wait_for_timeout(1500)
        assert time_cell.inner_text() == before
        assert errors == []
    finally:
        web.stop()
        rt.shutdown()


def test_actions_in_the_page_carry_its_token_and_show_their_answer(
    tmp_path: Path, gate: Gate, browser: Any
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    try:
        from opentelemetry.sdk.trace import TracerProvider

        provider: Any = TracerProvider()
    except ImportError:  # the trace link is checked only with the SDK
        provider = None
    rt = Runtime.open(
        tmp_path / "store",
        profiles=profiles(gate),
        workspace=workspace,
        tracer_provider=provider,
    )
    template = "http://127.0.0.1:16686/trace/{trace_id}"
    web = serve(rt, port=0, actions=True, trace_url=template, options=FAST)
    try:
        rt.spawn("lead", "run it", name="ops")
        rt.spawn("gated", "look around", name="gate")
        p, errors = _page(browser)
        posts: list[Any] = []
        p.on("request", lambda request: posts.append(request) if request.method == "POST" else None)
        p.on("dialog", lambda dialog: dialog.accept())  # close and interrupt tree ask first
        p.goto(web.url)
        for path in ("/root/ops", "/root/ops/one", "/root/ops/two", "/root/gate"):
            _row(p, path).wait_for()
        result = p.locator("#action-result")

        # The waiting agent, found by the filter; a denial without a reason is refused.
        waiting = p.locator('#filters button[data-state="awaiting_approval"]')
        wait_until(lambda: waiting.get_attribute("data-count") == "1", 60)
        waiting.click()
        rows = p.locator("tbody tr")
        wait_until(
            lambda: rows.count() == 1 and rows.first.get_attribute("data-path") == "/root/gate"
        )
        _open(p, "/root/gate")
        p.locator(".approval button.act-deny").click()
        wait_until(lambda: result.count() == 1 and result.get_attribute("data-ok") == "0")
        assert result.inner_text() == "InvalidArgument: reason must not be blank (it is empty)"
        p.fill(".approval input.reason", "not today")
        p.locator(".approval button.act-deny").click()
        wait_until(lambda: result.get_attribute("data-ok") == "1")
        assert result.inner_text().startswith("denied request ")
        assert rt.wait("/root/gate", timeout=60).status == "completed"
        wait_until(lambda: rows.count() == 0)  # no longer awaiting approval
        waiting.click()
        wait_until(lambda: rows.count() == 4)

        # Interrupt and resume a worker; the row follows.
        one = _state(p, "/root/ops/one")
        _open(p, "/root/ops/one")
        p.locator('#actions button[data-action="interrupt"]').click()
        wait_until(lambda: result.inner_text() == "interrupted /root/ops/one: now interrupted")
        wait_until(lambda: one.inner_text() == "interrupted")
        p.locator('#actions button[data-action="resume"]').click()
        wait_until(lambda: result.inner_text().startswith("resumed /root/ops/one: now"))
        wait_until(lambda: one.inner_text() == "running")

        # Closing a parent with live children: the typed refusal, shown as it is.
        _open(p, "/root/ops")
        p.locator('#actions button[data-action="close"]').click()
        wait_until(lambda: result.get_attribute("data-ok") == "0")
        assert result.inner_text().startswith("ActiveDescendants: /root/ops has 2 live children")
        assert rt.get("/root/ops").state is AgentState.RUNNING
        p.locator('#actions button[data-action="interrupt_tree"]').click()
        wait_until(lambda: result.get_attribute("data-ok") == "1")
        states = p.locator("tbody tr td:nth-child(3)")
        wait_until(lambda: [states.nth(i).inner_text() for i in range(3)] == ["interrupted"] * 3)

        # Every action carried the page's own token, from the page's origin.
        token = p.locator('meta[name="retinue-action-token"]').get_attribute("content")
        assert token and len(posts) == 6
        for request in posts:
            headers = request.all_headers()  # as sent (Origin included)
            assert headers["x-retinue-action-token"] == token
            assert headers["origin"] == web.url.rstrip("/")
        if provider is not None:  # a child spawned in its parent's turn has its trace at once
            _open(p, "/root/ops/one")
            link = p.locator("#detail a.trace")
            trace_id = link.inner_text()
            assert re.fullmatch(r"[0-9a-f]{32}", trace_id)
            assert link.get_attribute("href") == template.replace("{trace_id}", trace_id)

        # The timeline: a legend, round ticks for a short or a long tree, and zoom.
        assert p.locator("#tl-legend span").count() >= 8
        ticks = p.locator("#timeline .tick")
        wait_until(lambda: ticks.count() >= 2)
        p.locator("#tl-in").click()
        wait_until(lambda: p.locator("#tl-scale").inner_text().startswith("×2.0"))
        p.locator("#tl-fit").click()
        wait_until(lambda: p.locator("#tl-scale").inner_text() == "")
        short = p.evaluate("niceTicks(0, 0.8, 6).map((t) => t.label)")
        assert short == ["+0ms", "+200ms", "+400ms", "+600ms", "+800ms"]
        long = p.evaluate("niceTicks(0, 3 * 3600, 6).map((t) => t.label)")
        assert long == ["+0s", "+30m", "+1h", "+1h30m", "+2h", "+2h30m", "+3h"]
        assert p.evaluate("niceTicks(90, 150, 6).map((t) => t.label)") == [
            "+1m30s",
            "+1m40s",
            "+1m50s",
            "+2m",
            "+2m10s",
            "+2m20s",
            "+2m30s",
        ]
        assert errors == []
    finally:
        gate.release()
        web.stop()
        rt.shutdown()
        if provider is not None:
            provider.shutdown()


def test_a_separate_view_acts_through_the_writers_control_socket(
    tmp_path: Path, browser: Any
) -> None:
    """``retinue web --store --actions``: a read-only view in this process, the writer in
    another; the page's buttons go through the writer's control socket."""
    from control.writer import Writer as ControlWriter

    import retinue
    from retinue.web.socket_actions import NO_WRITER, SocketActions

    writer = ControlWriter(tmp_path / "store")
    with retinue.connect(writer.store) as remote:
        remote.spawn("holder", "hold", name="b")
        remote.spawn("blocker", "hold", name="c", parent="/root/b")
    rt = Runtime.open(writer.store, readonly=True)
    acting = SocketActions(writer.store)
    web = serve(rt, port=0, actions=acting, options=FAST)
    try:
        p, errors = _page(browser)
        p.on("dialog", lambda dialog: dialog.accept())  # close asks first
        p.goto(web.url)
        blocker = _state(p, "/root/b/c")
        wait_until(lambda: blocker.inner_text() == "running", 60)
        result = p.locator("#action-result")
        _open(p, "/root/b/c")
        p.locator('#actions button[data-action="interrupt"]').click()
        wait_until(lambda: result.count() == 1 and result.get_attribute("data-ok") == "1")
        assert result.inner_text() == "interrupted /root/b/c: now interrupted"
        wait_until(lambda: blocker.inner_text() == "interrupted", 30)
        p.locator('#actions button[data-action="resume"]').click()
        wait_until(lambda: result.inner_text().startswith("resumed /root/b/c: now"), 30)
        wait_until(lambda: blocker.inner_text() == "running", 30, "/root/b/c running again")
        # The writer goes away: the buttons say that no writer runs (and act no more).
        writer.kill()
        p.locator('#actions button[data-action="close"]').click()  # offered in every state
        wait_until(lambda: result.inner_text().startswith("StoreReadOnly: "), 30)
        assert result.inner_text() == f"StoreReadOnly: {NO_WRITER}"
        assert errors == []
    finally:
        web.stop()
        acting.disconnect()
        rt.shutdown()
        writer.stop()
