"""3-level trees: a lead runs 2 mids, each mid runs 2 leaves (``run_many``), many trees at once.

Each host thread spawns a lead, waits for it and closes its tree, in a loop;
``concurrent`` threads keep that many trees in flight. Reported: agents per
second (7 per tree), tree latency p50/p99 (spawn to the lead's completion),
and routing latency p50/p99: from a mid's last leaf returning to the mid's
``run_many`` returning (a child's return to its parent's wait returning).
Both runner kinds are measured: sync runners (pooled threads) and async
runners (tasks on the runtime's loop, ``run_many_async``).

Baseline, measured in the same run: AutoGen core's in-memory runtime on the
same tree shape (see :mod:`stress.bench.autogen`), when installed.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from retinue import Completion, Durability, Limits, Profile, Runtime, Turn
from stress.bench import autogen as bench_autogen
from stress.bench import lifecycle as bench_lifecycle
from stress.bench.autogen import percentile

__all__ = ["routing_by_load", "run"]
from stress.parts import Options, Part, Result


class _Routes:
    """Routing latencies measured inside the mids' runners."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: list[float] = []

    def add(self, results: list[Any]) -> None:
        back = time.perf_counter()
        returns = [float(r.output) for r in results if isinstance(r, Completion) and r.output]
        if returns:
            with self.lock:
                self.latencies.append(back - max(returns))


def _profiles(routes: _Routes, use_async: bool) -> list[Profile]:
    def leaf(turn: Turn) -> str:
        return repr(time.perf_counter())  # the moment the child returns

    def mid(turn: Turn) -> str:
        results = turn.run_many([("leaf", "l1"), ("leaf", "l2")], timeout=120)
        routes.add(results)
        return "mid"

    def lead(turn: Turn) -> str:
        results = turn.run_many([("mid", "m1"), ("mid", "m2")], timeout=120)
        return f"lead:{sum(isinstance(r, Completion) for r in results)}"

    async def aleaf(turn: Turn) -> str:
        return repr(time.perf_counter())

    async def amid(turn: Turn) -> str:
        results = await turn.run_many_async([("leaf", "l1"), ("leaf", "l2")], timeout=120)
        routes.add(results)
        return "mid"

    async def alead(turn: Turn) -> str:
        results = await turn.run_many_async([("mid", "m1"), ("mid", "m2")], timeout=120)
        return f"lead:{sum(isinstance(r, Completion) for r in results)}"

    if use_async:
        runners: tuple[Any, Any, Any] = (alead, amid, aleaf)
    else:
        runners = (lead, mid, leaf)
    return [
        Profile("lead", subagents=["mid"], runner=runners[0], wake_on_completion=False),
        Profile("mid", subagents=["leaf"], runner=runners[1], wake_on_completion=False),
        Profile("leaf", runner=runners[2]),
    ]


