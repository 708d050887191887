"""Acknowledged versus stored: the parent's check of the store after each kill and at the end.

With no writer on the store (the life was killed or stopped), the ledgers of
every life so far (:func:`~stress.service_soak.ledger.read_trees`) are
compared with the store, read through the public API (a read-only
``Runtime`` and :func:`retinue.testing.check_invariants`):

- every acknowledged spawn is in the store, unless its tree's close was
  acknowledged too (retention then compacts it away in time);
- every acknowledged close is stored (the agent closed, or compacted away);
- no completion was handed to the host twice (a completion id in the ledgers
  twice), and every one the host received is marked received in the store;
- no duplicate spawn: one top-level agent per tree key (the key is the spawn's
  idempotency key and is in its task), and a spawn repeated after a kill
  returned the agent the first one made;
- the store's own invariants hold (each run of each agent covered by exactly
  one completion, transcripts a provider accepts, ...).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from retinue import AgentInfo, AgentState, Completion, CompletionStatus, Runtime
from retinue.testing import check_invariants
from stress.service_soak.ledger import TreeState, read_trees

__all__ = ["Verdict", "check"]


@dataclass
class Verdict:
    """What one check found: the counts compared, and the problems."""

    acknowledged_spawns: int = 0
    acknowledged_receipts: int = 0
    acknowledged_closes: int = 0
    repeated_spawns: int = 0
    recovered_trees: int = 0
    agents_stored: int = 0
    lost: int = 0
    received_twice: int = 0
    duplicate_spawns: int = 0
    broken_invariants: int = 0
    failed_completions: int = 0
    problems: list[str] = field(default_factory=list)


def _key_of(task: str) -> str | None:
    """The tree key in a lead's task (``tree <key>: ...``), None for another task."""
    if not task.startswith("tree ") or ":" not in task:
        return None
    return task[5:].split(":", 1)[0]


def _receipts(trees: dict[str, TreeState]) -> list[Completion]:
    return [
        Completion(
            id=cid,
            agent_id=tree.agent_id or "",
            path="",
            generation=gen,
            status=CompletionStatus(status),
        )
        for tree in trees.values()
        for cid, gen, status in zip(tree.cids, tree.generations, tree.statuses, strict=True)
    ]


def check(store: Path, folder: Path) -> Verdict:
    """Compare the ledgers in ``folder`` with the closed store ``store``; return the verdict."""
    trees = read_trees(folder)
    verdict = Verdict()
    problems = verdict.problems
    receipts = _receipts(trees)
    for broken in check_invariants(store, host_received=receipts, ledger_complete=False):
        problems.append(f"store invariant: {broken}")
        verdict.broken_invariants += 1
    rt = Runtime.open(store, readonly=True)
    try:
        agents = {a.id: a for a in rt.agents(include_closed=True)}
    finally:
        rt.shutdown()
    verdict.agents_stored = len(agents)
    for tree in trees.values():
        _check_tree(tree, agents, verdict)
    counted = Counter(c.id for c in receipts)
    twice = sorted(cid for cid, n in counted.items() if n > 1)
    verdict.received_twice = len(twice)
    problems += [f"completion {cid} was handed to the host {counted[cid]} times" for cid in twice]
    leads = Counter(
        key
        for a in agents.values()
        if a.parent_path == "/root" and (key := _key_of(a.task)) is not None
    )
    doubled = sorted(key for key, n in leads.items() if n > 1)
    verdict.duplicate_spawns += len(doubled)
    problems += [f"tree {key} was spawned {leads[key]} times" for key in doubled]
    verdict.acknowledged_receipts = len(receipts)
    return verdict


def _check_tree(tree: TreeState, agents: dict[str, AgentInfo], verdict: Verdict) -> None:
    """Check one tree's acknowledgements against the agents stored."""
    problems = verdict.problems
    if tree.agent_id is None:
        return
    verdict.acknowledged_spawns += 1
    verdict.repeated_spawns += tree.repeated
    verdict.acknowledged_closes += tree.closed and not tree.gone
    verdict.recovered_trees += tree.recovered
    verdict.failed_completions += sum(1 for s in tree.statuses if s == "failed")
    if tree.failed_unkilled:
        problems.append(f"tree {tree.key}: its lead failed with no kill in its way")
    stored = agents.get(tree.agent_id)
    if tree.gone:
        verdict.lost += 1
        problems.append(f"tree {tree.key}: its lead {tree.agent_id} vanished while it was open")
    elif stored is None and not tree.closed:
        verdict.lost += 1
        problems.append(f"tree {tree.key}: acknowledged spawn {tree.agent_id} is not stored")
    elif stored is not None and tree.closed and stored.state is not AgentState.CLOSED:
        verdict.lost += 1
        problems.append(f"tree {tree.key}: acknowledged close of {tree.agent_id} is not stored")
    if len(set(tree.generations)) != len(tree.generations):
        problems.append(f"tree {tree.key}: a run's completion was received twice")
