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

import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

from retinue import Limits, Runtime
from retinue.errors import RetinueError
from retinue.protocol.messages import AgentState
from stress.parts import Options, Part, Result
from stress.soak_races.endings import ENDINGS, end
from stress.soak_races.ledger import Ledger, check_store, drain, undrained, when_free
from stress.soak_races.workload import chaos, profiles

__all__ = ["LIMITS", "PART", "run"]

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


def run(seconds: float, seed: int = 1, *, threads: int = 50, tasks: int = 500) -> dict[str, Any]:
    """Soak for about ``seconds``; return a row (ops, ops/s, lost, duplicates, problems)."""
    ledger = Ledger()
    holder: list[Runtime] = []
    team = profiles(ledger, holder)
    rounds = max(len(ENDINGS) if seconds >= 60 else 2, int(seconds // 20))
    per_round = seconds / rounds
    t0 = time.perf_counter()
    counts: dict[str, int] = {}
    closes: list[float] = []
    with tempfile.TemporaryDirectory(prefix="retinue-soak-") as tmp:
        path = Path(tmp) / "store"
        pool: list[str] = []
        for n in range(rounds + 1):
            todo = undrained(ledger, path if n else None)
            rt = when_free(
                lambda: Runtime.open(path, profiles=team, limits=LIMITS), ledger, "reopen"
            )
            holder[:] = [rt]
            for agent_id in todo:  # what was still pending at the close
                drain(rt, agent_id, ledger)
            if n == rounds:  # the final drain: interrupt what runs, receive everything
                _final_drain(rt, ledger)
                rt.shutdown()
                counts = check_store(path, ledger, final=True)
                break
            pool[:] = [a for a in pool if rt.get(a).state is not AgentState.CLOSED]
            chaos(rt, per_round, threads, tasks, seed + n, pool, ledger)
            t_close = time.perf_counter()
            end(rt, ENDINGS[(seed + n) % len(ENDINGS)], path, ledger, holder)
            closes.append(time.perf_counter() - t_close)
            check_store(path, ledger, final=False)
    elapsed = time.perf_counter() - t0
    total = sum(ledger.ops.values())
    return {
        "threads": threads,
        "async_tasks": tasks,
        "rounds": rounds,
        "ops": total,
        "ops_per_s": round(total / elapsed),
        "host_receipts": sum(ledger.host.values()),
        "turn_receipts": counts.get("turn_receipts", 0),
        "completions_checked": len(ledger.host) + len({i for _, i in ledger.taken}),
        "lost": counts.get("lost", 0),
        "duplicates": counts.get("duplicates", 0),
        "pending_for_host": counts.get("pending_for_host", 0),
        "slowest_close_s": round(max(closes, default=0.0), 2),
        "problems": ledger.problems[:50],
        "seconds": round(elapsed, 1),
    }


def _final_drain(rt: Runtime, ledger: Ledger) -> None:
    """Interrupt every busy top-level agent, then receive every completion the host has not."""
    for info in rt.agents():
        if info.id in ledger.top and info.state.has_turn:
            with contextlib.suppress(RetinueError):
                rt.interrupt(info.id)
    with ledger.lock:
        got = set(ledger.host)
    for info in rt.agents(include_closed=True):
        ids = (f"{info.id}:{g}" for g in range(1, info.generation + 1))
        if info.id in ledger.top and any(i not in got for i in ids):
            drain(rt, info.id, ledger)


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
