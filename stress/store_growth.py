"""Store growth under churn: does the data file level off while the data is flat?

Each scenario churns agents through one runtime: a host spawns a top-level
agent, waits for it and closes its tree, again and again; a tree is a lead
that runs ``leaves`` children (``run_many``), or a single agent (no leaves).
Every output is ``output_bytes`` long. Once the retained closed agents have
filled up (the warm-up: 1.5 times ``retain_closed_agents`` agents), the data
stays flat: compaction removes as many agents as the churn closes. Reported,
after the warm-up: the high-water mark's growth in pages per 1,000 agents
churned, and the file against a compacting copy of itself (``rt.backup``) at
the end. A ratio past :data:`MAX_RATIO` is a problem (the check fails). Then a burst:
``live`` agents spawned and left open, closed, and churned past the
retention: what the file keeps, and what ``compact(reclaim=True)`` gives back
(and how long the writer paused for it).

The figures come from ``rt.diagnostics.store`` (pages in use and free, the
high-water mark; see :mod:`retinue.persistence.space`).

Run one scenario by hand: ``python -m stress.store_growth --trees 40000``
(``--help`` for the sizes); ``python -m stress --only store_growth`` runs the
table below (``--quick``: small sizes for CI).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retinue import Limits, Profile, Runtime, Turn
from retinue.persistence.space import StoreSpace
from stress.parts import Options, Part, Result, table

__all__ = ["MAX_RATIO", "Scenario", "burst", "churn", "run"]

MAX_RATIO = 1.3
"""The most a churned store's file may be against a compacting copy of itself."""


