"""Provider limits on a two-shard cluster: one account's limit held across shards, lease on/off.

``python -m stress --only cluster_rate_limits`` (in a loopback-only network
namespace, as ``.ci/extras-ray.sh`` runs it). :data:`SHAPE`'s trees (a lead
each, fanning out to model agents that make one call per turn through
litellm) are spread by the directory over two shards and call one
:class:`~retinue.testing.RateLimitedStub` (one account). Two ways, in this
run: ``static``, the stub's limits given to ``Cluster.open(...,
provider_limits=[...])`` (the shards lease them from the provider-limits
actor); ``off``, no limit (each shard's calls retry the 429s). Printed per
way: calls, 429s, throughput as a fraction of the stub's request limit and
Jain's index across the trees (as :mod:`stress.bench.rate_limits` computes
them), the most requests any window of the stub held, and the wall time.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from retinue import Limits, Profile, ProviderLimit
from retinue.cluster.ids import split_id
from retinue.testing import RateLimitedStub, StubReply, StubRequest
from stress.bench.rate_limits import Shape, _row
from stress.cluster_common import clusterlib, ray_session

__all__ = ["SHAPE", "measure", "run"]

SHAPE = Shape(trees=10, fanout=16, requests=40, max_in_flight=8, window_s=1.5)
"""160 calls (one per worker turn) against 40 requests per 1.5 s: about four windows."""
SHARDS = 2


def _handler(request: StubRequest) -> StubReply:
    return StubReply(
        message={"role": "assistant", "content": "done"}, usage=(300, 40), delay_s=0.05
    )


def _profiles(url: str, window_s: float) -> list[Profile]:
    settings = {
        "api_base": url,
        "api_key": "x",
        "max_tokens": 64,
        "retries": 1000,
        "retry_base_s": 0.05,
        "retry_max_s": window_s,
    }
    return [
        Profile("lead", subagents=["worker"], runner=clusterlib.fan_out),
        Profile("worker", model="openai/bench", model_settings=settings),
    ]


def measure(way: str, shape: Shape = SHAPE) -> dict[str, Any]:
    """Run the workload on a fresh 2-shard cluster one ``way`` (``static`` or ``off``)."""
    from retinue.cluster import Cluster

    with (
        RateLimitedStub(
            _handler,
            requests_per_minute=shape.requests,
            tokens_per_minute=shape.tokens,
            max_in_flight=shape.max_in_flight,
            window_s=shape.window_s,
        ) as stub,
        tempfile.TemporaryDirectory() as tmp,
    ):
        limits = Limits(
            fanout_cap=max(8, shape.fanout),
            max_active_turns=shape.trees * (shape.fanout + 1),
            provider_window_s=shape.window_s,
            wait_default_s=600,
        )
        given = [
            ProviderLimit(
                stub.url,
                requests_per_minute=shape.requests,
                tokens_per_minute=shape.tokens,
                max_in_flight=shape.max_in_flight,
            )
        ]
        with Cluster.open(
            Path(tmp) / "c",
            shards=SHARDS,
            profiles=_profiles(stub.url, shape.window_s),
            limits=limits,
            provider_limits=given if way == "static" else None,
        ) as cluster:
            began = time.perf_counter()
            leads = [
                cluster.spawn("lead", f"t{k} {shape.fanout}", name=f"t{k}")
                for k in range(shape.trees)
            ]
            for lead in leads:
                cluster.wait(lead.id, timeout=600)
            wall = time.perf_counter() - began
            agents = cluster.agents()
            completed = sum(1 for a in agents if a.state.value == "completed")
            others = [
                f"{a.path} {a.state.value}: {a.error}"
                for a in agents
                if a.state.value != "completed"
            ]
            shards_used = len({_shard(lead.id) for lead in leads})
        row = _row(way, shape, stub, [], wall, completed)
        report = stub.report()
    row.pop("admission_wait_p50_s")
    row.pop("admission_wait_p99_s")
    row["max_requests_in_a_window"] = report.max_requests_in_window
    row["max_in_flight_at_stub"] = report.max_in_flight
    row["shards_with_trees"] = shards_used
    if others:
        row["not_completed"] = others[:5]
    return row


def _shard(agent_id: str) -> int | None:
    split = split_id(agent_id)
    return None if split is None else split[0]


def run() -> list[dict[str, Any]]:
    """Both ways, in one local Ray; one row per way."""
    with ray_session():
        return [measure("static"), measure("off")]
