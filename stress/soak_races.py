"""Concurrency soak: host threads and asyncio tasks race every call; each completion once.

Rounds on one store. In each round, ``threads`` host threads and ``tasks``
asyncio tasks (on one event loop) call spawn, follow-up, send, wait (tiny and
longer timeouts), cancelled ``wait_async``, interrupt, close and close-tree at
random on a shared pool of top-level agents, whose runners settle at once,
fail, hold until interrupted, or run a child (``turn.run``) and close it. A
round ends with the runtime closed in one of several ways (the host, two
threads at once, a runner, a coroutine on the loop); whichever way, the store
must be free the moment a close returns (an immediate reopen must work).

The ledger: every completion id the host's waits return (top-level agents:
the host is their recipient) and every completion a turn receives (in its
messages or from ``turn.run``) is counted. Checked against the store after
every round and at the end (after a final drain and a reopen): no id counted
twice (``duplicates``), every generation of every top-level agent received
(``lost``), a completion routed to an agent marked delivered exactly when a
turn received it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from retinue import Limits, Profile, Runtime, Turn
from retinue.errors import AgentClosed, RetinueError, StoreError, StoreLocked, WaitTimeout
from retinue.protocol.messages import AgentState, Completion
from stress.parts import Options, Part, Result
from stress.statemachine.storecheck import read_store

LIMITS = Limits(
    max_active_turns=16,
    fanout_cap=4,
    max_agents=5_000,
    mailbox_capacity=1_000,
    pending_completions_per_agent=1_000,
    wait_default_s=2.0,
    compact_interval_s=3600.0,
    # Nothing is compacted away, so the store can answer for every id the ledger counted.
    retain_closed_agents=10_000_000,
)
POOL = 24  # top-level agents per round
TASKS = ["quick", "quick", "quick", "fail", "hold", "child", "child"]
BUSY = (AgentState.STARTING, AgentState.RUNNING)
ENDINGS = ["host", "two_threads", "runner", "async_runner", "loop"]


class Ledger:
    """Counts of every completion id received, by the host's waits and by turns."""

    def __init__(self) -> None:
        """Start empty."""
        self.lock = threading.Lock()
        self.host: Counter[str] = Counter()
        self.turns: Counter[str] = Counter()
        self.ops: Counter[str] = Counter()
        self.problems: list[str] = []
        self.top: set[str] = set()

    def got(self, done: Completion) -> None:
        """Count one host receipt."""
        with self.lock:
            self.host[done.id] += 1

    def op(self, name: str) -> None:
        """Count one call."""
        with self.lock:
            self.ops[name] += 1

    def problem(self, text: str) -> None:
        """Record something that must never happen."""
        with self.lock:
            self.problems.append(text)


def _runners(ledger: Ledger, holder: list[Runtime]) -> list[Profile]:
    def worker(turn: Turn) -> str:
        with ledger.lock:
            ledger.turns.update(m.id for m in turn.messages if m.kind == "completion")
        if turn.task == "fail":
            raise ValueError("on purpose")
        if turn.task == "hold":
            turn.cancelled.wait(0.2)
        elif turn.task == "shutdown":
            holder[0].shutdown()
        elif turn.task == "child" and turn.reason != "wake":
            child = turn.spawn("leaf", "leaf")
            done = _wait(turn, child.id)
            if done is not None:
                with ledger.lock:
                    ledger.turns[done.id] += 1
            turn.close(child.id)
        return f"out:{turn.task}"

    async def async_worker(turn: Turn) -> str:
        with ledger.lock:
            ledger.turns.update(m.id for m in turn.messages if m.kind == "completion")
        if turn.task == "fail":
            raise ValueError("on purpose")
        if turn.task == "hold":
            await asyncio.sleep(0.2)
        elif turn.task == "shutdown":
            holder[0].shutdown()  # from the runtime's own event loop
        elif turn.task == "child" and turn.reason != "wake":
            child = await turn.spawn_async("leaf", "leaf")
            try:
                event = await turn.wait_async(child.id, timeout=0.5)
            except WaitTimeout:
                event = None
            if isinstance(event, Completion):
                with ledger.lock:
                    ledger.turns[event.id] += 1
            await turn.close_async(child.id)
        return f"out:{turn.task}"

    def leaf(turn: Turn) -> str:
        return "leaf"

    return [
        Profile("w", subagents=["leaf"], runner=worker, wake_on_completion=True),
        Profile("aw", subagents=["leaf"], runner=async_worker, wake_on_completion=True),
        Profile("leaf", runner=leaf),
    ]


