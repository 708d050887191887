"""Faults across the wire: a shard SIGKILLed mid-tree, lost replies, crashes between commits.

Every check is on what a host relies on: no acknowledged spawn, message or
completion lost, none received twice, no retried call applied twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import clusterlib
import pytest

from cluster.conftest import OpenCluster
from retinue import (
    AgentState,
    CompletionStatus,
    EventsDropped,
    NothingToWaitFor,
    Profile,
    TurnSettled,
    TurnStarted,
)
from retinue.cluster.ids import split_id

pytestmark = pytest.mark.ray
SETTLE_S = 60.0
HERE = Path(clusterlib.__file__).parent.parent  # the folder that holds clusterlib


def shard_of(agent_id: str) -> int:
    split = split_id(agent_id)
    assert split is not None
    return split[0]


def until(predicate: Any, what: str, timeout: float = SETTLE_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_shard_killed_mid_tree_restarts_and_loses_nothing(
    open_cluster: OpenCluster, gates: Path
) -> None:
    cluster = open_cluster(shards=2)
    lead = cluster.spawn("lead", "K.gate", name="killed")
    k = shard_of(lead.id)
    until(
        lambda: len([a for a in cluster.agents() if a.path.startswith("/root/killed")]) == 7,
        "the whole tree running",
    )
    note = cluster.send(lead.id, "a note for the next turn")
    events = cluster.stream(lead.id)  # a stream open across the shard's restart
    other = cluster.spawn("worker", "elsewhere", name="bystander")
    # A host wait blocked in the shard when it dies.
    answers: list[Any] = []
    waiter = threading.Thread(target=lambda: answers.append(cluster.wait(lead.id, timeout=90)))
    waiter.start()
    time.sleep(0.5)
    old = cluster.ping()[k]
    os.kill(old.pid, signal.SIGKILL)
    waiter.join(SETTLE_S + 30)
    assert not waiter.is_alive()
    (first,) = answers
    # Answered by the restored state: the lead's turn was lost, so it is interrupted.
    assert (first.agent_id, first.generation, first.status) == (
        lead.id,
        1,
        CompletionStatus.INTERRUPTED,
    )
    new = cluster.ping()[k]
    assert new.pid != old.pid and new.restored_at > old.restored_at
    # Nothing acknowledged is lost: the tree, the message, the other shard's agent.
    tree = [a for a in cluster.agents() if a.path.startswith("/root/killed")]
    assert len(tree) == 7
    assert all(a.state is AgentState.INTERRUPTED for a in tree)
    assert note.id in [m.id for m in cluster.inspect(lead.id).unread]
    assert cluster.wait(other.id, timeout=30).output == "done:elsewhere"
    # The stream was reopened on the restarted shard (its take failed, or found it unknown).
    until(lambda: cluster.ping()[k].streams == 1, "the stream reopened")
    # The lead resumes (closing what it left), the leaves pass their gates.
    for m in ("m0", "m1"):
        for leaf in ("l0", "l1"):
            (gates / f"K.gate.{m}.{leaf}").touch()
    cluster.resume(lead.id)
    second = cluster.wait(lead.id, timeout=90)
    assert (second.generation, second.status) == (2, CompletionStatus.COMPLETED)
    # The stream yielded one EventsDropped(dropped=0) for the gap, then the resumed turn.
    seen: list[Any] = []
    for event in events:
        seen.append(event)
        if isinstance(event, TurnSettled) and event.agent_id == lead.id:
            break
    gaps = [i for i, e in enumerate(seen) if isinstance(e, EventsDropped)]
    assert len(gaps) == 1 and seen[gaps[0]].dropped == 0
    assert [
        (type(e), e.generation)
        for e in seen[gaps[0] :]
        if isinstance(e, TurnStarted | TurnSettled) and e.agent_id == lead.id
    ] == [(TurnStarted, 2), (TurnSettled, 2)]
    events.close()
    # The interrupted children's completions wake the lead again (as on one machine);
    # every turn's completion reaches the host once, in order, then nothing is left.
    received = [first.id, second.id]
    while True:
        try:
            received.append(cluster.wait(lead.id, timeout=30).id)
        except NothingToWaitFor:
            break
    assert received == [f"{lead.id}:{g}" for g in range(1, len(received) + 1)]
    assert cluster.get(lead.id).generation == len(received)


def test_a_dropped_reply_is_retried_and_changes_nothing_twice(shared_cluster: Any) -> None:
    cluster = shared_cluster
    faults = cluster.faults
    faults.drop.update(spawn=1, send=1, follow_up=1, wait=1, close_tree=1, interrupt=1)
    a = cluster.spawn("worker", "x", name="dropped")
    assert [i.id for i in cluster.agents()] == [a.id]
    first = cluster.wait(a.id, timeout=30)
    assert first.generation == 1
    message = cluster.send(a.id, "once")
    assert [m.id for m in cluster.inspect(a.id).unread] == [message.id]
    follow = cluster.follow_up(a.id, "second")
    assert follow.generation == 2
    assert cluster.wait(a.id, timeout=30).generation == 2
    with pytest.raises(NothingToWaitFor):
        cluster.wait(a.id, timeout=5)
    assert cluster.interrupt(a.id).generation == 2  # idle: nothing to interrupt, once
    closed = cluster.close_tree(a.id)
    assert [c.id for c in closed] == [a.id]
    assert faults.dropped == 6
    assert cluster.agents() == []
    # The rest of the mutating calls, on a gated agent and a talker.
    faults.drop.update(interrupt_tree=1, resume=1, close=1, messages=2)
    g = cluster.spawn("gated", "dropped-gate", name="gated")
    (interrupted,) = cluster.interrupt_tree(g.id)
    assert interrupted.state is AgentState.INTERRUPTED
    assert cluster.wait(g.id, timeout=30).status is CompletionStatus.INTERRUPTED
    assert cluster.resume(g.id).generation == 2  # resumed once, not twice
    cluster.interrupt(g.id)
    assert cluster.wait(g.id, timeout=30).generation == 2
    with pytest.raises(NothingToWaitFor):
        cluster.wait(g.id, timeout=5)
    assert cluster.close(g.id).state is AgentState.CLOSED  # not AgentClosed from a repeat
    cluster.spawn("talker", "t", name="talker")
    got: list[Any] = []
    deadline = time.monotonic() + SETTLE_S
    while not got and time.monotonic() < deadline:
        got = cluster.messages(timeout=10)
    assert [m.content for m in got] == ["hello from talker"]  # its reply was dropped, not it
    assert cluster.messages(timeout=0) == []
    assert faults.dropped == 11


def test_a_shard_killed_between_its_commits_spawns_and_sends_once(
    open_cluster: OpenCluster,
) -> None:
    cluster = open_cluster(shards=1)  # one cluster for both windows: a start less
    for point in ("after_runtime", "after_record"):
        pid = cluster.ping()[0].pid
        cluster.set_fault(0, point, ["spawn", "send"], times=2)
        a = cluster.spawn("worker", "x", name=f"crashy_{point}")  # the shard dies once here
        message = cluster.send(a.id, "exactly once")  # and once here
        assert cluster.ping()[0].pid != pid, point
        assert [i.id for i in cluster.agents()] == [a.id], point
        assert [m.id for m in cluster.inspect(a.id).unread] == [message.id], point
        assert cluster.wait(a.id, timeout=30).generation == 1, point
        cluster.close(a.id)


def test_an_unacknowledged_lease_is_handed_out_again_once(open_cluster: OpenCluster) -> None:
    cluster = open_cluster(shards=1, lease_timeout_s=1.0, retry_s=2.0)
    a = cluster.spawn("worker", "x", name="leased")
    # The ack of the first wait is lost for good: the shard releases the lease later.
    cluster.faults.drop["ack"] = 10_000
    first = cluster.wait(a.id, timeout=30)
    cluster.faults.drop["ack"] = 0
    until(lambda: cluster.ping()[0].leases == 0, "the lease released")
    # The completion is handed out again, but this face returned it already.
    with pytest.raises(NothingToWaitFor):
        cluster.wait(a.id, timeout=5)
    assert first.generation == 1


DRIVER = r"""
import sys
root, here, gates, address, gate = sys.argv[1:6]
sys.path.insert(0, here)
import clusterlib
from retinue import Profile
from retinue.cluster import Cluster
profiles = [Profile("worker", runner=clusterlib.echo), Profile("gated", runner=clusterlib.gated)]
cluster = Cluster.open(root, shards=2, profiles=profiles,
                       address=None if address == "own" else address,
                       runtime_env={"py_modules": [here + "/clusterlib"],
                                    "env_vars": {"RETINUE_CLUSTER_GATES": gates}})
