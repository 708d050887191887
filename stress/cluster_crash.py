"""Cluster crash loop: SIGKILL shard processes under a random host workload, check the ledger.

``python -m stress --only cluster_crash --kills N`` (and a few rounds inside
``--only cluster``), in a loopback-only namespace. A host thread runs a
seeded random workload against a 2-shard cluster (spawn, send, follow-up,
wait, close) while a killer SIGKILLs a random shard's process at random
moments, or arms it to kill itself inside a spawn's or send's commit window
(after the runtime's commit, before the request log's); Ray restarts it, its
store reopens, and the face retries what was in flight. Every acknowledged
call goes into a ledger. At the end every agent is drained (waited on until
nothing is left) and the ledger checked:

- every acknowledged spawn exists, once (no retry spawned twice);
- every acknowledged message was delivered exactly once: it is in its
  agent's mailbox or was read by exactly one turn (the ``reader`` runner
  returns the ids of the messages its turn read);
- every completion the host received is received once, and every agent's
  turns all reached the host: generations 1..n, none missing, none twice.
"""

from __future__ import annotations

import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from retinue import Limits, NothingToWaitFor, Profile, RetinueError, WaitTimeout
from stress.cluster_common import clusterlib, ray_session

__all__ = ["run"]


def _profiles() -> list[Profile]:
    return [Profile("reader", runner=clusterlib.reader)]


class Ledger:
    """What the host was told, call by call."""

    def __init__(self) -> None:
        self.spawned: dict[str, str] = {}  # id -> name
        self.sent: dict[str, str] = {}  # message id -> agent id
        self.received: list[str] = []  # completion ids, in order
        self.outputs: list[str] = []  # what those turns returned (the message ids they read)
        self.closed_unread: set[str] = set()  # messages still unread when their agent closed
        self.refused = 0
        self.ops = 0


def _workload(cluster: Any, ledger: Ledger, rng: random.Random, stop: threading.Event) -> None:
    live: list[str] = []
    n = 0
    while not stop.is_set():
        ledger.ops += 1
        action = rng.random()
        try:
            if action < 0.3 or not live:
                info = cluster.spawn("reader", f"task {n}", name=f"a{n}")
                n += 1
                ledger.spawned[info.id] = info.name
                live.append(info.id)
            elif action < 0.55:
                target = rng.choice(live)
                message = cluster.send(target, f"note {ledger.ops}")
                ledger.sent[message.id] = target
            elif action < 0.7:
                cluster.follow_up(rng.choice(live), f"again {ledger.ops}")
            elif action < 0.95:
                _receive(ledger, cluster.wait(rng.choice(live), timeout=2))
            else:
                target = live.pop(rng.randrange(len(live)))
                _drain(cluster, target, ledger)
                ledger.closed_unread |= {m.id for m in cluster.inspect(target).unread}
                cluster.close(target)
        except (NothingToWaitFor, WaitTimeout):
            pass
        except RetinueError:
            ledger.refused += 1  # a refusal is an answer too (say, a follow-up on a busy agent)


def _receive(ledger: Ledger, completion: Any) -> None:
    ledger.received.append(completion.id)
    ledger.outputs.append(completion.output or "")


def _drain(cluster: Any, agent_id: str, ledger: Ledger) -> None:
    while True:
        try:
            _receive(ledger, cluster.wait(agent_id, timeout=60))
        except NothingToWaitFor:
            return


def _killer(cluster: Any, kills: int, rng: random.Random, stop: threading.Event) -> list[str]:
    """SIGKILL a random shard now, or (every other time) arm it to die inside a commit window.

    An armed shard kills itself on its next spawn or send, after the runtime's
    commit and before the request log's (the window the keys close).
    """
    killed: list[str] = []
    while len(killed) < kills and not stop.wait(rng.uniform(0.3, 1.5)):
        pong = rng.choice(cluster.ping())
        if rng.random() < 0.5:
            cluster.set_fault(pong.shard, "after_runtime", ("spawn", "send"), 1)
            killed.append("window")
        else:
            os.kill(pong.pid, signal.SIGKILL)
            killed.append("now")
    return killed


def _check(cluster: Any, ledger: Ledger) -> list[str]:
    problems: list[str] = []
    agents = {a.id: a for a in cluster.agents(include_closed=True)}
    names = [a.name for a in agents.values()]
    for agent_id, name in ledger.spawned.items():
        if agent_id not in agents:
            problems.append(f"acknowledged spawn {name} ({agent_id}) is lost")
        if names.count(name) != 1:
            problems.append(f"{name} exists {names.count(name)} times")
    for agent_id in agents:
        if agents[agent_id].state != "closed":
            _drain(cluster, agent_id, ledger)
    if len(set(ledger.received)) != len(ledger.received):
        problems.append("a completion was received twice")
    for agent_id, info in agents.items():
        got = sorted(int(c.rsplit(":", 1)[1]) for c in ledger.received if c.startswith(agent_id))
        if got != list(range(1, info.generation + 1)):
            problems.append(f"{info.name}: received generations {got}, turns 1..{info.generation}")
    read = [m for output in ledger.outputs for m in output.split(",") if m]
    boxes = {
        m.id
        for agent_id, info in agents.items()
        if info.state != "closed"
        for m in cluster.inspect(agent_id).unread
    }
    for message_id in ledger.sent:
        local = message_id.split("-", 1)[1]
        times = read.count(local) + (message_id in boxes) + (message_id in ledger.closed_unread)
        if times != 1:
            problems.append(f"message {message_id} delivered {times} times")
    return problems


def run(kills: int, seed: int) -> dict[str, Any]:
    """Run the loop with ``kills`` SIGKILLs; return the row (``problems`` must be empty)."""
    from retinue.cluster import Cluster

    rng = random.Random(seed)
    ledger = Ledger()
    started = time.perf_counter()
    with ray_session(), tempfile.TemporaryDirectory() as tmp:
        limits = Limits(retain_read_messages=1_000_000, wait_default_s=30.0)
        root = Path(tmp) / "cluster"
        with Cluster.open(root, shards=2, profiles=_profiles(), limits=limits) as cluster:
            stop = threading.Event()
            worker = threading.Thread(
                target=_workload, args=(cluster, ledger, random.Random(seed + 1), stop)
            )
            worker.start()
            killed = _killer(cluster, kills, rng, stop)
            time.sleep(0.5)
            stop.set()
            worker.join()
            problems = _check(cluster, ledger)
    return {
        "kills": len(killed),
        "of_them_armed_in_the_commit_window": killed.count("window"),
        "acknowledged_spawns": len(ledger.spawned),
        "acknowledged_sends": len(ledger.sent),
        "completions_received": len(ledger.received),
        "refusals": ledger.refused,
        "host_ops": ledger.ops,
        "problems": problems,
        "seconds": round(time.perf_counter() - started, 1),
    }