@dataclass(frozen=True)
class Scenario:
    """One churn: ``tops`` top-level agents after the warm-up, each with ``leaves`` children."""

    name: str
    tops: int
    leaves: int = 3
    output_bytes: int = 100
    retain: int = 10_000

    @property
    def per_top(self) -> int:
        """Agents churned per top-level agent."""
        return 1 + self.leaves

    @property
    def warm_tops(self) -> int:
        """Top-level agents of the warm-up (the retained closed agents fill up)."""
        return -(-self.retain * 3 // 2 // self.per_top)


def _profiles(scenario: Scenario) -> list[Profile]:
    out = "x" * scenario.output_bytes

    def leaf(turn: Turn) -> str:
        return out

    def lead(turn: Turn) -> str:
        if scenario.leaves:
            turn.run_many([("leaf", f"part {i}") for i in range(scenario.leaves)], timeout=120)
        return out

    return [
        Profile("lead", subagents=["leaf"], runner=lead, wake_on_completion=False),
        Profile("leaf", runner=leaf),
    ]


def _space(rt: Runtime) -> StoreSpace:
    space = rt.diagnostics.store
    assert space is not None
    return space


def churn(rt: Runtime, tops: int) -> None:
    """Spawn, wait for and close ``tops`` top-level agents, one after another."""
    for _ in range(tops):
        lead = rt.spawn("lead", "churn")
        rt.wait(lead.id, timeout=120)
        rt.close_tree(lead.id)


def _late_growth(marks: list[int], tops_at: list[int], per_top: int) -> float:
    """Pages per 1,000 agents over the last quarter of the samples (at least the last one)."""
    back = max(1, (len(marks) - 1) // 4)
    agents = (tops_at[-1] - tops_at[-1 - back]) * per_top
    return round((marks[-1] - marks[-1 - back]) * 1000 / max(1, agents), 2)


def run(scenario: Scenario, *, samples: int = 4) -> dict[str, Any]:
    """Churn ``scenario``; return its figures (pages per 1,000 agents, ratio to a copy)."""
    limits = Limits(
        retain_closed_agents=scenario.retain,
        output_max_bytes=max(Limits().output_max_bytes, scenario.output_bytes),
    )
    with tempfile.TemporaryDirectory(prefix="retinue-growth-") as tmp:
        folder = Path(tmp) / "store"
        began = time.perf_counter()
        with Runtime.open(
            folder, profiles=_profiles(scenario), limits=limits, durability="buffered"
        ) as rt:
            churn(rt, scenario.warm_tops)
            warm = _space(rt)
            marks, tops_at = [warm.pages], [0]
            step = max(1, scenario.tops // samples)
            while tops_at[-1] < scenario.tops:
                churn(rt, min(step, scenario.tops - tops_at[-1]))
                tops_at.append(min(tops_at[-1] + step, scenario.tops))
                marks.append(_space(rt).pages)
            end = _space(rt)
            copy = rt.backup(Path(tmp) / "copy")
        copy_bytes = (copy / "data.mdb").stat().st_size
        seconds = time.perf_counter() - began
    agents = scenario.tops * scenario.per_top
    return {
        "scenario": scenario.name,
        "agents_churned": agents,
        "warm_up_agents": scenario.warm_tops * scenario.per_top,
        "pages_after_warm_up": warm.pages,
        "pages_at_end": end.pages,
        "pages_in_use_at_end": end.pages_in_use,
        "pages_free_at_end": end.pages_free,
        "pages_per_1000_agents": round((end.pages - warm.pages) * 1000 / agents, 2),
        "pages_per_1000_last_quarter": _late_growth(marks, tops_at, scenario.per_top),
        "marks": marks,
        "file_mib": round(end.file_bytes / 2**20, 2),
        "copy_mib": round(copy_bytes / 2**20, 2),
        "ratio_to_copy": round(end.file_bytes / copy_bytes, 3),
        "seconds": round(seconds, 1),
    }


def burst(live: int, retain: int = 10_000) -> dict[str, Any]:
    """Leave ``live`` agents open, close them, churn past retention; then reclaim the file."""
    scenario = Scenario("burst", tops=0, leaves=0, retain=retain)
    limits = Limits(retain_closed_agents=retain, max_agents=max(live, Limits().max_agents))
    with (
        tempfile.TemporaryDirectory(prefix="retinue-burst-") as tmp,
        Runtime.open(
            Path(tmp) / "store", profiles=_profiles(scenario), limits=limits, durability="buffered"
        ) as rt,
    ):
        tops = [rt.spawn("lead", "burst").id for _ in range(live)]
        for top in tops:
            rt.wait(top, timeout=120)
        peak = _space(rt)
        for top in tops:
            rt.close(top)
        churn(rt, retain * 3 // 2)
        before = _space(rt)
        began = time.perf_counter()
        report = rt.compact(reclaim=True)
        paused = time.perf_counter() - began
        after = _space(rt)
    return {
        "live_agents": live,
        "peak_mib": round(peak.file_bytes / 2**20, 2),
        "file_mib_after_churn": round(before.file_bytes / 2**20, 2),
        "in_use_mib_after_churn": round(before.in_use_bytes / 2**20, 2),
        "ratio_before_reclaim": round(before.file_bytes / max(1, after.file_bytes), 3),
        "file_mib_after_reclaim": round(report.file_bytes_after / 2**20, 2),
        "reclaim_s": round(paused, 3),
    }


QUICK = [
    Scenario("trees of 4, 100 B, retain 2,000", tops=2_000, retain=2_000),
    Scenario("single agents, 100 B, retain 2,000", tops=6_000, leaves=0, retain=2_000),
]
FULL = [
    Scenario("trees of 4, 100 B, retain 10,000", tops=40_000),
    Scenario("single agents, 100 B, retain 10,000", tops=60_000, leaves=0),
    Scenario("trees of 4, 4 KB, retain 10,000", tops=20_000, output_bytes=4096),
    Scenario("trees of 4, 64 KB, retain 2,000", tops=5_000, output_bytes=65_536, retain=2_000),
    Scenario(
        "single agents, 64 KB, retain 2,000",
        tops=10_000,
        leaves=0,
        output_bytes=65_536,
        retain=2_000,
    ),
]


def _part(options: Options) -> Result:
    tables: list[tuple[str, dict[str, Any]]] = []
    problems: list[str] = []
    rows = []
    for scenario in QUICK if options.quick else FULL:
        row = run(scenario)
        rows.append(row)
        tables.append((f"store growth: {scenario.name}", row))
        if row["ratio_to_copy"] > MAX_RATIO:
            problems.append(
                f"{scenario.name}: the file is {row['ratio_to_copy']}x its compacting copy "
                f"(at most {MAX_RATIO}x)"
            )
    burst_row = burst(2_000, retain=1_000) if options.quick else burst(20_000)
    tables.append(("store growth: a burst of live agents, then reclaim", burst_row))
    if burst_row["file_mib_after_reclaim"] > burst_row["in_use_mib_after_churn"] * MAX_RATIO:
        problems.append(f"the reclaim left {burst_row['file_mib_after_reclaim']} MiB")
    return Result(tables, {"scenarios": rows, "burst": burst_row}, problems)


PART = Part("store_growth", _part, check=True)


def main(argv: list[str] | None = None) -> None:
    """Run one scenario from the command line and print its figures."""
    parser = argparse.ArgumentParser(prog="python -m stress.store_growth", description=__doc__)
    parser.add_argument("--trees", type=int, default=40_000, help="top-level agents churned")
    parser.add_argument("--leaves", type=int, default=3, help="children of each (0: single)")
    parser.add_argument("--output-bytes", type=int, default=100)
    parser.add_argument("--retain", type=int, default=10_000, help="retain_closed_agents")
    args = parser.parse_args(argv)
    scenario = Scenario(
        "by hand",
        tops=args.trees,
        leaves=args.leaves,
        output_bytes=args.output_bytes,
        retain=args.retain,
    )
    table(f"store growth: {scenario}", run(scenario, samples=8))


if __name__ == "__main__":
    main()