def _wait(turn: Turn, child: str) -> Completion | None:
    """Wait for the child's completion; None if the wait ran out of time."""
    try:
        event = turn.wait(child, timeout=0.5)
    except WaitTimeout:
        return None
    return event if isinstance(event, Completion) else None


def _forget(pool: list[str], agent_id: str, ledger: Ledger) -> None:
    with ledger.lock:
        if agent_id in pool:
            pool.remove(agent_id)


def _drain(rt: Runtime, agent_id: str, ledger: Ledger) -> None:
    while True:
        try:
            ledger.got(rt.wait(agent_id, timeout=0))
        except (WaitTimeout, AgentClosed):
            return
        except RetinueError as exc:
            if type(exc).__name__ != "NothingToWaitFor":
                ledger.problem(f"drain of {agent_id}: {type(exc).__name__}: {exc}")
            return


def _calm(agent_id: str) -> bool:
    """Half the agents are not interrupted by the host and seldom closed: their waits end.

    (With every agent interrupted or closed dozens of times a second, nearly
    every turn ended before its child returned: turns hardly ever received a
    completion, and the turn side of the ledger went untested.)
    """
    return int(agent_id[-1], 16) % 2 == 0


def _host_op(rt: Runtime, rng: random.Random, pool: list[str], ledger: Ledger) -> None:
    op = rng.choice(["wait", "wait", "wait", "follow", "follow", "interrupt", "send", "spawn"])
    agent_id = rng.choice(pool) if pool else None
    if agent_id is None or op == "spawn":
        if agent_id is not None and len(pool) >= POOL:
            if not _calm(agent_id) or rng.random() < 0.05:
                ledger.op("close_tree")
                _forget(pool, agent_id, ledger)
                rt.close_tree(agent_id)
                return
            op = "wait"  # a calm agent lives on
        else:
            info = rt.spawn(rng.choice(["w", "aw"]), rng.choice(TASKS))
            with ledger.lock:
                ledger.top.add(info.id)
                pool.append(info.id)
            ledger.op("spawn")
            return
    if op == "interrupt" and _calm(agent_id):
        op = "wait"
    ledger.op(op)
    if op == "wait":
        ledger.got(rt.wait(agent_id, timeout=rng.choice([0, 0.001, 0.05])))
    elif op == "follow":
        rt.follow_up(agent_id, rng.choice(TASKS))
    elif op == "interrupt":
        rt.interrupt(agent_id)
    else:
        rt.send(agent_id, "hi")


async def _task_op(rt: Runtime, rng: random.Random, pool: list[str], ledger: Ledger) -> None:
    if not pool:
        await asyncio.sleep(0.001)
        return
    agent_id = rng.choice(pool)
    op = rng.choice(["wait", "cancel", "cancel", "follow", "interrupt", "close"])
    ledger.op(f"async_{op}")
    if op == "wait":
        ledger.got(await rt.wait_async(agent_id, timeout=rng.choice([0, 0.01])))
    elif op == "cancel":
        task = asyncio.ensure_future(rt.wait_async(agent_id, timeout=1))
        for _ in range(rng.randrange(8)):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            ledger.got(await task)
    elif op == "follow":
        await rt.follow_up_async(agent_id, rng.choice(TASKS))
    elif op == "interrupt" and not _calm(agent_id):
        await rt.interrupt_async(agent_id)
    elif rng.random() < (0.0025 if _calm(agent_id) else 0.05):
        _forget(pool, agent_id, ledger)
        await rt.close_tree_async(agent_id)


