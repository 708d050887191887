"""Crash test: SIGKILL a random workload, reopen, check nothing acknowledged is lost.

A child process opens a runtime on a store and runs a random workload
(spawns, messages, follow-ups, interrupts, closes, waits; runners of random
duration that spawn children of their own). Every acknowledgement it gets is
appended to a side log *after* the call returned. The parent kills the child
with SIGKILL at a random moment, reopens the store and checks:

- every acknowledged spawn, message, follow-up, interrupt, close and received
  completion is in the store, exactly once;
- for every agent, every generation 1..n has exactly one completion (none
  lost, none duplicated), and no agent is left ``starting`` or ``running``;
- caps hold: depth, fan-out, live paths unique, live agents have live parents;
- a completion the host received before the kill is not handed out again;
- supervision (:mod:`stress.crash_supervision`): kills during restart
  backoffs, parked approvals and approved calls running; every task ends in
  exactly one completion whatever its attempts, pending approvals stay
  pending, and no approved call runs twice.

Rounds run on the same store, so damage would accumulate.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from retinue import Limits, Profile, Runtime, Turn
from retinue.errors import RetinueError, WaitTimeout
from retinue.persistence.store import Store
from retinue.protocol.records import AgentRecord, CompletionRecord, MessageRecord
from retinue.testing import OpenAIStub
from stress.crash_supervision import (
    answer_some,
    check_coverage,
    check_supervision,
    count_cut_short,
    read_approvals,
    stub_handler,
    supervised_profiles,
)
from stress.parts import Options, Part, Result

LIMITS = Limits(
    depth_cap=3,
    fanout_cap=4,
    max_tree_agents=24,
    max_agents=400,
    max_active_turns=8,
    mailbox_capacity=20,
    pending_completions_per_agent=50,
    wait_default_s=5.0,
)


def _lead(turn: Turn) -> str:
    rng = random.Random(turn.agent.id + str(turn.agent.generation))
    for _ in range(rng.randint(0, 2)):
        with contextlib.suppress(RetinueError):
            turn.spawn(rng.choice(("worker", "flaky")), f"sub of {turn.task}")
    if rng.random() < 0.3:
        with contextlib.suppress(RetinueError):
            turn.run("worker", "inline", timeout=0.5)
    time.sleep(rng.uniform(0, 0.02))
    return f"lead {turn.agent.generation} saw {len(turn.messages)}"


def _worker(turn: Turn) -> str:
    rng = random.Random(turn.agent.id + str(turn.agent.generation))
    time.sleep(rng.uniform(0, 0.03))
    if rng.random() < 0.1:
        raise RuntimeError("worker failed on purpose")
    return f"worker {turn.agent.generation}"


def profiles(stub_url: str, runs_log: Path) -> list[Profile]:
    """The workload's profiles: a lead, workers, and the supervised flaky and deployer."""
    return [
        Profile("lead", subagents=["worker", "flaky"], runner=_lead),
        Profile("worker", runner=_worker),
        *supervised_profiles(stub_url, runs_log),
    ]


def child_main(
    store: str, ack_log: str, seed: int, durability: str, stub_url: str, runs_log: str
) -> None:
    """Run the random workload until killed, logging every acknowledgement."""
    from retinue.llm.model import load_litellm

    load_litellm()  # before "opened": the kill timer should not run out in litellm's import
    rng = random.Random(seed)
    log = open(ack_log, "a", buffering=1)  # noqa: SIM115 - lives until the kill

    def ack(**entry: Any) -> None:
        log.write(json.dumps(entry) + "\n")

    rt = Runtime.open(
        store, profiles=profiles(stub_url, Path(runs_log)), limits=LIMITS, durability=durability
    )
    ack(op="opened")
    n = 0
    while True:
        n += 1
        live = rt.agents()
        op = rng.random()
        try:
            if op < 0.25 or not live:
                parent = "/root"
                if live and rng.random() < 0.5:
                    parent = rng.choice([a for a in live if a.profile == "lead"] or live).path
                profile = rng.choice(("lead", "lead", "deployer", "flaky"))
                if parent != "/root":
                    profile = rng.choice(("worker", "flaky"))
                info = rt.spawn(profile, f"task {n}", parent=parent)
                ack(op="spawn", id=info.id, path=info.path)
            elif op < 0.29:
                answer_some(rt, rng, ack)
            elif op < 0.45:
                target = rng.choice(live)
                key = f"k{n}" if rng.random() < 0.5 else None
                message = rt.send(target.id, f"msg {n}", dedup_key=key)
                ack(op="send", id=target.id, message_id=message.id)
            elif op < 0.6:
                target = rng.choice(live)
                info = rt.follow_up(target.id, f"again {n}")
                ack(op="follow_up", id=info.id, generation=info.generation)
            elif op < 0.7:
                target = rng.choice(live)
                info = rt.interrupt(target.id)
                ack(op="interrupt", id=info.id, generation=info.generation, state=info.state)
            elif op < 0.8:
                target = rng.choice(live)
                if rng.random() < 0.5:
                    for closed in rt.close_tree(target.id):
                        ack(op="close", id=closed.id)
                else:
                    closed = rt.close(target.id)
                    ack(op="close", id=closed.id)
            else:
                target = rng.choice(live)
                completion = rt.wait(target.id, timeout=0.05)
                ack(op="wait", id=completion.agent_id, generation=completion.generation)
        except RetinueError:
            pass