done = cluster.spawn("worker", "finished", name="done_tree")
cluster.wait(done.id, timeout=60)
for name in ("open_a", "open_b", "open_c"):
    cluster.spawn("gated", gate, name=name)
print("READY", flush=True)
sys.stdin.read()
"""
DRIVER_PROFILES = [
    Profile("worker", runner=clusterlib.echo),
    Profile("gated", runner=clusterlib.gated),
]


@pytest.mark.parametrize("ray_of", ["own", "joined"])
def test_a_new_driver_finds_every_tree_of_a_killed_one(
    open_cluster: OpenCluster, tmp_path: Path, gates: Path, local_ray: Any, ray_of: str
) -> None:
    """A driver with a local Ray of its own takes it down when killed: the stores reopen.

    One that joined a running Ray leaves its (detached) shards running: they are found.
    """
    root = tmp_path / "driven"
    address = "own" if ray_of == "own" else local_ray.address
    gate = f"driver-gate-{ray_of}"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    child = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(root), str(HERE), str(gates), address, gate],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
    finally:
        child.kill()
        child.wait(30)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()  # a pipe left open is a ResourceWarning (an error here)
    cluster = open_cluster(shards=2, root=root, profiles=DRIVER_PROFILES, limits=None)
    found = {a.name: a for a in cluster.agents()}
    assert set(found) == {"done_tree", "open_a", "open_b", "open_c"}
    assert {shard_of(a.id) for a in found.values()} == {0, 1}
    assert found["done_tree"].state is AgentState.COMPLETED
    gated = ("open_a", "open_b", "open_c")
    # Paths still go through the directory the dead driver wrote.
    assert cluster.get("/root/open_b").id == found["open_b"].id
    (gates / gate).touch()
    if ray_of == "own":  # its shards died with it: restored, the lost turns interrupted
        assert all(found[n].state is AgentState.INTERRUPTED for n in gated)
        cluster.resume("/root/open_b")
        assert cluster.wait("/root/open_b", timeout=60).status is CompletionStatus.INTERRUPTED
    else:  # its shards kept running the turns
        assert [found[n].state for n in gated] == [AgentState.RUNNING] * 3
    assert cluster.wait("/root/open_b", timeout=60).output == f"done:{gate}"
