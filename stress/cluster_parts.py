"""The cluster parts of ``python -m stress``: ``--only cluster`` and ``--only cluster_crash``.

``cluster``: the strace network check (:mod:`stress.cluster_net`), the
benchmark (:mod:`stress.bench_cluster`) and a few crash rounds;
``cluster_crash``: the crash loop alone (``--kills N`` rounds). Both refuse to
start Ray outside a loopback-only network namespace, and fail the run then.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from stress import cluster_common

Table = Callable[[str, dict[str, Any]], None]


def run(
    only: str, quick: bool, kills: int | None, seed: int, report: dict[str, Any], table: Table
) -> bool:
    """Run the chosen part into ``report``; return True if it failed."""
    why = cluster_common.why_not()
    if why is not None:
        print(f"\n{only}: refused to start Ray: {why}")
        report[only] = {"problems": [why]}
        return True
    from stress import bench_cluster, cluster_crash, cluster_net

    failed = False
    if only == "cluster":  # first, while this process runs no Ray of its own
        t0 = time.perf_counter()
        row = cluster_net.run()
        report["cluster_net"] = {**row, "seconds": round(time.perf_counter() - t0, 1)}
        table("cluster network: strace -f -e trace=connect of a local cluster", row)
        failed = bool(row["problems"])
    with cluster_common.ray_session():  # one local Ray for the benchmark and the crash loop
        if only == "cluster":
            row = bench_cluster.run(quick)
            report["cluster"] = row
            for name in ("in_process", "shards_1", "shards_2", "shards_4"):
                table(f"cluster benchmark: {name}", row[name])
        rounds = kills if kills is not None else (3 if quick or only == "cluster" else 30)
        row = cluster_crash.run(rounds, seed)
    report["cluster_crash"] = row
    table(
        "cluster crash loop: SIGKILL shard processes under a host workload, check the ledger",
        {**row, "problems": len(row["problems"])},
    )
    for problem in row["problems"][:20]:
        print("  PROBLEM:", problem)
    return failed or bool(row["problems"])
