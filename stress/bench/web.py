"""Web view benchmark: the page's first load and its updates on a store of many agents.

``python -m stress.bench.web [--agents 100000] [--browser]`` (needs the ``web``
extra; ``--browser`` also needs chromium and playwright). The store is built as
:mod:`stress.bench.reopen` builds it (top-level agents with seven children
each, 1% left running). The view is served by ``retinue web``'s code from a
read-only runtime in this process; a writer in another process opens the
store (its restore interrupts the running agents: one large change) and then
spawns agents one at a time. Baseline, measured in the same run: one plain
``rt.agents()`` read of the same store through the public API.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from retinue import Runtime
from retinue.web import WebOptions, WebServer, serve
from stress.bench.reopen import build_store

WRITER = """
import sys, time
from retinue import Limits, Profile, Runtime
store, count = sys.argv[1], int(sys.argv[2])
with Runtime.open(store, profiles=[Profile("worker", runner=lambda t: "ok")],
                  limits=Limits(max_agents=1_000_000)) as rt:
    print("opened", time.time(), flush=True)
    for n in range(count):
        sys.stdin.readline()
        info = rt.spawn("worker", "bench", name=f"bench_{n}")
        print("spawned", info.id, time.time(), flush=True)
"""


def _timed(client: httpx.Client, url: str) -> tuple[float, int, Any]:
    t0 = time.perf_counter()
    response = client.get(url)
    response.raise_for_status()
    return time.perf_counter() - t0, len(response.content), response


def _listen(url: str, seen: dict[str, float], stop: threading.Event) -> None:
    """Record when each agent id first arrives in an ``update`` of the stream."""
    with httpx.stream("GET", url + "api/events", timeout=None) as response:
        kind = None
        for line in response.iter_lines():
            if stop.is_set():
                return
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind in ("update", "reset"):
                data = json.loads(line[6:])
                now = time.time()
                seen.setdefault(f"{kind}:{data['version']}", now)
                for row in data.get("rows", []):
                    seen.setdefault(row["id"], now)
                seen.setdefault("bytes:" + str(data["version"]), len(line))


def _browser_first_load(url: str) -> float | None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        page = browser.new_page()
        t0 = time.perf_counter()
        page.goto(url)
        page.locator("tbody tr").nth(199).wait_for(timeout=120_000)
        took = time.perf_counter() - t0
        browser.close()
    return took


def run(agents: int = 100_000, updates: int = 5, browser: bool = False) -> dict[str, Any]:
    """Build the store, serve it, measure; return the figures."""
    out: dict[str, Any] = {"agents": agents}
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        build_store(store, agents)
        t0 = time.perf_counter()
        rt = Runtime.open(store, readonly=True)
        out["open_readonly_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        rt.agents(include_closed=True)
        baseline = time.perf_counter() - t0
        out["baseline_agents_read_s"] = round(baseline, 2)
        t0 = time.perf_counter()
        web = serve(rt, port=0, options=WebOptions())
        web.live.snapshot(300)
        out["first_snapshot_s"] = round(time.perf_counter() - t0, 2)
        out["snapshot_vs_baseline"] = round(web.live.read_s / baseline, 2)
        _first_load(web.url, out)
        if browser:
            first = _browser_first_load(web.url)
            out["browser_first_200_rows_s"] = None if first is None else round(first, 2)
        _idle(web, out)
        _updates(web, store, updates, out)
        out["rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        web.stop()
        rt.shutdown()
    return out


def _first_load(url: str, out: dict[str, Any]) -> None:
    """The page's first load over HTTP, then an expand, a far page, a search, a detail."""
    with httpx.Client(base_url=url, timeout=300) as client:
        load = 0.0
        size = 0
        for path in (
            "/",
            "/static/app.js",
            "/static/style.css",
            "/api/summary",
            "/api/children?parent=&limit=200",
        ):
            took, nbytes, response = _timed(client, path)
            load += took
            size += nbytes
        top = response.json()
        out["first_load_http_s"] = round(load, 3)
        out["first_load_bytes"] = size
        out["top_level_agents"] = top["total"]
        took, _, _ = _timed(client, f"/api/children?parent={top['rows'][0]['id']}")
        out["expand_ms"] = round(took * 1000, 1)
        took, _, _ = _timed(client, "/api/children?parent=&offset=12000&limit=200")
        out["page_at_12000_ms"] = round(took * 1000, 1)
        took, _, _ = _timed(client, "/api/search?q=agent_00")
        out["search_ms"] = round(took * 1000, 1)
        took, _, _ = _timed(client, f"/api/agent?id={top['rows'][0]['id']}")
        out["agent_detail_s"] = round(took, 2)
        took, _, _ = _timed(client, f"/api/timeline?id={top['rows'][0]['id']}")
        out["timeline_ms"] = round(took * 1000, 1)


def _idle(web: WebServer, out: dict[str, Any]) -> None:
    """Five idle seconds: no commit, so no read."""
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    polls0, skips0 = web.live.polls, web.live.skips
    time.sleep(5)
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
    out["idle_5s_reads"] = web.live.polls - polls0
    out["idle_5s_skipped_polls"] = web.live.skips - skips0
    out["idle_cpu_share"] = round(cpu / 5, 3)


def _updates(web: WebServer, store: Path, updates: int, out: dict[str, Any]) -> None:
    """Updates from a writer in another process: how soon each new agent reaches the stream."""
    seen: dict[str, float] = {}
    stop = threading.Event()
    listener = threading.Thread(target=_listen, args=(web.url, seen, stop), daemon=True)
    listener.start()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store), str(updates)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    opened_at = float(proc.stdout.readline().split()[1])
    latencies = []
    for _ in range(updates):
        time.sleep(max(2.0, web.live.read_s * 4))
        proc.stdin.write("\n")
        proc.stdin.flush()
        _, agent_id, at = proc.stdout.readline().split()
        deadline = time.monotonic() + 60
        while agent_id not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
        latencies.append(seen.get(agent_id, float("nan")) - float(at))
    proc.stdin.close()
    proc.wait(60)
    stop.set()
    first_update = min(
        (v for k, v in seen.items() if k.startswith(("update:", "reset:"))),
        default=float("nan"),
    )
    out["writer_restore_to_view_s"] = round(first_update - opened_at, 2)
    out["update_latency_s"] = [round(x, 2) for x in latencies]
    out["poll_read_s"] = round(web.live.read_s, 2)
    sizes = [v for k, v in seen.items() if k.startswith("bytes:")]
    out["update_bytes_max"] = int(max(sizes)) if sizes else 0


def main() -> None:
    """Print the figures as a table and write them to stress/results/web.json."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--browser", action="store_true")
    args = parser.parse_args()
    row = run(args.agents, args.updates, args.browser)
    for key, val in row.items():
        print(f"{key:<28} {val}")
    results = Path(__file__).with_name("results")
    results.mkdir(exist_ok=True)
    (results / "web.json").write_text(json.dumps(row, indent=2) + "\n")


if __name__ == "__main__":
    main()
