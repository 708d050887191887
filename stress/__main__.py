"""Run the stress suite: ``python -m stress`` (long) or ``python -m stress --quick`` (CI).

Each part prints a table row set and the whole run is written as JSON to
``stress/results/<timestamp>.json`` with the machine it ran on. The quick run
uses fixed seeds and small sizes; it fails (exit 1) if the crash test finds
a lost or duplicated acknowledgement. The quick run leaves the state machine
out (CI runs it once, seeded, in ``tests/runtime/test_statemachine.py``) and
runs the races soak for 10 seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stress import (
    bench_budgets,
    bench_commit,
    bench_lifecycle,
    bench_llm,
    bench_reopen,
    bench_scale,
    bench_tools,
    bench_trees,
    crash,
    damage,
    soak,
    soak_races,
    statemachine,
)

CLUSTER_CHECKS = ("cluster_net", "cluster_crash")  # parts whose problems fail a run


def machine() -> dict[str, Any]:
    """Describe the machine the figures come from."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        # Figures are ratios within one run; a busy machine shifts both sides.
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def _table(title: str, row: dict[str, Any]) -> None:
    print(f"\n{title}")
    width = max(len(k) for k in row)
    for key, value in row.items():
        print(f"  {key:<{width}}  {value}")


def main(argv: list[str] | None = None) -> int:
    """Run the suite; return the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m stress", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short, seeded run for CI")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kills", type=int, default=None, help="crash rounds")
    parser.add_argument(
        "--only",
        choices=[
            "crash",
            "statemachine",
            "restarts",
            "soak_races",
            "damage",
            "soak",
            "commit",
            "reopen",
            "lifecycle",
            "trees",
            "routing",
            "async_turns",
            "idle",
            "llm",
            "tools",
            "budgets",
            "cluster",
            "cluster_crash",
        ],
    )
    parser.add_argument(
        "--soak-seconds",
        type=float,
        default=None,
        help="length of each soak (races: 10 quick / 300 full; soak: 36 quick / 600 full)",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    kills = args.kills if args.kills is not None else (4 if quick else 200)
    report: dict[str, Any] = {"machine": machine(), "quick": quick, "seed": args.seed}
    failed = False
    _table("machine", report["machine"])

    if args.only in (None, "crash"):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            verdicts = crash.run_crashes(Path(tmp), kills, args.seed)
            problems = [p for v in verdicts for p in v.problems]
            row = {
                "kills": len(verdicts),
                "acknowledged_ops": sum(v.acks for v in verdicts),
                "agents_at_end": verdicts[-1].agents if verdicts else 0,
                "interrupted_at_restore": sum(v.interrupted_at_restore for v in verdicts),
                "restarting_at_kill": sum(v.restarting_at_kill for v in verdicts),
                "awaiting_approval_at_kill": sum(v.awaiting_approval_at_kill for v in verdicts),
                "approved_calls": verdicts[-1].approved_calls if verdicts else 0,
                "approved_runs": verdicts[-1].approved_runs if verdicts else 0,
                "approved_calls_cut_short": verdicts[-1].cut_short if verdicts else 0,
                "problems": len(problems),
                "seconds": round(time.perf_counter() - t0, 1),
            }
            report["crash"] = {**row, "problem_list": problems[:50]}
            _table("crash: SIGKILL a random workload, reopen, check the ack log", row)
            for problem in problems[:20]:
                print("  PROBLEM:", problem)
            failed = failed or bool(problems)

    if args.only == "statemachine" or (args.only is None and not quick):
        # CI runs the seeded machine once, in tests/runtime/test_statemachine.py.
        row = statemachine.run(25 if quick else 200, 30 if quick else 50, args.seed)
        report["statemachine"] = row
        _table(
            "state machine: hypothesis rules over live actors, with reopen",
            {**row, "problems": len(row["problems"])},
        )
        for problem in row["problems"][:5]:
            print("  PROBLEM:", problem)
        failed = failed or bool(row["problems"])

    if args.only == "restarts" or (args.only is None and not quick):
        # CI runs it once, derandomized, in tests/runtime/test_restart_machine.py.
        from stress.statemachine import restarts

        found = restarts.run(30 if quick else 200, 40)
        report["restarts"] = found
        _table(
            "restarts machine: every task one completion across interrupts, reopens, crashes",
            {**found, "problems": len(found["problems"])},
        )
        failed = failed or bool(found["problems"])

    if args.only in (None, "soak_races"):
        seconds = args.soak_seconds or (10.0 if quick else 300.0)
        row = soak_races.run(seconds, args.seed)
        report["soak_races"] = row
        _table(
            "races soak: 50 host threads + 500 asyncio tasks, every completion once",
            {**row, "problems": len(row["problems"])},
        )
        for problem in row["problems"][:5]:
            print("  PROBLEM:", problem)
        failed = failed or bool(row["problems"]) or bool(row["lost"]) or bool(row["duplicates"])

    if args.only in (None, "damage"):
        with tempfile.TemporaryDirectory() as tmp:
            row = damage.run(Path(tmp), quick, args.seed)
        report["damage"] = row
        _table(
            "damage: truncated, flipped, zeroed, lost and garbage store files, opened in a child",
            {k: v for k, v in row.items() if k not in ("problems", "other_errors")}
            | {"problems": len(row["problems"])},
        )
        for problem in row["problems"][:20]:
            print("  PROBLEM:", problem)
        for note in row["other_errors"]:
            print("  note:", note)
        failed = failed or bool(row["problems"])

    if args.only in (None, "soak"):
        seconds = args.soak_seconds or (36.0 if quick else 600.0)
        with tempfile.TemporaryDirectory() as tmp:
            row = soak.run(Path(tmp), seconds, window=2.0 if seconds <= 120 else 10.0)
        report["soak"] = row
        _table(
            "soak: spawn/close churn and short turns; RSS and store size must level off",
            {k: v for k, v in row.items() if k not in ("problems", "timeline")}
            | {"problems": len(row["problems"])},
        )
        for problem in row["problems"][:10]:
            print("  PROBLEM:", problem)
        failed = failed or bool(row["problems"])

    if args.only in (None, "commit"):
        row = bench_commit.run(32, 40 if quick else 300)
        report["commit"] = row
        _table("group commit: durable transitions/s, 32 callers, full durability", row)

    if args.only in (None, "lifecycle"):
        row = bench_lifecycle.run(32, 10 if quick else 100, rounds=1 if quick else 3)
        report["lifecycle"] = row
        _table("lifecycles/s (spawn + wait + close), 32 callers, vs raw pykka and AutoGen", row)

    if args.only in (None, "trees"):
        row = bench_trees.run(32, 3 if quick else 20, rounds=1 if quick else 3)
        report["trees"] = row
        _table("3-level trees (lead -> 2 mids -> 2 leaves, run_many), 32 at once, vs AutoGen", row)

    if args.only in (None, "routing"):
        row = bench_trees.routing_by_load(
            (1, 8) if quick else (1, 4, 8, 16, 32), 32 if quick else 320
        )
        report["routing"] = row
        _table(
            "routing latency p50/p99 ms (a child's return -> its parent's wait) by trees in flight",
            row,
        )

    if args.only in (None, "async_turns"):
        row = bench_scale.async_turns(200 if quick else 1000)
        report["async_turns"] = row
        _table("concurrent async turns awaiting asyncio.sleep(1), vs plain asyncio", row)

    if args.only in (None, "idle"):
        row = bench_scale.idle_agents(2_000 if quick else 100_000)
        report["idle"] = row
        _table("idle agents held by one runtime: RSS and threads, vs the empty runtime", row)

    if args.only in (None, "reopen"):
        row = bench_reopen.run(10_000 if quick else 100_000)
        report["reopen"] = row
        _table("reopen: Runtime.open on a large store", row)

    if args.only in (None, "llm"):
        row = bench_llm.run(50 if quick else 1000, reps=1 if quick else 3)
        report["llm"] = row
        _table("llm: concurrent model turns vs raw litellm.acompletion, local OpenAI server", row)

    if args.only in (None, "tools"):
        row = bench_tools.run(10 if quick else 50)
        report["tools"] = row
        _table("tools: grep in a child process vs in-process, read_file on the tool pool", row)
    if args.only in (None, "budgets"):
        row = bench_budgets.run(1 if quick else 3)
        report["budgets"] = row
        _table("budgets: 8 agents calling at once under tokens_per_tree, admission on/off", row)
    if args.only in ("cluster", "cluster_crash"):
        # Only when asked, and only in a loopback-only namespace (see .ci/extras-ray.sh).
        from stress import cluster_parts

        cluster_failed = cluster_parts.run(args.only, quick, args.kills, args.seed, report, _table)
        failed = failed or cluster_failed

    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    name = time.strftime("%Y%m%d-%H%M%S") + ("-quick" if quick else "") + ".json"
    (out / name).write_text(json.dumps(report, indent=2))
    print(f"\nwrote stress/results/{name}")
    every = (
        "crash",
        "statemachine",
        "soak_races",
        "damage",
        "soak",
        "commit",
        "lifecycle",
        "trees",
        "routing",
        "async_turns",
        "idle",
        "reopen",
        "llm",
        "tools",
        "cluster_net",
        "cluster",
        "cluster_crash",
    )
    parts = [k for k in every if k in report]
    bad = sum(
        1
        for k in ("crash", "statemachine", "soak_races", "damage", "soak", *CLUSTER_CHECKS)
        if k in report and report[k].get("problems", report[k].get("problem_list"))
    )
    print(f"stress: {len(parts) - bad} passed, {bad} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
