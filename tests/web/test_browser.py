"""The page in a real browser (headless Chromium) while a writer process runs a tree.

Needs Debian's ``chromium`` and the ``playwright`` package (``.ci/extras-web.sh``
installs both); without them the test skips and says why. With
``RETINUE_WEB_SCREENSHOT=docs/web-view.png`` it also saves a screenshot.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until

from retinue import Runtime
from retinue.web import WebOptions, serve
from web.conftest import Writer
from web.writer import HOSTILE

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


def test_the_page_shows_a_running_tree_live_and_escapes_output(writer: Writer) -> None:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
    )
    rt = Runtime.open(writer.store, readonly=True)
    web = serve(rt, port=0, options=WebOptions(min_interval_s=0.05, max_interval_s=0.5))
    try:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(TIMEOUT_MS)
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                _drive(page, web.url, writer)
                assert errors == []
            finally:
                browser.close()
    finally:
        web.stop()
        rt.shutdown()


def _row(page: Any, path_text: str) -> Any:
    return page.locator("tbody tr", has=page.locator("td.path", has_text=path_text))


def _drive(p: Any, url: str, writer: Writer) -> None:
    p.goto(url)
    lead = _row(p, "/root/review")
    lead.locator("button.toggle").click()
    # Every path of the tree appears, the worker still running.
    for name in ("worker", "hostile"):
        _row(p, name).wait_for()
    worker_state = _row(p, "worker").locator("td:nth-child(3)")
    assert worker_state.inner_text() == "running"
    hostile_state = _row(p, "hostile").locator("td:nth-child(3)")
    wait_until(lambda: hostile_state.inner_text() == "completed", 20)
    # The running lead shows the tool it is in (its spawn_subagents call).
    lead_result = lead.locator("td.result")
    wait_until(lambda: "spawn_subagents" in lead_result.inner_text(), 20)

    # Clicking an agent shows its transcript.
    lead.locator("td.path span").first.click()
    p.locator("#transcript .entry").first.wait_for()
    transcript = p.locator("#transcript").inner_text()
    assert "spawn_subagents" in transcript and "review the change" in transcript
    p.locator("#timeline .tl-row").nth(2).wait_for()

    # A hostile output is text: shown verbatim, never run, no element made of it.
    _row(p, "hostile").locator("td.path span").first.click()
    output = p.locator("#detail pre").nth(1)
    wait_until(lambda: output.inner_text() == HOSTILE, 20)
    assert p.evaluate("window.__pwned") is None
    assert p.locator("#detail script, #detail img, #rows img").count() == 0
    assert HOSTILE[:40] in _row(p, "hostile").locator("td.result").inner_text()

    # A state change shows without a reload: the marker set now survives.
    p.evaluate("window.__same_page = true")
    _row(p, "worker").locator("td.path span").first.click()
    shot = os.environ.get("RETINUE_WEB_SCREENSHOT")
    if shot:
        lead.locator("td.path span").first.click()
        p.locator("#transcript .entry").first.wait_for()
        p.wait_for_timeout(600)
        Path(shot).parent.mkdir(parents=True, exist_ok=True)
        p.screenshot(path=shot)
    writer.release()
    wait_until(lambda: worker_state.inner_text() == "completed", 30)
    lead_state = lead.locator("td:nth-child(3)")
    wait_until(lambda: lead_state.inner_text() == "completed", 30)
    assert p.evaluate("window.__same_page") is True
    assert "done" in writer.finish()