@dataclass
class Verdict:
    """What one kill-and-reopen round found."""

    acks: int = 0
    agents: int = 0
    interrupted_at_restore: int = 0
    restarting_at_kill: int = 0
    awaiting_approval_at_kill: int = 0
    approved_calls: int = 0
    approved_runs: int = 0
    cut_short: int = 0
    problems: list[str] = field(default_factory=list)


def check_store(
    store_path: Path, acks: list[dict[str, Any]], stub_url: str, runs_log: Path
) -> Verdict:
    """Reopen the store after a kill and check every promise against the ack log."""
    verdict = Verdict(acks=len(acks))
    before = {r.id: r for r in _read_agents(store_path)}
    approvals_before = read_approvals(store_path)
    rt = Runtime.open(store_path, profiles=profiles(stub_url, runs_log), limits=LIMITS)
    try:
        for diag in rt.diagnostics:
            verdict.problems.append(f"diagnostic after crash: {diag}")
        pending_after_open = {r.id for r in rt.approvals()}
        try:  # pending restarts fire, parks whose answers came carry on
            rt.wait_idle(60)
        except WaitTimeout:
            verdict.problems.append("the reopened runtime did not go idle within 60 s")
        after = {a.id: a for a in rt.agents(include_closed=True)}
        verdict.agents = len(after)
        verdict.interrupted_at_restore = sum(
            1 for r in before.values() if r.state in ("starting", "running")
        )
    finally:
        rt.shutdown()
    facts = check_supervision(
        before, approvals_before, read_approvals(store_path), pending_after_open, acks, runs_log
    )
    verdict.restarting_at_kill = facts.restarting
    verdict.awaiting_approval_at_kill = facts.awaiting
    verdict.approved_calls, verdict.approved_runs = facts.approved_calls, facts.runs
    verdict.cut_short = count_cut_short(store_path)
    verdict.problems += facts.problems
    records = {r.id: r for r in _read_agents(store_path)}
    completions = _read(store_path, "completions", CompletionRecord)
    messages = {m.message.id for m in _read(store_path, "messages", MessageRecord)}
    by_agent: dict[str, list[int]] = {}
    done_of: dict[str, list[CompletionRecord]] = {}
    for c in completions:
        by_agent.setdefault(c.completion.agent_id, []).append(c.completion.generation)
        done_of.setdefault(c.completion.agent_id, []).append(c)
    p = verdict.problems
    for entry in acks:
        op, agent_id = entry["op"], entry.get("id")
        record = records.get(agent_id) if agent_id else None
        if op == "opened":
            continue
        if record is None:
            p.append(f"acknowledged {op} of {agent_id} but the agent is gone")
            continue
        if op == "send" and entry["message_id"] not in messages:
            p.append(f"acknowledged message {entry['message_id']} is lost")
        elif op == "follow_up" and record.generation < entry["generation"]:
            p.append(f"acknowledged follow-up {agent_id}:{entry['generation']} is lost")
        elif op == "interrupt" and entry["state"] == "interrupted":
            if entry["generation"] not in by_agent.get(record.id, []):
                p.append(f"interrupted completion {agent_id}:{entry['generation']} is lost")
        elif op == "close" and record.state != "closed":
            p.append(f"acknowledged close of {record.path} is lost ({record.state})")
        elif op == "wait" and record.host_received < entry["generation"]:
            p.append(f"received completion {agent_id}:{entry['generation']} would come again")
    live_paths: set[str] = set()
    for record in records.values():
        if record.state in ("starting", "running"):
            p.append(f"{record.path} is still {record.state} after restore")
        uncovered = check_coverage(record, done_of.get(record.id, []))
        if uncovered is not None:
            p.append(uncovered)
        if record.state != "closed":
            if record.path in live_paths:
                p.append(f"two live agents at {record.path}")
            live_paths.add(record.path)
            if record.depth > LIMITS.depth_cap:
                p.append(f"{record.path} deeper than the cap")
            if record.parent_id is not None and records[record.parent_id].state == "closed":
                p.append(f"{record.path} is live under a closed parent")
            kids = [r for r in records.values() if r.parent_id == record.id and r.state != "closed"]
            if len(kids) > LIMITS.fanout_cap:
                p.append(f"{record.path} has {len(kids)} live children")
    return verdict


