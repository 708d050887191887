"""Scale benchmarks: many concurrent async turns, and many idle agents held by one runtime.

- ``async_turns``: N async turns that each ``await asyncio.sleep(1)`` at once,
  with ``max_active_turns=N``. Reported: wall time from the first spawn to the
  last completion and the peak thread count of the process (sampled every
  5 ms). Baseline in the same run: N plain ``asyncio.sleep(1)`` tasks in one
  ``asyncio.gather`` (the floor any runtime pays).
- ``idle_agents``: N agents spawned, each runs one turn and stays idle (not
  closed). Reported: RSS and threads with them held, bytes per idle agent,
  against the same runtime's RSS and threads before the spawns.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from retinue import Durability, Limits, Profile, Runtime, Turn

__all__ = ["async_turns", "idle_agents", "rss_bytes"]
from stress.parts import Options, Part, Result


def rss_bytes() -> int:
    """Resident set size of this process, in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _PeakThreads:
    """Samples ``threading.active_count()`` on a thread of its own until stopped."""

    def __init__(self) -> None:
        self.peak = threading.active_count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def __enter__(self) -> _PeakThreads:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, threading.active_count() - 1)  # minus the sampler


async def _sleeper(turn: Turn) -> str:
    await asyncio.sleep(1)
    return "slept"


def async_turns(count: int = 1000) -> dict[str, Any]:
    """Run ``count`` concurrent async turns of ``await asyncio.sleep(1)``."""

    async def floor() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(asyncio.sleep(1) for _ in range(count)))
        return time.perf_counter() - start

    baseline = asyncio.run(floor())
    limits = Limits(max_active_turns=count, max_agents=count * 2)
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime.open(
            Path(tmp) / "s",
            profiles=[Profile("sleeper", runner=_sleeper)],
            limits=limits,
            durability=Durability.FULL,
        )
        try:
            threads_before = threading.active_count()

            async def scenario() -> float:
                start = time.perf_counter()
                infos = await asyncio.gather(
                    *(rt.spawn_async("sleeper", f"t{i}") for i in range(count))
                )
                done = await asyncio.gather(*(rt.wait_async(i.id, timeout=60) for i in infos))
                elapsed = time.perf_counter() - start
                assert all(d.output == "slept" for d in done)
                return elapsed

            with _PeakThreads() as sampler:
                wall = asyncio.run(scenario())
        finally:
            rt.shutdown()
    return {
        "turns": count,
        "wall_s": round(wall, 2),
        "plain_asyncio_wall_s": round(baseline, 2),
        "ratio_vs_plain_asyncio": round(wall / baseline, 2),
        "threads_before": threads_before,
        "peak_threads": sampler.peak,
    }


def _echo(turn: Turn) -> str:
    return "ok"


def idle_agents(count: int = 100_000, callers: int = 32) -> dict[str, Any]:
    """Hold ``count`` idle agents in one runtime; report RSS and threads.

    Agents are spawned by ``callers`` host threads with ``buffered``
    durability (building the tree faster; what is held is the same).
    """
    limits = Limits(max_agents=count + 10, retain_closed_agents=count + 10)
    with (
        tempfile.TemporaryDirectory() as tmp,
        Runtime.open(
            Path(tmp) / "s",
            profiles=[Profile("w", runner=_echo)],
            limits=limits,
            durability=Durability.BUFFERED,
            map_size=1 << 30,
        ) as rt,
    ):
        warm = rt.spawn("w", "warm")
        rt.wait(warm.id, timeout=60)
        rss_before, threads_before = rss_bytes(), threading.active_count()
        per = count // callers

        def body(n: int) -> None:
            for _ in range(n):
                info = rt.spawn("w", "t")
                rt.wait(info.id, timeout=120)

        workers = [
            threading.Thread(target=body, args=(per + (1 if i < count % callers else 0),))
            for i in range(callers)
        ]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        build_s = time.perf_counter() - start
        time.sleep(0.2)  # let the pool's finished turns go back to idle
        held = len(rt.agents())
        rss_after, threads_after = rss_bytes(), threading.active_count()
    return {
        "idle_agents": held - 1,
        "build_s": round(build_s, 1),
        "rss_before_mib": round(rss_before / 2**20, 1),
        "rss_with_agents_mib": round(rss_after / 2**20, 1),
        "bytes_per_idle_agent": round((rss_after - rss_before) / max(1, held - 1)),
        "threads_before": threads_before,
        "threads_with_agents": threads_after,
        "max_active_turns": limits.max_active_turns,
    }


def _async_turns(options: Options) -> Result:
    row = async_turns(200 if options.quick else 1000)
    return Result.row("concurrent async turns awaiting asyncio.sleep(1), vs plain asyncio", row)


def _idle(options: Options) -> Result:
    row = idle_agents(2_000 if options.quick else 100_000)
    return Result.row("idle agents held by one runtime: RSS and threads, vs the empty runtime", row)


ASYNC_TURNS = Part("async_turns", _async_turns)
IDLE = Part("idle", _idle)
