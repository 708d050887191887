"""An asyncio host running many model turns, measured from inside: loop lag, threads, RSS.

:func:`measure` runs in a fresh interpreter (``python -m stress.bench.host_turns
ARGS``, started by :func:`run_child`), as a new host would: nothing imported
or frozen before it opens its runtime. It opens a runtime with one model
profile (``openai/stub-model`` on litellm's OpenAI path against ``url``),
spawns ``turns`` top-level agents at once through the ``*_async`` API and
awaits each completion, while a ticker task on the same loop measures how
late each of its 5 ms sleeps wakes (the host's loop lag) and a sampler thread
reads the process's OS threads and RSS every 10 ms. The host never calls
``gc.freeze()`` itself.

Exactly once: every agent's completion is awaited once; the row counts the
distinct (agent, generation) completions received, the completed ones, and
agents whose state is not ``completed`` at generation 1 afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["measure", "percentile", "run_child"]

ROOT = Path(__file__).resolve().parents[2]
TICK_S = 0.005


def _no_freeze() -> None:
    """Variant: litellm's import leaves the collector's generations as they are."""
    gc.freeze = lambda: None


def _warm() -> None:
    """Variant: the host imports litellm itself before it opens the runtime."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm  # noqa: F401


def _switch_1ms() -> None:
    """Variant: the host asks the interpreter to switch threads every 1 ms (default 5 ms)."""
    sys.setswitchinterval(0.001)


