"""Run the stress suite: ``python -m stress`` (long) or ``python -m stress --quick`` (CI).

The suite is the table :data:`PARTS` (each a :class:`~stress.parts.Part`:
checks first, then benchmarks); ``--only NAME`` runs one part. Each part
prints its tables, and the whole run is written as JSON to
``stress/results/<timestamp>.json`` with the machine it ran on and the date (the
shape the docs site's benchmarks page is generated from). A check's
problems fail the run (exit 1). The quick run uses fixed seeds and small
sizes; it leaves the state machine out (CI runs it once, seeded, in
``tests/runtime/test_statemachine.py``), runs the races soak for 10 s and the
service soak (``--minutes``, ``--trees``, ``--soak-kills``,
``--sample-seconds``) for one minute with one kill; ``idle_scale`` measures a
store of 10,000 idle agents (``--idle-sizes`` for more).
The cluster parts run only when asked (CI runs them in a network namespace).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from stress import (
    cluster_parts,
    crash,
    damage,
    effects,
    fuzz_llm,
    service_soak,
    soak,
    soak_races,
    statemachine,
    store_growth,
)
from stress.bench import (
    budgets,
    commit,
    durable_steps,
    idle_scale,
    lifecycle,
    lifecycle_instructions,
    llm,
    llm_floor,
    llm_instructions,
    llm_instructions_scale,
    loop_lag,
    many_turns,
    rate_limits,
    reopen,
    scale,
    schemas,
    startup,
    tools,
    trees,
)
from stress.parts import Options, Part, Result, table
from stress.statemachine import journal_run, restarts, retention_run

PARTS: list[Part] = [
    crash.PART,
    effects.PART,
    statemachine.PART,
    restarts.PART,
    journal_run.PART,
    retention_run.PART,
    soak_races.PART,
    fuzz_llm.PART,
    damage.PART,
    soak.PART,
    service_soak.PART,
    store_growth.PART,
    commit.PART,
    lifecycle.PART,
    trees.PART,
    trees.ROUTING,
    lifecycle_instructions.PART,
    scale.ASYNC_TURNS,
    scale.IDLE,
    idle_scale.PART,
    reopen.PART,
    llm.PART,
    llm_floor.PART,
    llm_instructions.PART,
    llm_instructions_scale.PART,
    startup.PART,
    loop_lag.PART,
    many_turns.PART,
    schemas.PART,
    tools.PART,
    budgets.PART,
    rate_limits.PART,
    durable_steps.PART,
    cluster_parts.CLUSTER,
    cluster_parts.CLUSTER_CRASH,
    cluster_parts.CLUSTER_RATE_LIMITS,
]
"""Every part of the suite, in the order a full run runs them."""


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


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m stress", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short, seeded run for CI")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kills", type=int, default=None, help="crash rounds")
    parser.add_argument("--only", choices=[part.name for part in PARTS])
    parser.add_argument(
        "--soak-seconds",
        type=float,
        default=None,
        help=(
            "length of each soak (races: 10 quick / 300 full; soak: 36 quick / 600 full; "
            "fuzz_llm: 6 cases quick / 600 s full)"
        ),
    )
    soak = parser.add_argument_group("service_soak and idle_scale")
    soak.add_argument("--minutes", type=float, default=None, help="service soak: 1 quick / 15")
    soak.add_argument("--soak-kills", type=int, default=None, help="service soak: SIGKILLs")
    soak.add_argument("--trees", type=int, default=None, help="service soak: trees in flight")
    soak.add_argument("--sample-seconds", type=float, default=None, help="service soak: 5 / 30")
    soak.add_argument(
        "--idle-sizes",
        type=int,
        nargs="+",
        default=None,
        help="idle_scale: idle agents per store (10000 quick / 10000 100000; add 1000000)",
    )
    durable = parser.add_argument_group("durable_steps")
    durable.add_argument(
        "--agents",
        type=int,
        nargs="+",
        default=None,
        help="durable_steps: only the levels of these agents at once (1 100 1000 full; 1 10 quick)",
    )
    durable.add_argument(
        "--reps", type=int, default=None, help="durable_steps: repetitions (1 quick / 3 full)"
    )
    return parser.parse_args(argv)


def _show(result: Result) -> None:
    for title, row in result.tables:
        table(title, row)
    for problem in result.problems[:20]:
        print("  PROBLEM:", problem)
    for note in result.notes:
        print("  note:", note)


def main(argv: list[str] | None = None) -> int:
    """Run the suite; return the process exit code (1 if a check found a problem)."""
    args = _arguments(argv)
    options = Options(
        args.quick,
        args.seed,
        args.kills,
        args.soak_seconds,
        minutes=args.minutes,
        soak_kills=args.soak_kills,
        trees=args.trees,
        sample_seconds=args.sample_seconds,
        idle_sizes=tuple(args.idle_sizes) if args.idle_sizes else None,
        agents=tuple(args.agents) if args.agents else None,
        reps=args.reps,
    )
    # The shape docs/benchmarks/*.json keeps (docs/gen_benchmarks.py renders it): copy a
    # run there to put its figures on the docs site's benchmarks page.
    report: dict[str, Any] = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "quick": args.quick,
        "seed": args.seed,
    }
    table("machine", report["machine"])
    chosen = [
        part
        for part in PARTS
        if args.only == part.name
        or (args.only is None and (part.in_quick if args.quick else part.in_full))
    ]
    failed: list[str] = []
    for part in chosen:
        result = part.run(options)
        _show(result)
        report[part.name] = {**result.data, "problems": result.problems[:50]}
        if part.check and result.problems:
            failed.append(part.name)
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    name = time.strftime("%Y%m%d-%H%M%S") + ("-quick" if args.quick else "") + ".json"
    (out / name).write_text(json.dumps(report, indent=2))
    print(f"\nwrote stress/results/{name}")
    for name in failed:
        # Repeated last, so a log cut to its tail still says what failed and why.
        for problem in report[name]["problems"][:5]:
            print(f"stress: FAILED {name}: {problem}")
    print(f"stress: {len(chosen) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