def retinue_trees(
    folder: Path, concurrent: int, per_slot: int, *, use_async: bool, durability: str
) -> dict[str, float]:
    """Run the tree workload on retinue; return agents/s and latency percentiles (ms)."""
    routes = _Routes()
    limits = Limits(max_agents=concurrent * 16, max_active_turns=concurrent * 7)
    latencies: list[float] = []
    lock = threading.Lock()
    with Runtime.open(
        folder, profiles=_profiles(routes, use_async), limits=limits, durability=durability
    ) as rt:

        def slot() -> None:
            for _ in range(per_slot):
                t0 = time.perf_counter()
                lead = rt.spawn("lead", "go")
                done = rt.wait(lead.id, timeout=120)
                elapsed = time.perf_counter() - t0
                assert done.output == "lead:2", done
                rt.close_tree(lead.id)
                with lock:
                    latencies.append(elapsed)

        threads = [threading.Thread(target=slot) for _ in range(concurrent)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
    return {
        "agents_per_s": 7 * concurrent * per_slot / elapsed,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "route_p50_ms": percentile(routes.latencies, 50) * 1000,
        "route_p99_ms": percentile(routes.latencies, 99) * 1000,
    }


def run(concurrent: int = 32, per_slot: int = 10, rounds: int = 3) -> dict[str, Any]:
    """Measure retinue (sync and async runners, durability full) and AutoGen on the trees.

    The three are measured in turn, ``rounds`` times over; each figure is the
    median over the rounds, each ratio the median of the ratios taken within
    one round (with their range beside it).
    """
    peers: list[dict[str, float]] = []
    ours: dict[str, list[dict[str, float]]] = {"sync": [], "async": []}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(rounds):
            peer = bench_autogen.trees(concurrent, per_slot)
            if peer is not None:
                peers.append(peer)
            for name in ours:
                folder = Path(tmp) / f"{name}{index}"
                ours[name].append(
                    retinue_trees(
                        folder,
                        concurrent,
                        per_slot,
                        use_async=name == "async",
                        durability=Durability.FULL,
                    )
                )
    row: dict[str, Any] = {
        "trees_in_flight": concurrent,
        "trees": concurrent * per_slot,
        "rounds": rounds,
    }
    for name, runs in ours.items():
        row[f"retinue_{name}_agents_per_s"] = round(_median(runs, "agents_per_s"))
        for figure in ("p50_ms", "p99_ms"):
            row[f"retinue_{name}_{figure}"] = round(_median(runs, figure), 1)
        for figure in ("route_p50_ms", "route_p99_ms"):
            row[f"retinue_{name}_{figure}"] = round(_median(runs, figure), 2)
    if not peers:
        row["autogen"] = "not installed (pip install -e '.[bench]')"
        return row
    row["autogen_agents_per_s"] = round(_median(peers, "agents_per_s"))
    for figure in ("p50_ms", "p99_ms"):
        row[f"autogen_{figure}"] = round(_median(peers, figure), 1)
    for figure in ("route_p50_ms", "route_p99_ms"):
        row[f"autogen_{figure}"] = round(_median(peers, figure), 2)
    for name, runs in ours.items():
        for figure, label in (
            ("agents_per_s", "agents"),
            ("p50_ms", "p50"),
            ("p99_ms", "p99"),
            ("route_p99_ms", "route_p99"),
        ):
            row |= bench_lifecycle.ratios(
                f"{name}_{label}_vs_autogen",
                [r[figure] for r in runs],
                [p[figure] for p in peers],
            )
    return row


def routing_by_load(
    levels: tuple[int, ...] = (1, 4, 8, 16, 32), trees: int = 320
) -> dict[str, Any]:
    """Routing latency p50/p99 (ms) as the number of trees in flight grows, beside AutoGen's.

    About ``trees`` trees run at each level (at least 10 per slot). Once the
    machine is saturated, more trees in flight add queueing, not throughput,
    so every runtime's routing latency grows with the load (Little's law);
    the row shows where a latency target holds.
    """
    row: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for level in levels:
            per_slot = max(10, trees // level)
            cells = []
            for name in ("sync", "async"):
                figures = retinue_trees(
                    Path(tmp) / f"{name}{level}",
                    level,
                    per_slot,
                    use_async=name == "async",
                    durability=Durability.FULL,
                )
                cells.append(f"{name} {_route(figures)}")
            peer = bench_autogen.trees(level, per_slot)
            cells.append("autogen " + ("not installed" if peer is None else _route(peer)))
            row[f"in_flight_{level}"] = "  ".join(cells)
    return row


def _route(figures: dict[str, float]) -> str:
    return f"{figures['route_p50_ms']:.1f}/{figures['route_p99_ms']:.1f}"


def _median(runs: list[dict[str, float]], figure: str) -> float:
    return statistics.median(r[figure] for r in runs)


def _trees(options: Options) -> Result:
    row = run(32, 3 if options.quick else 20, rounds=1 if options.quick else 3)
    title = "3-level trees (lead -> 2 mids -> 2 leaves, run_many), 32 at once, vs AutoGen"
    return Result.row(title, row)


def _routing(options: Options) -> Result:
    loads = (1, 8) if options.quick else (1, 4, 8, 16, 32)
    row = routing_by_load(loads, 32 if options.quick else 320)
    title = "routing latency p50/p99 ms (a child's return -> its parent's wait) by trees in flight"
    return Result.row(title, row)


PART = Part("trees", _trees)
ROUTING = Part("routing", _routing)