VARIANTS = {"no_freeze": _no_freeze, "warm": _warm, "switch_1ms": _switch_1ms}
"""What a child may change before it starts (the A/B of what was tried)."""


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` (nearest rank; 0.0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _status(field: str) -> int:
    """A number of /proc/self/status (``Threads``, ``VmRSS`` in KiB); 0 where missing."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class _Sampler:
    """The process's peak OS threads and RSS, sampled every 10 ms on a thread of its own."""

    def __init__(self) -> None:
        self.threads = 0
        self.rss_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.threads = max(self.threads, _status("Threads") - 1)  # not the sampler
            self.rss_kib = max(self.rss_kib, _status("VmRSS"))

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


class _Collections:
    """The cyclic collector's passes while registered: count, CPU time, longest full pass.

    Times are the collecting thread's CPU time (``time.thread_time``), which a
    busy machine disturbs less than wall time; a full pass holds the GIL, so it
    stalls every thread of the process, the host's loop included.
    """

    def __init__(self) -> None:
        self.passes = [0, 0, 0]
        self.total_ms = 0.0
        self.longest_full_ms = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.thread_time()
            return
        spent = (time.thread_time() - self._started) * 1000
        self.passes[info["generation"]] += 1
        self.total_ms += spent
        if info["generation"] == 2:
            self.longest_full_ms = max(self.longest_full_ms, spent)

    def __enter__(self) -> _Collections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self)


async def _ticker(lags: list[float], stop: asyncio.Event) -> None:
    """Sleep ``TICK_S`` over and over; record how late each wake-up is, in ms."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + TICK_S
        await asyncio.sleep(TICK_S)
        lags.append(max(0.0, (loop.time() - due) * 1000))


def measure(url: str, turns: int, folder: Path, *, calls: int, timeout_s: float) -> dict[str, Any]:
    """Run ``turns`` concurrent one-call model turns against ``url``; return the row.

    ``max_active_turns`` is ``turns`` (every turn runs at once) and
    ``max_concurrent_calls`` is ``calls``.
    """
    from retinue import AgentState, Durability, Limits, Profile, Runtime
    from retinue.llm import LiteLLMRunner

    runner = LiteLLMRunner(
        "openai/stub-model", api_base=url, api_key="x", request_timeout_s=timeout_s
    )
    limits = Limits(
        max_agents=turns + 10,
        max_active_turns=turns,
        max_concurrent_calls=calls,
        retain_closed_agents=turns + 10,
        event_queue_capacity=max(10_000, turns * 4),
        wait_max_s=3600.0,
    )
    opened = time.perf_counter()
    rt = Runtime.open(
        folder,
        profiles=[Profile("agent", runner=runner)],
        limits=limits,
        durability=Durability.FULL,
        map_size=1 << 30,
    )
    open_s = time.perf_counter() - opened
    lags: list[float] = []

    async def host() -> tuple[float, list[Any]]:
        stop = asyncio.Event()
        ticker = asyncio.create_task(_ticker(lags, stop))
        start = time.perf_counter()
        infos = await asyncio.gather(*(rt.spawn_async("agent", f"task {i}") for i in range(turns)))
        done = await asyncio.gather(*(rt.wait_async(i.id, timeout=timeout_s) for i in infos))
        wall = time.perf_counter() - start
        stop.set()
        await ticker
        return wall, done

    try:
        cpu = time.process_time()
        with _Sampler() as sampler, _Collections() as collections:
            wall, done = asyncio.run(host())
        cpu = time.process_time() - cpu
        agents = [a for a in rt.agents() if a.profile == "agent"]
    finally:
        rt.shutdown()
    received = {(c.agent_id, c.generation) for c in done}
    return {
        "turns": turns,
        "completions_received": len(done),
        "distinct_completions": len(received),
        "completed": sum(c.status == "completed" for c in done),
        "agents_not_completed_once": sum(
            a.state is not AgentState.COMPLETED or a.generation != 1 for a in agents
        ),
        "open_s": round(open_s, 2),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 1),
        "peak_threads": sampler.threads,
        "peak_rss_mib": round(sampler.rss_kib / 1024),
        "loop_ticks": len(lags),
        "loop_lag_p50_ms": round(percentile(lags, 0.50), 1),
        "loop_lag_p99_ms": round(percentile(lags, 0.99), 1),
        "loop_lag_max_ms": round(max(lags, default=0.0), 1),
        "ticks_over_50ms": sum(lag > 50 for lag in lags),
        "gc_passes_gen0_1_2": collections.passes,
        "gc_cpu_ms": round(collections.total_ms),
        "gc_longest_full_pass_ms": round(collections.longest_full_ms, 1),
        "gc_frozen_objects": gc.get_freeze_count(),
    }


def run_child(
    url: str,
    turns: int,
    *,
    calls: int,
    timeout_s: float = 600.0,
    retinue: Path | None = None,
    variant: str = "",
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run :func:`measure` in a fresh interpreter; return its row.

    ``retinue`` is another checkout whose ``retinue`` package the child runs
    (a baseline build); ``variant`` one of :data:`VARIANTS`; ``env`` adds to
    the child's environment.
    """
    with tempfile.TemporaryDirectory() as tmp:
        child_env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            **(env or {}),
        }
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "stress.bench.host_turns",
                url,
                str(turns),
                str(Path(tmp) / "store"),
                str(timeout_s),
                "--calls",
                str(calls),
                "--retinue",
                str(retinue or ""),
                "--variant",
                variant,
            ],
            capture_output=True,
            text=True,
            env=child_env,
            cwd=ROOT,
            timeout=timeout_s + 300,
        )
    if out.returncode != 0:
        raise RuntimeError(f"the host child failed: {out.stderr[-2000:]}")
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return row


def main() -> None:
    """``python -m stress.bench.host_turns URL TURNS STORE TIMEOUT_S --calls N``: print the row."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("turns", type=int)
    parser.add_argument("store", type=Path)
    parser.add_argument("timeout_s", type=float)
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--retinue", default="")
    parser.add_argument("--variant", default="", choices=["", *VARIANTS])
    args = parser.parse_args()
    from stress.bench.stub_server import raise_fd_limit

    raise_fd_limit(args.turns * 3 + 1024)
    if args.retinue:
        sys.path.insert(0, args.retinue)  # before anything imports retinue
    VARIANTS.get(args.variant, lambda: None)()
    row = measure(args.url, args.turns, args.store, calls=args.calls, timeout_s=args.timeout_s)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
