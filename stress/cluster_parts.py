"""The cluster parts of ``python -m stress``: cluster, cluster_crash and cluster_rate_limits.

``cluster``: the strace network check (:mod:`stress.cluster_net`), the
benchmark (:mod:`stress.bench.cluster`) and a few crash rounds;
``cluster_crash``: the crash loop alone (``--kills N`` rounds);
``cluster_rate_limits``: provider limits held across two shards, on and off
(:mod:`stress.bench.cluster_rate_limits`; 429s under the limits are its
problems). All refuse to
start Ray outside a loopback-only network namespace, and fail the run then.
Neither runs unless asked (``--only``): CI runs them in their own step.
"""

from __future__ import annotations

import time
from typing import Any

from stress import cluster_common
from stress.parts import Options, Part, Result

__all__ = ["CLUSTER", "CLUSTER_CRASH", "CLUSTER_RATE_LIMITS"]


def _run(only: str, options: Options) -> Result:
    """Run the chosen part; its problems fail the run."""
    why = cluster_common.why_not()
    if why is not None:
        return Result([(f"{only}: refused to start Ray", {"why": why})], {}, [why])
    from stress import cluster_crash, cluster_net
    from stress.bench import cluster as bench_cluster

    result = Result([])
    if only == "cluster":  # first, while this process runs no Ray of its own
        t0 = time.perf_counter()
        row = cluster_net.run()
        result.tables.append(
            ("cluster network: strace -f -e trace=connect of a local cluster", row)
        )
        result.data["cluster_net"] = {**row, "seconds": round(time.perf_counter() - t0, 1)}
        result.problems += [str(p) for p in row["problems"]]
    with cluster_common.ray_session():  # one local Ray for the benchmark and the crash loop
        if only == "cluster":
            bench: dict[str, Any] = bench_cluster.run(options.quick)
            result.data["benchmark"] = bench
            counts = bench_cluster.shard_counts(options.quick)
            for name in ["in_process", *(f"shards_{k}" for k in counts)]:
                result.tables.append((f"cluster benchmark: {name}", bench[name]))
        default = 3 if options.quick or only == "cluster" else 30
        rounds = options.kills if options.kills is not None else default
        crash = cluster_crash.run(rounds, options.seed)
    result.data["crash"] = crash
    title = "cluster crash loop: SIGKILL shard processes under a host workload, check the ledger"
    result.tables.append((title, {**crash, "problems": len(crash["problems"])}))
    result.problems += [str(p) for p in crash["problems"]]
    return result


CLUSTER = Part("cluster", lambda options: _run("cluster", options), True, False, False)
CLUSTER_CRASH = Part(
    "cluster_crash", lambda options: _run("cluster_crash", options), True, False, False
)


def _rate_limits(options: Options) -> Result:
    """Provider limits on a two-shard cluster; a 429 with the limits leased is a problem."""
    why = cluster_common.why_not()
    if why is not None:
        return Result([("cluster_rate_limits: refused to start Ray", {"why": why})], {}, [why])
    from stress.bench import cluster_rate_limits as bench

    rows = bench.run()
    shape = bench.SHAPE
    title = (
        f"cluster_rate_limits: {bench.SHARDS} shards, {shape.trees} trees x {shape.fanout} "
        f"agents x 1 call, stub at {shape.requests} requests per {shape.window_s:g} s, "
        f"{shape.max_in_flight} at once"
    )
    problems = [
        f"{row['way']}: {row['429s']} 429s with the account's limits leased"
        for row in rows
        if row["way"] == "static" and row["429s"]
    ]
    problems += [
        f"{row['way']}: {row['agents_completed']} agents completed; "
        f"not completed: {row.get('not_completed', [])}"
        for row in rows
        if row["agents_completed"] != shape.trees * (shape.fanout + 1)
    ]
    tables = [(f"{title} [{row['way']}]", row) for row in rows]
    return Result(tables, {"shape": shape.__dict__, "rows": rows}, problems)


CLUSTER_RATE_LIMITS = Part("cluster_rate_limits", _rate_limits, True, False, False)
