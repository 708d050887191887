"""The service soak's samples: one JSON line per window of what an operator would watch.

:class:`Window` gathers, from the event subscriber's thread and the host's
loop, what happened since the last sample: settled turns and their latency
(``turn_queued`` to ``turn_settled``, from the events), spawn calls' latency
(host side), trees finished, the loop's lag (a 50 ms ticker's overshoot) and
errors. :func:`sample` adds the process's RSS, open file descriptors and
threads, the agents held, and the store file: its size and its pages (the
high-water mark, in use, free) from ``rt.diagnostics.store`` where the runtime
has it, else from a read-only LMDB open in a process of its own
(:mod:`stress.service_soak.pages`: LMDB forbids a second open of one store
in a process).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from typing import Any

from retinue import Event, Runtime, TurnQueued, TurnSettled

__all__ = ["LAG_TICK_S", "Window", "percentile", "process_figures", "sample", "tick_lag"]

LAG_TICK_S = 0.05
"""The loop-lag ticker's sleep; its overshoot is the lag."""
_MAX_QUEUED = 100_000  # turns queued and not settled yet, remembered for their latency


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` (nearest rank; 0.0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


class Window:
    """What happened since the last sample, gathered from several threads."""

    def __init__(self) -> None:
        """Start an empty window."""
        self._lock = threading.Lock()
        self._queued: dict[tuple[str, int], float] = {}
        self._fresh()
        self.total_turns = 0
        self.total_trees = 0
        self.total_errors = 0

    def _fresh(self) -> None:
        self.turns: list[float] = []
        self.spawns: list[float] = []
        self.lags: list[float] = []
        self.trees = 0
        self.errors = 0
        self.failed = 0

    def on_event(self, event: Event) -> None:
        """The subscriber: time each turn from queued to settled."""
        if isinstance(event, TurnQueued):
            with self._lock:
                if len(self._queued) >= _MAX_QUEUED:
                    self._queued.clear()
                self._queued[(event.agent_id, event.generation)] = event.at
        elif isinstance(event, TurnSettled):
            with self._lock:
                queued = self._queued.pop((event.agent_id, event.generation), None)
                self.total_turns += 1
                self.failed += event.status == "failed"
                if queued is not None:
                    self.turns.append(event.at - queued)

    def spawned(self, seconds: float) -> None:
        """Count one spawn call and its latency."""
        with self._lock:
            self.spawns.append(seconds)

    def tree_done(self) -> None:
        """Count one tree closed."""
        with self._lock:
            self.trees += 1
            self.total_trees += 1

    def error(self) -> None:
        """Count one failed call."""
        with self._lock:
            self.errors += 1
            self.total_errors += 1

    def lag(self, seconds: float) -> None:
        """Count one loop-lag measure."""
        with self._lock:
            self.lags.append(seconds)

    def take(self, seconds: float) -> dict[str, Any]:
        """Return this window's figures (rates over ``seconds``) and start the next one."""
        with self._lock:
            turns, spawns, lags = self.turns, self.spawns, self.lags
            row = {
                "turns_per_s": round(len(turns) / seconds, 2),
                "trees_per_s": round(self.trees / seconds, 2),
                "turn_p50_ms": round(1000 * percentile(turns, 0.5), 1),
                "turn_p99_ms": round(1000 * percentile(turns, 0.99), 1),
                "spawn_p50_ms": round(1000 * percentile(spawns, 0.5), 2),
                "spawn_p99_ms": round(1000 * percentile(spawns, 0.99), 2),
                "lag_p99_ms": round(1000 * percentile(lags, 0.99), 2),
                "lag_max_ms": round(1000 * max(lags, default=0.0), 2),
                "errors": self.errors,
                "failed_turns": self.failed,
            }
            self._fresh()
        return row


async def tick_lag(window: Window) -> None:
    """Measure the loop's lag forever: how late each ``LAG_TICK_S`` sleep wakes."""
    while True:
        start = time.monotonic()
        await asyncio.sleep(LAG_TICK_S)
        window.lag(max(0.0, time.monotonic() - start - LAG_TICK_S))


def process_figures() -> dict[str, Any]:
    """This process's RSS (MiB), OS threads and open file descriptors (Linux /proc)."""
    figures: dict[str, Any] = {"rss_mib": 0.0, "threads": 0}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                figures["rss_mib"] = round(int(line.split()[1]) / 1024, 1)
            elif line.startswith("Threads:"):
                figures["threads"] = int(line.split()[1])
    figures["fds"] = len(os.listdir("/proc/self/fd"))
    return figures


async def _store_figures(rt: Runtime) -> dict[str, Any]:
    """The store file: size and pages, from the runtime's diagnostics or a read-only open."""
    space = getattr(rt.diagnostics, "store", None)
    if space is not None:
        return {
            "file_mib": round(space.file_bytes / 2**20, 2),
            "pages": space.pages,
            "pages_in_use": space.pages_in_use,
            "pages_free": space.pages_free,
            "pages_from": "diagnostics",
        }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "stress.service_soak.pages",
        str(rt.path),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    try:
        measured: dict[str, Any] = json.loads(out)
    except ValueError:
        size = os.stat(os.path.join(str(rt.path), "data.mdb")).st_size
        return {"file_mib": round(size / 2**20, 2), "pages_from": "file size"}
    return {**measured, "pages_from": "lmdb read-only"}


async def sample(rt: Runtime, window: Window, seconds: float) -> dict[str, Any]:
    """One sample: ``window``'s figures over ``seconds``, the process, the store, the agents."""
    row = window.take(seconds)
    row |= process_figures()
    row |= await _store_figures(rt)
    row["agents"] = len(await rt.agents_async(include_closed=True))
    row["turns"] = window.total_turns
    row["trees"] = window.total_trees
    return row
