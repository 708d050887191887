"""The cluster parts of ``python -m stress``: ``--only cluster`` and ``--only cluster_crash``.

``cluster``: the strace network check (:mod:`stress.cluster_net`), the
benchmark (:mod:`stress.bench.cluster`) and a few crash rounds;
``cluster_crash``: the crash loop alone (``--kills N`` rounds). Both refuse to
start Ray outside a loopback-only network namespace, and fail the run then.
Neither runs unless asked (``--only``): CI runs them in their own step.
"""

from __future__ import annotations

import time
from typing import Any

from stress import cluster_common
from stress.parts import Options, Part, Result

__all__ = ["CLUSTER", "CLUSTER_CRASH"]


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
