"""A cluster on a real two-node Ray: trees spread over shards, calls routed by id and path."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from support import reader_team

from cluster.conftest import OpenCluster
from retinue import (
    AgentState,
    ApprovalAlreadyAnswered,
    ArgumentTypeError,
    Completion,
    CompletionStatus,
    DuplicateAgentPath,
    InvalidAgentPath,
    InvalidArgument,
    NothingToWaitFor,
    NotPermitted,
    RuntimeClosed,
    UnknownAgent,
    UnknownApproval,
    UnknownProfile,
    WaitTimeout,
)
from retinue.cluster.ids import split_id

pytestmark = pytest.mark.ray


def shard_of(agent_id: str) -> int:
    split = split_id(agent_id)
    assert split is not None, agent_id
    return split[0]


def test_trees_spread_over_shards_on_both_nodes(open_cluster: OpenCluster) -> None:
    cluster = open_cluster(shards=4)
    infos = [cluster.spawn("worker", f"job {i}", name=f"t{i}") for i in range(8)]
    # The least-loaded rule: eight new names over four shards, two each.
    assert sorted(shard_of(i.id) for i in infos) == [0, 0, 1, 1, 2, 2, 3, 3]
    nodes = {pong.node_id for pong in cluster.ping()}
    assert len(nodes) == 2  # the shards live on both nodes of the cluster
    for info in infos:
        done = cluster.wait(info.id, timeout=30)
        assert (done.agent_id, done.output) == (info.id, f"done:{info.task}")
    # agents() merges every shard, oldest first.
    merged = cluster.agents()
    assert [a.id for a in merged] == [i.id for i in infos]
    assert all(a.state is AgentState.COMPLETED for a in merged)


def test_calls_by_id_and_by_path_reach_the_right_shard(open_cluster: OpenCluster) -> None:
    cluster = open_cluster(shards=2)  # fresh placements: alpha and beta on shards 0 and 1
    a = cluster.spawn("worker", "a", name="alpha")
    b = cluster.spawn("worker", "b", name="beta")
    assert shard_of(a.id) != shard_of(b.id)
    assert cluster.get("/root/alpha") == cluster.get(a.id)
    assert cluster.get("beta").id == b.id  # a relative path resolves below /root
    message = cluster.send("/root/beta", "hello")
    assert shard_of(message.id) == shard_of(b.id)
    assert message.recipient_id == b.id
    assert message.dedup_key is None  # the key the face made is not the caller's
    assert [m.content for m in cluster.inspect(b.id).unread] == ["hello"]
    assert cluster.wait("/root/alpha", timeout=30).agent_id == a.id
    follow = cluster.follow_up("/root/alpha", "again")
    assert (follow.id, follow.generation) == (a.id, 2)
    assert cluster.wait(a.id, timeout=30).generation == 2
    closed = cluster.close("/root/alpha")
    assert closed.state is AgentState.CLOSED
    # The name is free again, and stays on its shard.
    again = cluster.spawn("worker", "a2", name="alpha")
    assert shard_of(again.id) == shard_of(a.id) and again.id != a.id


def test_a_three_level_run_many_tree_works_inside_one_shard(shared_cluster: Any) -> None:
    cluster = shared_cluster
    lead = cluster.spawn("lead", "T", name="review")
    done = cluster.wait(lead.id, timeout=60)
    assert done.status is CompletionStatus.COMPLETED
    assert done.output == ("[leaf:T.m0.l0, leaf:T.m0.l1]; [leaf:T.m1.l0, leaf:T.m1.l1]")
    tree = [a for a in cluster.agents() if a.path.startswith("/root/review")]
    assert len(tree) == 7
    assert {shard_of(a.id) for a in tree} == {shard_of(lead.id)}
    mid = cluster.get("/root/review/agent_" + tree[1].path.rsplit("_", 1)[1])
    assert mid.id == tree[1].id  # a deep path goes to its tree's shard
    closed = cluster.close_tree(lead.id)
    assert [a.path for a in closed][-1] == "/root/review"
    assert all(a.state is AgentState.CLOSED for a in closed)


def test_refusals_cross_the_wire_as_their_own_errors(shared_cluster: Any) -> None:
    cluster = shared_cluster
    a = cluster.spawn("worker", "x", name="dup")
    with pytest.raises(DuplicateAgentPath):
        cluster.spawn("gated", "y", name="dup")
    with pytest.raises(UnknownProfile):
        cluster.spawn("nobody", "y", name="z")
    with pytest.raises(UnknownAgent):
        cluster.get("/root/nobody_here")
    with pytest.raises(UnknownAgent, match="the cluster has 2 shards"):
        cluster.get("s7-" + "0" * 32)
    with pytest.raises(InvalidAgentPath):
        cluster.get("/root/Bad Name")
    with pytest.raises(ArgumentTypeError):
        cluster.get(42)
    with pytest.raises(ArgumentTypeError):
        cluster.close()
    cluster.wait(a.id, timeout=30)
    with pytest.raises(NothingToWaitFor):
        cluster.wait(a.id, timeout=5)
    g = cluster.spawn("gated", "never", name="slow")
    started = time.monotonic()
    with pytest.raises(WaitTimeout):
        cluster.wait(g.id, timeout=0.3)
    assert time.monotonic() - started < 20  # bounded by the wait, not by retries
    cluster.interrupt(g.id)
    assert cluster.wait(g.id, timeout=30).status is CompletionStatus.INTERRUPTED


def test_messages_merge_every_shards_host_inbox(open_cluster: OpenCluster) -> None:
    cluster = open_cluster(shards=2)
    first = cluster.spawn("talker", "t", name="one")
    second = cluster.spawn("talker", "t", name="two")
    assert shard_of(first.id) != shard_of(second.id)
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        got += cluster.messages(timeout=10)
    assert sorted(m.content for m in got) == ["hello from one", "hello from two"]
    assert {shard_of(m.id) for m in got} == {0, 1}
    assert cluster.messages(timeout=0) == []


def test_the_async_twins_serve_the_same_calls(shared_cluster: Any) -> None:
    cluster = shared_cluster

    async def scenario() -> None:
        a = await cluster.spawn_async("worker", "x", name="aa")
        b = await cluster.spawn_async("lead", "B", name="bb")
        done = await asyncio.gather(
            cluster.wait_async(a.id, timeout=30), cluster.wait_async(b.id, timeout=60)
        )
        assert [d.agent_id for d in done] == [a.id, b.id]
        assert (await cluster.get_async("/root/aa")).state is AgentState.COMPLETED
        assert len(await cluster.agents_async()) == 8
        message = await cluster.send_async(a.id, "hi", dedup_key="k1")
        assert message.dedup_key == "k1"
        assert await cluster.send_async(a.id, "hi", dedup_key="k1") == message
        assert (await cluster.inspect_async(a.id)).unread == (message,)
        assert (await cluster.follow_up_async(a.id, "more")).generation == 2
        assert (await cluster.wait_async(a.id, timeout=30)).generation == 2
        assert len(await cluster.close_tree_async(b.id)) == 7
        assert (await cluster.close_async(a.id)).state is AgentState.CLOSED

    asyncio.run(scenario())


def test_a_cancelled_wait_async_loses_nothing(shared_cluster: Any, gates: Any) -> None:
    cluster = shared_cluster
    a = cluster.spawn("gated", "cancel-me", name="cw")

    async def scenario() -> None:
        waiting = asyncio.create_task(cluster.wait_async(a.id, timeout=60))
        await asyncio.sleep(0.5)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(scenario())
    (gates / "cancel-me").touch()
    done = cluster.wait(a.id, timeout=60)
    assert (done.generation, done.output) == (1, "done:cancel-me")


def test_a_closed_cluster_refuses_every_call(open_cluster: OpenCluster) -> None:
    cluster = open_cluster(shards=1)
    a = cluster.spawn("worker", "x", name="c")
    events = cluster.stream()
    cluster.shutdown()
    cluster.shutdown()  # idempotent
    assert list(events) == []  # a stream open at shutdown ends
    with pytest.raises(RuntimeClosed):
        cluster.get(a.id)
    with pytest.raises(RuntimeClosed):
        cluster.stream(a.id)
    with pytest.raises(RuntimeClosed):
        asyncio.run(cluster.agents_async())


def only_here(turn: Any) -> str:
    """A runner the workers cannot import (this test module is not shipped to them)."""
    return "never"


def test_a_runner_the_workers_cannot_import_fails_the_open(open_cluster: OpenCluster) -> None:
    from retinue import ClusterError, Profile

    with pytest.raises(ClusterError, match="does not import on this worker"):
        open_cluster(shards=2, profiles=[Profile("p", runner=only_here)])
    # Nothing is left holding the stores: the same root opens with runners that do import.
    cluster = open_cluster(shards=2)
    assert cluster.wait(cluster.spawn("worker", "x", name="ok").id, timeout=30).output == "done:x"


def test_host_threads_waiting_on_one_agent_each_get_a_different_completion(
    shared_cluster: Any,
) -> None:
    import threading

    cluster = shared_cluster
    a = cluster.spawn("worker", "t0", name="many")
    for generation in range(2, 7):
        deadline = time.monotonic() + 30
        while cluster.get(a.id).state is not AgentState.COMPLETED:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        cluster.follow_up(a.id, f"t{generation - 1}")
    got: list[Any] = []
    lock = threading.Lock()

    def wait_once() -> None:
        done = cluster.wait(a.id, timeout=30)
        with lock:
            got.append(done.generation)

    threads = [threading.Thread(target=wait_once) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(got) == [1, 2, 3, 4, 5, 6]
    with pytest.raises(NothingToWaitFor):
        cluster.wait(a.id, timeout=5)


def test_parked_approvals_are_listed_and_answered_through_the_face(
    open_cluster: OpenCluster, tmp_path: Path
) -> None:
    cluster = open_cluster(shards=2, team=reader_team(tmp_path), profiles=None)
    a = cluster.spawn("reader", "read the notes", name="first")
    b = cluster.spawn("reader", "read the notes", name="second")
    assert shard_of(a.id) != shard_of(b.id)
    deadline = time.monotonic() + 60
    while len(pending := cluster.approvals()) < 2:
        assert time.monotonic() < deadline, pending
        time.sleep(0.05)
    # approvals() merges both shards; each request's id carries its shard.
    by_agent = {r.agent_id: r for r in pending}
    assert set(by_agent) == {a.id, b.id}
    assert all(shard_of(r.id) == shard_of(r.agent_id) for r in pending)
    assert {(r.tool, r.path) for r in pending} == {
        ("read_file", "/root/first"),
        ("read_file", "/root/second"),
    }
    assert cluster.approvals("/root/second") == [by_agent[b.id]]
    assert cluster.get(a.id).state is AgentState.AWAITING_APPROVAL
    cluster.faults.drop["approve"] = 1  # the reply is lost: the retry answers once, no error
    cluster.approve(by_agent[a.id].id, note="read-only, fine")
    assert cluster.faults.dropped == 1
    asyncio.run(cluster.deny_async(by_agent[b.id].id, reason="not today"))
    with pytest.raises(ApprovalAlreadyAnswered):
        cluster.approve(by_agent[a.id].id)
    with pytest.raises(UnknownApproval):
        cluster.deny("s1-" + "0" * 32, reason="no")
    with pytest.raises(UnknownApproval, match="list them with approvals"):
        cluster.deny("s9-" + "0" * 32, reason="no")  # a shard the cluster does not have
    with pytest.raises(ArgumentTypeError):
        cluster.approve(7)
    approved, denied = cluster.wait(a.id, timeout=60), cluster.wait(b.id, timeout=60)
    assert approved.status is CompletionStatus.COMPLETED, approved.error
    assert "ship on Tuesday" in (approved.output or "")
    assert "ship on Tuesday" not in (denied.output or "")
    assert cluster.approvals() == [] and asyncio.run(cluster.approvals_async()) == []


def test_run_spawns_on_the_agents_shard_and_waits_there(shared_cluster: Any) -> None:
    cluster = shared_cluster
    done = cluster.run("worker", "x", name="ran", timeout=30)
    assert (done.status, done.output, done.generation) == (CompletionStatus.COMPLETED, "done:x", 1)
    assert cluster.get("/root/ran").id == done.agent_id
    with pytest.raises(NothingToWaitFor):  # the run received the completion, once
        cluster.wait(done.agent_id, timeout=5)

    first = cluster.run("worker", "k", idempotency_key="run-key", timeout=30)
    with pytest.raises(NothingToWaitFor):  # a retry waits on the first's agent: nothing left
        cluster.run("worker", "k", idempotency_key="run-key", timeout=30)
    assert [a.id for a in cluster.agents() if a.id == first.agent_id] == [first.agent_id]
    assert len(cluster.agents()) == 2  # the retry spawned nothing

    with pytest.raises(NotPermitted):  # refused on the parent's shard: nothing spawned
        cluster.run("worker", "c", name="kid", parent="/root/ran", timeout=30)
    assert len(cluster.agents()) == 2

    async def scenario() -> Completion:
        ran: Completion = await cluster.run_async("worker", "y", name="ran_async", timeout=30)
        return ran

    assert asyncio.run(scenario()).output == "done:y"


def test_a_refused_or_late_run(shared_cluster: Any) -> None:
    cluster = shared_cluster
    with pytest.raises(UnknownProfile):
        cluster.run("nobody", "y", name="refused", timeout=30)
    with pytest.raises(UnknownAgent):
        cluster.get("/root/refused")  # nothing was spawned
    with pytest.raises(InvalidArgument):
        cluster.run("worker", "y", name="refused", timeout=-1)
    assert cluster.agents() == []

    with pytest.raises(WaitTimeout) as late:
        cluster.run("gated", "never-run", name="late", timeout=0.3)
    assert late.value.path == "/root/late"
    assert cluster.get("/root/late").state.busy  # it keeps running
    cluster.interrupt("/root/late")
    assert cluster.wait("/root/late", timeout=30).status is CompletionStatus.INTERRUPTED


def test_a_cancelled_run_async_loses_nothing(shared_cluster: Any, gates: Any) -> None:
    cluster = shared_cluster

    async def scenario() -> None:
        running = asyncio.create_task(cluster.run_async("gated", "run-cancel", name="rc"))
        while not await cluster.agents_async():
            await asyncio.sleep(0.05)  # spawned: the run waits on it
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(scenario())
    (gates / "run-cancel").touch()
    done = cluster.wait("/root/rc", timeout=60)
    assert (done.generation, done.output) == (1, "done:run-cancel")