def _chaos(
    rt: Runtime,
    seconds: float,
    threads: int,
    tasks: int,
    seed: int,
    pool: list[str],
    ledger: Ledger,
) -> None:
    stop = time.monotonic() + seconds

    def host(n: int) -> None:
        rng = random.Random(seed * 1_000 + n)
        while time.monotonic() < stop:
            try:
                _host_op(rt, rng, pool, ledger)
            except RetinueError:
                pass
            except Exception as exc:
                ledger.problem(f"host thread: {type(exc).__name__}: {exc}")

    async def one(n: int) -> None:
        rng = random.Random(seed * 1_000_000 + n)
        while time.monotonic() < stop:
            try:
                await _task_op(rt, rng, pool, ledger)
            except RetinueError:
                pass
            except Exception as exc:
                ledger.problem(f"async task: {type(exc).__name__}: {exc}")

    async def loop_main() -> None:
        await asyncio.gather(*(one(n) for n in range(tasks)))

    workers = [threading.Thread(target=host, args=(n,)) for n in range(threads)]
    workers.append(threading.Thread(target=asyncio.run, args=(loop_main(),)))
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def _end(rt: Runtime, how: str, path: Path, ledger: Ledger, holder: list[Runtime]) -> None:
    """Close the runtime ``how``; then the store must be free at once."""
    if how == "two_threads":
        closers = [threading.Thread(target=rt.shutdown) for _ in range(2)]
        for c in closers:
            c.start()
        closers[1].join()  # the second to return: the store must be free already
        _probe(path, ledger, how)
        closers[0].join()
        return
    if how in ("runner", "async_runner"):
        holder[0] = rt
        rt.spawn("w" if how == "runner" else "aw", "shutdown")
        deadline = time.monotonic() + 10
        while not rt.closed and time.monotonic() < deadline:
            time.sleep(0.001)
        rt.shutdown()
    elif how == "loop":

        async def close_on_loop() -> None:
            rt.shutdown()

        asyncio.run(close_on_loop())
    else:
        rt.shutdown()
    _probe(path, ledger, how)


def _probe(path: Path, ledger: Ledger, how: str) -> None:
    from retinue.persistence.lock import WriterLock

    try:
        WriterLock(path).release()
    except StoreLocked as exc:
        ledger.problem(f"close ({how}) returned before the store was released: {exc}")


def _when_free(what: Any, ledger: Ledger, label: str) -> Any:
    """Run ``what()``; if the store is still held (a close returned early), record it and retry."""
    for _ in range(200):
        try:
            return what()
        except (StoreLocked, StoreError) as exc:
            ledger.problem(f"{label}: the store was not released: {exc}")
            time.sleep(0.05)
    return what()


def _undrained(ledger: Ledger, path: Path | None) -> list[str]:
    """Return the top-level agents with a completion the host has not received (store view)."""
    if path is None:
        return []
    _, completions, _ = read_store(path)
    with ledger.lock:
        got = set(ledger.host)
        top = set(ledger.top)
    return sorted(
        {a for (a, _), r in completions.items() if a in top and r.completion.id not in got}
    )


def _check_store(path: Path, ledger: Ledger, final: bool) -> dict[str, int]:
    """Compare the closed store with the ledger; return counts."""
    agents, completions, _ = _when_free(lambda: read_store(path), ledger, "store check")
    lost = duplicates = parked = 0
    with ledger.lock:
        host, turns = Counter(ledger.host), Counter(ledger.turns)
    twice = [c for c, n in host.items() if n > 1] + [c for c, n in turns.items() if n > 1]
    duplicates += len(twice)
    for cid in twice[:10]:
        ledger.problem(f"{cid} was received {max(host[cid], turns[cid])} times")
    for cid in host:
        agent_id, _, gen = cid.rpartition(":")
        if (agent_id, int(gen)) not in completions:
            ledger.problem(f"the host received {cid}, which the store does not have")
    for (agent_id, _gen), record in completions.items():
        cid = record.completion.id
        if agent_id in ledger.top:
            if final and host[cid] != 1:
                lost += host[cid] == 0
                if host[cid] == 0:
                    ledger.problem(f"{cid} was never received by the host")
        elif record.recipient_id is not None:
            if record.delivered != (turns[cid] >= 1):
                ledger.problem(
                    f"{cid} delivered={record.delivered} to {record.recipient_id}, "
                    f"turns received it {turns[cid]} times"
                )
                lost += record.delivered and turns[cid] == 0
        elif not record.delivered:
            parked += 1  # a closed parent's child: pending for the host
    generations: dict[str, list[int]] = {}
    for agent_id, gen in completions:
        generations.setdefault(agent_id, []).append(gen)
    for agent_id, record in agents.items():
        have = sorted(generations.get(agent_id, []))
        if have != list(range(1, record.generation + 1)):
            ledger.problem(f"{agent_id}: completions {have} for generation {record.generation}")
    return {"lost": lost, "duplicates": duplicates, "pending_for_host": parked}


