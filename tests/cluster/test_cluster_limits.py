"""Provider limits across a real two-shard cluster: one actor leases the account's capacity.

The model agents of both shards call a stub on 127.0.0.1 through litellm
(a model profile: ``model_settings`` carry the stub's URL to every shard).
The stub holds each call until the test lets it go, so what is in flight can
be read; the provider-limits actor's book (``Cluster.provider_leases``) says
which shard's process holds what. Waits are for states, never for time.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from cluster.conftest import OpenCluster
from retinue import InvalidLimits, Limits, Profile, ProviderLimit
from retinue.cluster.ids import split_id
from retinue.testing import OpenAIStub, StubReply, StubRequest

pytestmark = pytest.mark.ray

SETTLE_S = 90.0  # hang guard only
LEASE_S = 2.0


def until(predicate: Any, what: str, timeout: float = SETTLE_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class HeldStub:
    """A stub whose answers wait for :attr:`go`; counts the requests it got."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.stub = OpenAIStub(self.answer)

    def answer(self, request: StubRequest) -> StubReply:
        self.go.wait(SETTLE_S)
        return StubReply(message={"role": "assistant", "content": "ok"}, usage=(20, 5))


def test_cluster_open_checks_its_provider_limits(open_cluster: OpenCluster) -> None:
    with pytest.raises(InvalidLimits, match="twice"):
        open_cluster(
            provider_limits=[ProviderLimit("a", max_in_flight=1), ProviderLimit("a")],
        )


def test_two_shards_hold_one_accounts_limit_and_a_dead_shards_lease_expires(
    open_cluster: OpenCluster,
) -> None:
    held = HeldStub()
    with held.stub as stub:
        settings = {"api_base": stub.url, "api_key": "x", "retry_base_s": 0.01}
        cluster = open_cluster(
            shards=2,
            profiles=[Profile("asker", model="openai/stub", model_settings=settings)],
            limits=Limits(wait_default_s=SETTLE_S),
            provider_limits=[ProviderLimit(stub.url, max_in_flight=2, adaptive=False)],
            provider_lease_s=LEASE_S,
        )
        agents = [cluster.spawn("asker", f"q{n}", name=f"q{n}") for n in range(8)]
        shards = {_shard(a.id) for a in agents}
        assert shards == {0, 1}, "the directory placed every agent on one shard"
        # Both shards have calls to make; the account lets two at a time in flight.
        until(lambda: len(stub.requests) >= 2, "two calls at the stub")
        (lease,) = cluster.provider_leases()
        assert len(stub.requests) == 2  # the other six wait for the account's capacity
        assert sum(lease.held.values()) == 2
        # Kill a shard's process that holds capacity: its lease expires, the other
        # shard's calls get the slots (its own calls, cut, stay held at the stub).
        holder = next(h for h, n in lease.held.items() if n)
        os.kill(int(holder.rsplit(":", 1)[1]), signal.SIGKILL)
        until(lambda: len(stub.requests) > 2, "calls after the dead shard's lease expired")
        (after,) = cluster.provider_leases()
        assert holder not in after.held and after.expired >= 1
        assert sum(after.held.values()) <= 2
        held.go.set()
        for agent in agents:  # the killed shard's agents are restored interrupted
            info = until(lambda a=agent: _settled(cluster, a.id), f"{agent.name} settled")
            assert info.state.value in ("completed", "interrupted")
        assert any(_settled(cluster, a.id).state.value == "completed" for a in agents)
        until(
            lambda: sum(cluster.provider_leases()[0].held.values()) == 0,
            "every slot given back",
        )


def _shard(agent_id: str) -> int:
    split = split_id(agent_id)
    assert split is not None, agent_id
    return split[0]


def _settled(cluster: Any, agent_id: str) -> Any:
    info = cluster.get(agent_id)
    return info if info.state.settled else None