def _read(store_path: Path, database: str, kind: type[Any]) -> list[Any]:
    store = Store(store_path, readonly=True)
    try:
        snap = store.snapshot([database])
    finally:
        store.close()
    decoder = msgspec.msgpack.Decoder(kind)
    return [decoder.decode(v) for _, v in snap.records[database]]


def _read_agents(store_path: Path) -> list[AgentRecord]:
    if not (store_path / "data.mdb").exists():
        return []
    agents: list[AgentRecord] = _read(store_path, "agents", AgentRecord)
    return agents


def run_crashes(
    workdir: Path, kills: int, seed: int, durability: str = "full", max_run_s: float = 1.5
) -> list[Verdict]:
    """Run ``kills`` kill-and-reopen rounds on one store; return each round's verdict."""
    with OpenAIStub(stub_handler) as stub:
        return _rounds(workdir, kills, random.Random(seed), durability, max_run_s, stub.url)


def _rounds(
    workdir: Path, kills: int, rng: random.Random, durability: str, max_run_s: float, url: str
) -> list[Verdict]:
    store = workdir / "store"
    runs_log = workdir / "deploy-runs.log"
    verdicts: list[Verdict] = []
    for round_no in range(kills):
        ack_log = workdir / f"acks-{round_no}.jsonl"
        env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stress.crash",
                "child",
                str(store),
                str(ack_log),
                str(rng.randrange(2**31)),
                durability,
                url,
                str(runs_log),
            ],
            env=env,
            cwd=Path(__file__).resolve().parent.parent,
        )
        deadline = time.monotonic() + 60
        while not ack_log.exists() or "opened" not in ack_log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"crash child exited early with {proc.returncode}")
            time.sleep(0.01)
        time.sleep(rng.uniform(0.05, max_run_s))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        acks = [json.loads(line) for line in ack_log.read_text().splitlines() if line.strip()]
        verdicts.append(check_store(store, acks, url, runs_log))
    return verdicts


if __name__ == "__main__" and len(sys.argv) == 8 and sys.argv[1] == "child":
    child_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), *sys.argv[5:8])


def _part(options: Options) -> Result:
    """SIGKILL a random workload, reopen, check the acknowledgement log."""
    kills = options.kills if options.kills is not None else (4 if options.quick else 200)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        verdicts = run_crashes(Path(tmp), kills, options.seed)
    problems = [p for v in verdicts for p in v.problems]
    last = verdicts[-1] if verdicts else None
    row = {
        "kills": len(verdicts),
        "acknowledged_ops": sum(v.acks for v in verdicts),
        "agents_at_end": last.agents if last else 0,
        "interrupted_at_restore": sum(v.interrupted_at_restore for v in verdicts),
        "restarting_at_kill": sum(v.restarting_at_kill for v in verdicts),
        "awaiting_approval_at_kill": sum(v.awaiting_approval_at_kill for v in verdicts),
        "approved_calls": last.approved_calls if last else 0,
        "approved_runs": last.approved_runs if last else 0,
        "approved_calls_cut_short": last.cut_short if last else 0,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return Result.row("crash: SIGKILL a random workload, reopen, check the ack log", row, problems)


PART = Part("crash", _part, check=True)