def run(seconds: float, seed: int = 1, *, threads: int = 50, tasks: int = 500) -> dict[str, Any]:
    """Soak for about ``seconds``; return a row (ops, ops/s, lost, duplicates, problems)."""
    ledger = Ledger()
    holder: list[Runtime] = []
    profiles = _runners(ledger, holder)
    rounds = max(len(ENDINGS) if seconds >= 60 else 2, int(seconds // 20))
    per_round = seconds / rounds
    t0 = time.perf_counter()
    counts: dict[str, int] = {}
    closes: list[float] = []
    with tempfile.TemporaryDirectory(prefix="retinue-soak-") as tmp:
        path = Path(tmp) / "store"
        pool: list[str] = []
        for n in range(rounds + 1):
            todo = _undrained(ledger, path if n else None)
            rt = _when_free(
                lambda: Runtime.open(path, profiles=profiles, limits=LIMITS), ledger, "reopen"
            )
            holder[:] = [rt]
            for agent_id in todo:  # what was still pending at the close
                _drain(rt, agent_id, ledger)
            if n == rounds:  # the final drain: interrupt what runs, receive everything
                for info in rt.agents():
                    if info.id in ledger.top and info.state in BUSY:
                        with contextlib.suppress(RetinueError):
                            rt.interrupt(info.id)
                with ledger.lock:
                    got = set(ledger.host)
                for info in rt.agents(include_closed=True):
                    ids = (f"{info.id}:{g}" for g in range(1, info.generation + 1))
                    if info.id in ledger.top and any(i not in got for i in ids):
                        _drain(rt, info.id, ledger)
                rt.shutdown()
                counts = _check_store(path, ledger, final=True)
                break
            pool[:] = [a for a in pool if rt.get(a).state is not AgentState.CLOSED]
            _chaos(rt, per_round, threads, tasks, seed + n, pool, ledger)
            t_close = time.perf_counter()
            _end(rt, ENDINGS[(seed + n) % len(ENDINGS)], path, ledger, holder)
            closes.append(time.perf_counter() - t_close)
            _check_store(path, ledger, final=False)
    elapsed = time.perf_counter() - t0
    total = sum(ledger.ops.values())
    return {
        "threads": threads,
        "async_tasks": tasks,
        "rounds": rounds,
        "ops": total,
        "ops_per_s": round(total / elapsed),
        "host_receipts": sum(ledger.host.values()),
        "turn_receipts": sum(ledger.turns.values()),
        "completions_checked": len(ledger.host) + len(ledger.turns),
        "lost": counts.get("lost", 0),
        "duplicates": counts.get("duplicates", 0),
        "pending_for_host": counts.get("pending_for_host", 0),
        "slowest_close_s": round(max(closes, default=0.0), 2),
        "problems": ledger.problems[:50],
        "seconds": round(elapsed, 1),
    }


def _part(options: Options) -> Result:
    """50 host threads and 500 asyncio tasks race; every completion received once."""
    seconds = options.soak_seconds or (10.0 if options.quick else 300.0)
    row = run(seconds, options.seed)
    problems = list(row.pop("problems"))
    if row["lost"] or row["duplicates"]:
        problems.append(f"{row['lost']} completions lost, {row['duplicates']} received twice")
    title = "races soak: 50 host threads + 500 asyncio tasks, every completion once"
    return Result.row(title, row, problems)


PART = Part("soak_races", _part, check=True)
