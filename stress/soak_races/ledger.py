"""The races soak's ledger: every completion id received, by the host's waits and by turns.

Checked against the closed store after every round and at the end: no id
counted twice (``duplicates``), every generation of every top-level agent
received by the host (``lost``), a completion routed to an agent marked
delivered exactly when a turn received it. A turn's receipts count only if
the turn completed (its own stored completion says so): a turn that failed or
was interrupted, or that a close cut short, hands what it received to the
agent's next turn (the input rule), which receives it again.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from retinue import Runtime
from retinue.errors import AgentClosed, RetinueError, StoreError, StoreLocked, WaitTimeout
from retinue.protocol.messages import Completion
from retinue.protocol.records import AgentRecord, CompletionRecord
from stress.statemachine.storecheck import read_store

__all__ = ["Ledger", "check_store", "drain", "undrained", "when_free"]

T = TypeVar("T")


class Ledger:
    """Counts of every completion id received, by the host's waits and by turns."""

    def __init__(self) -> None:
        """Start empty."""
        self.lock = threading.Lock()
        self.host: Counter[str] = Counter()
        self.taken: list[tuple[str, str]] = []  # (receiving turn's completion id, received id)
        self.ops: Counter[str] = Counter()
        self.problems: list[str] = []
        self.top: set[str] = set()

    def got(self, done: Completion) -> None:
        """Count one host receipt."""
        with self.lock:
            self.host[done.id] += 1

    def took(self, agent_id: str, generation: int, ids: Iterable[str]) -> None:
        """Note completions a turn (generation ``generation`` of ``agent_id``) received."""
        with self.lock:
            self.taken.extend((f"{agent_id}:{generation}", i) for i in ids)

    def turns(self, completions: dict[tuple[str, int], CompletionRecord]) -> Counter[str]:
        """Count, per completion id, its receipts by turns that completed (per the store)."""
        done = {r.completion.id for r in completions.values() if r.completion.status == "completed"}
        with self.lock:
            return Counter(i for turn, i in self.taken if turn in done)

    def op(self, name: str) -> None:
        """Count one call."""
        with self.lock:
            self.ops[name] += 1

    def problem(self, text: str) -> None:
        """Record something that must never happen."""
        with self.lock:
            self.problems.append(text)


def drain(rt: Runtime, agent_id: str, ledger: Ledger) -> None:
    """Receive (and count) every completion of ``agent_id`` the host has not received."""
    while True:
        try:
            ledger.got(rt.wait(agent_id, timeout=0))
        except (WaitTimeout, AgentClosed):
            return
        except RetinueError as exc:
            if type(exc).__name__ != "NothingToWaitFor":
                ledger.problem(f"drain of {agent_id}: {type(exc).__name__}: {exc}")
            return


def undrained(ledger: Ledger, path: Path | None) -> list[str]:
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


def check_store(path: Path, ledger: Ledger, final: bool) -> dict[str, int]:
    """Compare the closed store with the ledger; return counts."""
    agents, completions, _ = when_free(lambda: read_store(path), ledger, "store check")
    turns = ledger.turns(completions)
    with ledger.lock:
        host = Counter(ledger.host)
    twice = [c for c, n in host.items() if n > 1] + [c for c, n in turns.items() if n > 1]
    for cid in twice[:10]:
        ledger.problem(f"{cid} was received {max(host[cid], turns[cid])} times")
    for cid in host:
        agent_id, _, gen = cid.rpartition(":")
        if (agent_id, int(gen)) not in completions:
            ledger.problem(f"the host received {cid}, which the store does not have")
    lost, parked = _check_receipts(completions, host, turns, ledger, final)
    _check_generations(agents, completions, ledger)
    return {
        "lost": lost,
        "duplicates": len(twice),
        "pending_for_host": parked,
        "turn_receipts": sum(turns.values()),
    }


def _check_receipts(
    completions: dict[tuple[str, int], CompletionRecord],
    host: Counter[str],
    turns: Counter[str],
    ledger: Ledger,
    final: bool,
) -> tuple[int, int]:
    """Check each stored completion was received by its recipient; return (lost, parked)."""
    lost = parked = 0
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
    return lost, parked


def _check_generations(
    agents: dict[str, AgentRecord],
    completions: dict[tuple[str, int], CompletionRecord],
    ledger: Ledger,
) -> None:
    """Every agent has exactly one completion per generation."""
    generations: dict[str, list[int]] = {}
    for agent_id, gen in completions:
        generations.setdefault(agent_id, []).append(gen)
    for agent_id, record in agents.items():
        have = sorted(generations.get(agent_id, []))
        if have != list(range(1, record.generation + 1)):
            ledger.problem(f"{agent_id}: completions {have} for generation {record.generation}")


def when_free(what: Callable[[], T], ledger: Ledger, label: str) -> T:
    """Run ``what()``; if the store is still held (a close returned early), record it and retry."""
    for _ in range(200):
        try:
            return what()
        except (StoreLocked, StoreError) as exc:
            ledger.problem(f"{label}: the store was not released: {exc}")
            time.sleep(0.05)
    return what()
