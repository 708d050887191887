"""Idle scale: what a store of many idle agents costs to open, hold, list, spawn beside and scrape.

``python -m stress --only idle_scale`` builds one store up through the sizes
(``--idle-sizes``: 10,000 and 100,000 agents; ``--quick``: 10,000; add
1,000,000 by hand) of completed, unclosed trees (a lead and four leaves, the
lead running its leaves with ``run_many``, the host receiving the lead's
completion), written through the runtime (``buffered``, 64 trees in flight)
in a child process. At each size a fresh child process opens the store as
after a crash (a commit after the builder's clean shutdown makes its index of
the agents stale, so the open walks every agent: ``walk_open_s``), and
another opens it as after a clean shutdown (taking that index) and measures:
the open's time, RSS before and after
it, ``agents()``'s time, a first and a next page of 1,000
(``agents(limit=, after=)``), a whole ``iter_agents`` walk, ``agent_counts()``,
200 spawns' latency (p50/p99; each a new idle agent), and a Prometheus
scrape's time (:mod:`retinue.metrics`, when prometheus-client is installed;
its first scrape and a second one).

Issue 33's idle-state work: pages and the scrape's counts walk no agent; an
open after a clean shutdown takes the shutdown's index of the agents
(``retinue/actors/tree/_open_index.py``) and reads no agent record but the
busy ones; an open after a crash walks every agent, decoding only where each
sits, and holds the busy ones' records only (the settled ones are read from
the store when asked for); recovery, the start-up rearms and compaction walk
no agent.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from retinue import Durability, Limits, Profile, Runtime, Turn
from retinue.persistence.store import Store
from stress.parts import Options, Part, Result

__all__ = ["PART", "build", "measure"]

LEAVES = 4
IN_FLIGHT = 64
SPAWNS = 200
PAGE = 1_000  # agents per page of agents(limit=...)
MAP_BYTES = 1 << 30  # the writer doubles it as the store grows
QUICK_SIZES = (10_000,)
SIZES = (10_000, 100_000)


async def _lead(turn: Turn) -> str:
    await turn.run_many_async([("leaf", f"part {i}") for i in range(LEAVES)], timeout=600)
    return "lead done"


async def _leaf(turn: Turn) -> str:
    return "leaf done"


def _team() -> list[Profile]:
    return [Profile("lead", subagents=["leaf"], runner=_lead), Profile("leaf", runner=_leaf)]


def _limits(agents: int) -> Limits:
    return Limits(max_agents=agents + 10_000, max_active_turns=256)


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def build(store: Path, target: int) -> dict[str, Any]:
    """Add idle trees to ``store`` until it holds ``target`` agents or more; return timings."""
    rt = Runtime.open(
        store,
        profiles=_team(),
        limits=_limits(target),
        durability=Durability.BUFFERED,
        map_size=MAP_BYTES,
    )
    try:
        have = len(rt.agents())
        trees = max(0, -(-(target - have) // (LEAVES + 1)))
        started = time.perf_counter()

        async def grow(count: int) -> None:
            for _ in range(count):
                lead = await rt.spawn_async("lead", "idle tree")
                await rt.wait_async(lead.id, timeout=600)

        async def all_of() -> None:
            share, extra = divmod(trees, IN_FLIGHT)
            await asyncio.gather(*(grow(share + (i < extra)) for i in range(IN_FLIGHT)))

        asyncio.run(all_of())
        seconds = time.perf_counter() - started
        held = len(rt.agents())
    finally:
        rt.shutdown()
    size = (store / "data.mdb").stat().st_size
    return {
        "agents": held,
        "built": held - have,
        "build_s": round(seconds, 1),
        "agents_per_s": round((held - have) / seconds) if seconds else 0,
        "file_mib": round(size / 2**20, 1),
    }


def _scrape(rt: Runtime) -> dict[str, Any]:
    """Time a Prometheus scrape of ``rt`` (first and second), if the extra is installed."""
    try:
        from prometheus_client import CollectorRegistry, generate_latest

        from retinue.metrics import RetinueCollector
    except ImportError:
        return {"scrape_s": "prometheus-client not installed"}
    registry = CollectorRegistry()
    collector = RetinueCollector(rt, registry=registry, min_read_interval_s=0.0)
    try:
        times = []
        for _ in range(2):
            rt.spawn("w", "between scrapes")  # a commit: the second scrape reads again
            started = time.perf_counter()
            generate_latest(registry)
            times.append(time.perf_counter() - started)
    finally:
        collector.close()
    return {"scrape_s": round(times[0], 3), "scrape_again_s": round(times[1], 3)}


def _pages(rt: Runtime) -> dict[str, Any]:
    """Time ``agents(limit=PAGE)`` (the first page sorts the page index once), the next
    page, a whole ``iter_agents`` walk, and ``agent_counts()``."""
    started = time.perf_counter()
    first = rt.agents(limit=PAGE)
    first_s = time.perf_counter() - started
    started = time.perf_counter()
    rt.agents(limit=PAGE, after=first[-1].id)
    next_s = time.perf_counter() - started
    started = time.perf_counter()
    walked = sum(1 for _ in rt.iter_agents(page_size=PAGE))
    walk_s = time.perf_counter() - started
    started = time.perf_counter()
    rt.agent_counts()
    counts_s = time.perf_counter() - started
    return {
        "first_page_s": round(first_s, 3),
        "next_page_s": round(next_s, 4),
        "iter_agents_s": round(walk_s, 3),
        "iter_agents_seen": walked,
        "agent_counts_s": round(counts_s, 4),
    }


def measure(store: Path, agents: int) -> dict[str, Any]:
    """Open ``store`` in this (fresh) process and measure it (see the module docstring)."""
    rss_before = _rss_mib()
    started = time.perf_counter()
    rt = Runtime.open(
        store, profiles=[*_team(), Profile("w", runner=_leaf)], limits=_limits(agents)
    )
    try:
        open_s = time.perf_counter() - started
        rss_open = _rss_mib()
        started = time.perf_counter()
        held = len(rt.agents())
        agents_s = time.perf_counter() - started
        row_pages = _pages(rt)
        latencies = []
        for _ in range(SPAWNS):
            started = time.perf_counter()
            rt.spawn("w", "one more")
            latencies.append(time.perf_counter() - started)
        latencies.sort()
        row = {
            "agents": held,
            "open_s": round(open_s, 2),
            "rss_before_open_mib": rss_before,
            "rss_after_open_mib": rss_open,
            "kib_per_agent": round(1024 * (rss_open - rss_before) / max(1, held), 2),
            "agents_call_s": round(agents_s, 3),
            "spawn_p50_ms": round(1000 * latencies[len(latencies) // 2], 2),
            "spawn_p99_ms": round(1000 * latencies[int(len(latencies) * 0.99) - 1], 2),
            "threads": threading.active_count(),
            **row_pages,
        }
        row |= _scrape(rt)
    finally:
        rt.shutdown()
    return row


def measure_walk(store: Path, agents: int) -> dict[str, Any]:
    """Open ``store`` as after a crash: a commit after the clean shutdown's index of the
    agents makes it stale, so the open walks every agent; measure that open."""
    stale = Store(store)
    try:
        stale.write_now([("meta", b"idle-scale-walk", b"1")])
    finally:
        stale.close()
    rss_before = _rss_mib()
    started = time.perf_counter()
    rt = Runtime.open(
        store, profiles=[*_team(), Profile("w", runner=_leaf)], limits=_limits(agents)
    )
    try:
        return {
            "walk_open_s": round(time.perf_counter() - started, 2),
            "walk_rss_after_open_mib": _rss_mib(),
            "walk_rss_before_open_mib": rss_before,
        }
    finally:
        rt.shutdown()


def _child(*args: str) -> dict[str, Any]:
    """Run this module in a child process with ``args``; return the JSON it printed."""
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "stress.bench.idle_scale", *args],
        capture_output=True,
        text=True,
        cwd=repo,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"idle_scale {args[0]} exited {done.returncode}: {done.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def run(sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Build one store up through ``sizes`` (ascending) and measure it at each; return rows."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="retinue-idle-scale-") as tmp:
        store = Path(tmp) / "store"
        for size in sorted(sizes):
            built = _child("build", str(store), str(size))
            walked = _child("walk", str(store), str(size))
            measured = _child("measure", str(store), str(size))
            rows.append({"size": size, **built, **walked, **measured})
    return rows


def _part(options: Options) -> Result:
    sizes = options.idle_sizes or (QUICK_SIZES if options.quick else SIZES)
    rows = run(tuple(sizes))
    tables = [
        (f"idle scale: {row['agents']:,} idle agents (store built to {row['size']:,})", row)
        for row in rows
    ]
    return Result(tables, {"sizes": rows})


PART = Part("idle_scale", _part)


if __name__ == "__main__":
    what, path, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    parts = {"build": build, "walk": measure_walk, "measure": measure}
    print(json.dumps(parts[what](path, count)))
