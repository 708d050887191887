"""Cluster benchmark: trees and model turns through 1, 2 and 4 shards vs one in-process Runtime.

``python -m stress --only cluster`` (in a loopback-only namespace). One
local Ray (one node, 2 CPUs) serves every cluster of the run; the baseline is
one ``Runtime`` in this process on the same workload, measured in the same
run:

- trees: 3-level trees (a lead runs 2 mids, each runs 2 leaves, ``run_many``),
  ``in_flight`` at once from one asyncio loop: spawn the lead, wait for it,
  close its tree (7 agents, 7 turns);
- model turns: top-level agents on ``openai/...`` against
  :class:`~retinue.llm.stub.OpenAIStub` on 127.0.0.1 (litellm's real OpenAI
  path), one model call per turn, ``in_flight`` at once;
- per call: one ``get`` round trip, one lifecycle (spawn + wait + close of an
  agent that answers at once) one after the other, and the directory's
  placement of a new top-level name.

Every shard of a cluster is warmed up (its worker started, litellm
imported) before it is timed. ``--quick`` (CI) measures the baseline and one
shard on a small workload: it checks that the benchmark runs, while the
cluster tests prove what more shards do; its figures are not the docs' benchmarks page's.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from retinue import Limits, Profile, Runtime
from retinue.llm.stub import OpenAIStub
from stress.cluster_common import clusterlib, ray_session

__all__ = ["run"]


def profiles(stub_url: str) -> list[Profile]:
    """The benchmark's profiles: the tree, an echo worker and a model agent on the stub."""
    return [
        Profile("lead", subagents=["mid"], runner=clusterlib.lead),
        Profile("mid", subagents=["leaf"], runner=clusterlib.mid),
        Profile("leaf", runner=clusterlib.leaf),
        Profile("worker", runner=clusterlib.echo),
        Profile(
            "model",
            model="openai/stub-model",
            model_settings={"api_base": stub_url, "api_key": "x", "retries": 0},
        ),
    ]


LIMITS = Limits(max_agents=100_000, max_active_turns=64, wait_max_s=3600.0)
QUICK = {"trees": 16, "turns": 16, "in_flight": 8, "calls": 20}
FULL = {"trees": 300, "turns": 400, "in_flight": 32, "calls": 500}


async def _batch(host: Any, profile: str, prefix: str, count: int, in_flight: int) -> float:
    """Run ``count`` top-level agents of ``profile``, ``in_flight`` at once; return seconds."""
    gate = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with gate:
            info = await host.spawn_async(profile, f"{prefix}{i}", name=f"{prefix}{i}")
            done = await host.wait_async(info.id, timeout=600)
            assert done.status == "completed", done
            await host.close_tree_async(info.id)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return time.perf_counter() - start


def _per_call(host: Any, calls: int) -> dict[str, float]:
    """Mean ``get`` round trip (us) and one-at-a-time lifecycle (ms) on ``host``."""
    info = host.spawn("worker", "probe", name="probe")
    host.wait(info.id, timeout=60)
    start = time.perf_counter()
    for _ in range(calls):
        host.get(info.id)
    get_us = (time.perf_counter() - start) / calls * 1e6
    lifecycles = max(10, calls // 5)
    start = time.perf_counter()
    for i in range(lifecycles):
        agent = host.spawn("worker", "x", name=f"life{i}")
        host.wait(agent.id, timeout=60)
        host.close(agent.id)
    life_ms = (time.perf_counter() - start) / lifecycles * 1e3
    host.close(info.id)
    return {"get_us": round(get_us), "lifecycle_ms": round(life_ms, 2)}


def _measure(host: Any, sizes: dict[str, int], warm: int) -> dict[str, Any]:
    """Warm ``host`` up, then measure trees/s, model turns/s and per-call costs."""
    asyncio.run(_batch(host, "lead", "warmtree", warm, warm))
    asyncio.run(_batch(host, "model", "warmmodel", warm, warm))
    trees_s = asyncio.run(_batch(host, "lead", "tree", sizes["trees"], sizes["in_flight"]))
    turns_s = asyncio.run(_batch(host, "model", "turn", sizes["turns"], sizes["in_flight"]))
    return {
        "trees_per_s": round(sizes["trees"] / trees_s, 1),
        "agents_per_s": round(sizes["trees"] * 7 / trees_s),
        "model_turns_per_s": round(sizes["turns"] / turns_s, 1),
        **_per_call(host, sizes["calls"]),
    }


def _placement_ms(cluster: Any, names: int) -> float:
    """Mean milliseconds of the directory placing a new top-level name (one call each)."""
    directory = cluster._transport.directory
    import ray

    start = time.perf_counter()
    for i in range(names):
        ray.get(directory.place.remote(f"placement_probe_{i}"))
    return (time.perf_counter() - start) / names * 1e3


def shard_counts(quick: bool) -> tuple[int, ...]:
    """The shard counts measured: 1 in a quick run, else 1, 2 and 4."""
    return (1,) if quick else (1, 2, 4)


def run(quick: bool) -> dict[str, Any]:
    """Measure the baseline and each of :func:`shard_counts` in one run; return the row."""
    from retinue.cluster import Cluster

    sizes, warm = (QUICK, 2) if quick else (FULL, 4)
    counts = shard_counts(quick)
    row: dict[str, Any] = {**sizes}
    with ray_session(), OpenAIStub() as stub, tempfile.TemporaryDirectory() as tmp:
        chosen = profiles(stub.url)
        with Runtime.open(Path(tmp) / "runtime", profiles=chosen, limits=LIMITS) as rt:
            base = _measure(rt, sizes, warm)
        row["in_process"] = base
        for shards in counts:
            root = Path(tmp) / f"cluster{shards}"
            with Cluster.open(root, shards=shards, profiles=chosen, limits=LIMITS) as cluster:
                asyncio.run(_batch(cluster, "lead", "spread", shards * warm, shards * warm))
                got = _measure(cluster, sizes, warm * shards)
                if shards == 1:
                    got["directory_place_ms"] = round(_placement_ms(cluster, 50), 2)
            row[f"shards_{shards}"] = got
    for shards in counts:
        got = row[f"shards_{shards}"]
        got["trees_vs_in_process"] = round(got["trees_per_s"] / base["trees_per_s"], 2)
        got["turns_vs_in_process"] = round(got["model_turns_per_s"] / base["model_turns_per_s"], 2)
        got["get_overhead_us"] = got["get_us"] - base["get_us"]
        got["lifecycle_overhead_ms"] = round(got["lifecycle_ms"] - base["lifecycle_ms"], 2)
    row["median_get_us"] = statistics.median(row[f"shards_{s}"]["get_us"] for s in counts)
    return row
