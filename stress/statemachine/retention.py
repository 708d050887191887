"""Retention under crashes, as a state machine: agents closed and removed by one command.

Each example opens a runtime with a small ``Limits.retain_closed_agents``
(drawn: 1, 3 or 8), so a close that takes the closed agents past the count by
its slack removes them in the same command (:mod:`retinue.actors.tree._compaction`),
the removal's deletes spread over small transactions after the command's
commit. A ``lead`` runs ``run_many`` over its ``leaf`` children (up to 46);
the host spawns leads at the top (and receives their completions) or under a
top-level ``boss`` (their completions wait on it). Rules:

- ``spawn`` and ``spawn_boss``;
- ``removing_close``, **the cut**: a top lead of 40-46 leaves (past any count
  drawn by its slack once closed), its tree closed, and a crash placed before
  its first, second, ... spread delete transaction
  (:class:`~stress.statemachine.retention_cut.Cut`, on the store's writer);
- its cousins: ``close_tree`` and ``close`` (a lead, a boss or a leaf; refused
  with live children) and ``compact``, each with or without a cut;
- ``crash``: a consistent copy of the running store (``rt.backup``) opened;
- ``reopen``: a clean close and open.

A crash (a cut that fired, or ``crash``) opens the copy while the old runtime
is thrown away. After every step the runtime's live agents are the model's:
every agent the host saw live and did not close is live, none it closed is
(nothing acknowledged lost, no close undone), and every live agent's parent is
live. After a crash or a reopen the store, before it is opened, holds no live
agent under a closed (or missing) parent, every acknowledged live agent live
and every acknowledged close closed or removed, and breaks none of
:func:`~retinue.testing.invariants.check_invariants` (an agent a cut command
was removing may be stored with its completions already deleted: they go
before its record); the open reports no diagnostic, and no completion the host
received is handed out again. Before the fix in ``Tree.spread_since`` the cut
found what ``tests/persistence/test_close_and_remove_cut.py`` kills a child
process for: the leaves of a closed lead stored live under it until their delete.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from retinue import AgentState, Limits, Profile, Runtime, Turn
from retinue.errors import ActiveDescendants, FanoutLimitExceeded, NothingToWaitFor, WaitTimeout
from retinue.protocol.records import AgentRecord
from retinue.testing.invariants import check_invariants
from stress.statemachine.retention_cut import Cut
from stress.statemachine.storecheck import read_store
from stress.statemachine.trace import STATS, TRACE, fail, record_failures

__all__ = ["RetentionMachine"]

_T = TypeVar("_T")

SETTLE_S = 60.0
MAX_LEAVES = 46
CUTS = st.none() | st.integers(0, 3)
"""A rule's cut: none, or the spread transaction (0: the first) to crash before."""
PROFILE = st.sampled_from(["lead", "lead", "boss", "leaf"])
"""Whose close a rule draws (a lead's tree is what retention removes in one command)."""


def _lead(turn: Turn) -> str:
    leaves = int(turn.task.split()[0])
    if leaves:
        turn.run_many([("leaf", f"leaf {i}") for i in range(leaves)], timeout=SETTLE_S)
    return f"lead of {leaves}"


PROFILES = [
    Profile("boss", subagents=["lead"], runner=lambda turn: "boss", wake_on_completion=False),
    Profile("lead", subagents=["leaf"], runner=_lead, wake_on_completion=False),
    Profile("leaf", runner=lambda turn: "leaf"),
]


@dataclass
class Agent:
    """What the model knows of an agent."""

    id: str
    path: str
    profile: str
    parent: str | None  # its parent's id (None: top level)
    closed: bool = False


class RetentionMachine(RuleBasedStateMachine):
    """One runtime per example with a small retention count; closes cut by crashes."""

    def __init__(self) -> None:
        """Make the example's folder; :meth:`open_first` opens the runtime."""
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="retinue-retention-"))
        self.stores = 0
        self.store = self.dir / "store-0"
        self.agents: dict[str, Agent] = {}
        self.limits = Limits()
        self.rt: Runtime | None = None
        self.cut: Cut | None = None
        # Agents a cut command removed: a copy may hold them part-deleted (their completions
        # go before their records, :meth:`Tree.spread_since`), until a later removal.
        self.removing: set[str] = set()
        TRACE.clear()

    @initialize(keep=st.sampled_from([1, 3, 8]))
    def open_first(self, keep: int) -> None:
        """Open the first runtime, keeping ``keep`` closed agents."""
        self.limits = Limits(
            retain_closed_agents=keep,
            fanout_cap=MAX_LEAVES + 2,
            max_tree_agents=2_000,
            wait_default_s=SETTLE_S,
            compact_interval_s=3600.0,  # compactions only in commands: what the rules draw
        )
        self._open(self.store)
        TRACE.append(f"open keep={keep}")
        STATS["retention:open"] += 1

    def _open(self, store: Path) -> None:
        self.rt = Runtime.open(store, profiles=PROFILES, limits=self.limits)
        self.cut = Cut(self.rt._store)
        codes = [d.code for d in self.rt.diagnostics]
        if codes:
            fail(f"opening {store.name} reported {codes}")

    def teardown(self) -> None:
        """Close the runtime and remove the stores."""
        try:
            if self.rt is not None:
                self.rt.shutdown()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def _rt(self) -> Runtime:
        assert self.rt is not None
        return self.rt

    def _live(self) -> list[Agent]:
        return [a for a in self.agents.values() if not a.closed]

    def _pick(self, profile: str, index: int) -> Agent | None:
        """A live agent of ``profile`` (any live one if none is), or None."""
        live = self._live()
        mine = [a for a in live if a.profile == profile] or live
        return mine[index % len(mine)] if mine else None

    # -- rules -------------------------------------------------------------------------

    @rule(leaves=st.sampled_from([0, 1, 3, 20, 40]), under=st.none() | st.integers(0, 50))
    def spawn(self, leaves: int, under: int | None) -> None:
        """Spawn a lead that runs ``leaves`` leaves, at the top or under a live boss."""
        bosses = [a for a in self._live() if a.profile == "boss"]
        self._spawn(leaves, bosses[under % len(bosses)] if under is not None and bosses else None)

    def _spawn(self, leaves: int, parent: Agent | None) -> Agent | None:
        """Spawn a lead of ``leaves`` leaves under ``parent`` (None: the top), wait until it
        settled (a top lead's completion received); return it (None: refused)."""
        rt = self._rt
        try:
            info = rt.spawn("lead", f"{leaves} leaves", parent=parent.path if parent else "/root")
        except FanoutLimitExceeded:  # a boss's leads past its fan-out
            TRACE.append(f"spawn under {parent.path if parent else '/root'} -> refused")
            return None
        rt.wait_idle(SETTLE_S)
        if parent is None:
            rt.wait(info.id, timeout=SETTLE_S)  # received: nothing keeps it from removal
        self._learn()
        TRACE.append(f"spawn lead {leaves} under {parent.path if parent else '/root'}")
        STATS["retention:spawn"] += 1
        return self.agents[info.id]

    @rule()
    def spawn_boss(self) -> None:
        """Spawn a top-level boss the host spawns leads under (their completions wait on it)."""
        info = self._rt.spawn("boss", "boss")
        self._rt.wait(info.id, timeout=SETTLE_S)
        self._learn()
        TRACE.append(f"spawn boss {info.path}")
        STATS["retention:spawn_boss"] += 1

    def _learn(self) -> None:
        """Add the live agents the model does not know yet (all spawned, settled)."""
        by_path = {a.path: a.id for a in self.agents.values() if not a.closed}
        for seen in self._rt.agents():
            if seen.id not in self.agents:
                by_path[seen.path] = seen.id
                parent_id = by_path.get(seen.parent_path)
                self.agents[seen.id] = Agent(seen.id, seen.path, seen.profile, parent_id)

    @rule(leaves=st.integers(40, MAX_LEAVES), at=st.integers(0, 3))
    def removing_close(self, leaves: int, at: int) -> None:
        """The cut itself: a top lead with ``leaves`` leaves (past any small retention
        count by its slack once closed), its tree closed, and a crash before its ``at``-th
        spread delete transaction: the closed agents retention removed in that command
        must be stored closed until their deletes."""
        lead = self._spawn(leaves, None)
        assert lead is not None
        self._close_tree(lead, at)

    @rule(of=PROFILE, index=st.integers(0, 200), cut=CUTS)
    def close_tree(self, of: str, index: int, cut: int | None) -> None:
        """Close a live agent's whole subtree (retention may remove it in the same command)."""
        target = self._pick(of, index)
        if target is not None:
            self._close_tree(target, cut)

    def _close_tree(self, target: Agent, cut: int | None) -> None:
        closed, dest = self._cutting(cut, lambda: self._rt.close_tree(target.id))
        self._closed([info.id for info in closed], dest, "close_tree")

    @rule(of=PROFILE, index=st.integers(0, 200), cut=CUTS)
    def close(self, of: str, index: int, cut: int | None) -> None:
        """Close one live agent; refused while it has live children."""
        target = self._pick(of, index)
        if target is None:
            return
        busy = any(a.parent == target.id for a in self._live())
        try:
            _, dest = self._cutting(cut, lambda: self._rt.close(target.id))
        except ActiveDescendants:
            if not busy:
                fail(f"closing {target.path} was refused: it has no live children")
            STATS["retention:close_refused"] += 1
            return
        if busy:
            fail(f"closing {target.path} succeeded with live children")
        self._closed([target.id], dest, "close")

    @rule(cut=CUTS)
    def compact(self, cut: int | None) -> None:
        """Compact now: closed agents past the count go, their deletes spread."""
        report, dest = self._cutting(cut, self._rt.compact)
        TRACE.append(f"compact removed {report.agents}, cut={cut}")
        STATS["retention:compact"] += 1
        if dest is not None:
            STATS["retention:cut:compact"] += 1
            self._crash_to(dest)

    @rule()
    def crash(self) -> None:
        """Crash: open a consistent copy of the running store; the old runtime is lost."""
        dest = self._next_store()
        self._rt.backup(dest)
        self._crash_to(dest)
        TRACE.append("crash")
        STATS["retention:crash"] += 1

    @rule()
    def reopen(self) -> None:
        """Close the runtime and open its store again."""
        self._rt.shutdown()
        self.rt = None
        self._check_store(self.store)
        self._open(self.store)
        TRACE.append("reopen")
        STATS["retention:reopen"] += 1

    # -- cuts and crashes ----------------------------------------------------------------

    def _cutting(self, cut: int | None, call: Callable[[], _T]) -> tuple[_T, Path | None]:
        """Run ``call``; with ``cut``, copy the store before its ``cut``-th spread
        transaction. Returns what ``call`` returned and the copy (None: no cut fired)."""
        if cut is None:
            return call(), None
        seam = self.cut
        assert seam is not None
        dest = self._next_store()
        before = {a.id for a in self._rt.agents(include_closed=True)}
        seam.arm(cut, dest)
        try:
            result = call()
        finally:
            self._rt._store.flush()  # every spread transaction done: the cut fired or never will
            fired = seam.disarm()
        if seam.error is not None:
            fail(f"the cut's copy failed: {seam.error!r}")
        if fired:
            self.removing |= before - {a.id for a in self._rt.agents(include_closed=True)}
            TRACE.append(f"cut before spread {cut} of {seam.spread_batches}")
            STATS["retention:cuts"] += 1
        return result, dest if fired else None

    def _closed(self, ids: list[str], dest: Path | None, what: str) -> None:
        """The host's close of ``ids`` was acknowledged: count those it removed, then crash
        to the cut's copy ``dest`` if one was taken."""
        for agent_id in ids:
            self.agents[agent_id].closed = True
        stored = {a.id for a in self._rt.agents(include_closed=True)}
        removed = [i for i in ids if i not in stored]
        TRACE.append(f"{what} {len(ids)} closed, {len(removed)} removed")
        STATS[f"retention:{what}"] += 1
        STATS[f"retention:{what}_removing"] += bool(removed)
        if dest is not None:
            STATS[f"retention:cut:{what}"] += 1
            STATS[f"retention:cut:{what}_removing"] += bool(removed)
            self._crash_to(dest)

    def _next_store(self) -> Path:
        self.stores += 1
        return self.dir / f"store-{self.stores}"

    def _crash_to(self, copy: Path) -> None:
        """Open ``copy`` (checked first) in place of the running runtime, then drop that."""
        old = self._rt
        self._check_store(copy)
        self.store = copy
        self._open(copy)
        old.shutdown()  # its later work is as lost as a killed process's
        for agent in self._live():
            if agent.parent is None:  # the host received each top agent's completion
                try:
                    again = self._rt.wait(agent.id, timeout=0)
                except (NothingToWaitFor, WaitTimeout):
                    continue
                fail(f"{agent.path}: the host received {again.id} again after a crash")

    # -- invariants ------------------------------------------------------------------------

    def _check_store(self, folder: Path) -> None:
        """The store no runtime holds: no live agent under a closed or missing parent; the
        model's live agents live, its closed ones closed or removed; the invariants hold."""
        records, done, _ = read_store(folder)
        for record in records.values():
            if record.state is AgentState.CLOSED or record.parent_id is None:
                continue
            parent = records.get(record.parent_id)
            if parent is None or parent.state is AgentState.CLOSED:
                where = "a missing" if parent is None else "a closed"
                fail(f"{record.path} is stored live under {where} parent")
        for agent in self.agents.values():
            kept = records.get(agent.id)
            if not agent.closed and (kept is None or kept.state is AgentState.CLOSED):
                fail(f"{agent.path}, acknowledged live, is {kept and kept.state} in the store")
            if agent.closed and kept is not None and kept.state is not AgentState.CLOSED:
                fail(f"{agent.path}, acknowledged closed, is stored {kept.state}")
        stored_done = {agent_id for agent_id, _ in done}
        broken = [
            b
            for b in check_invariants(folder)
            if not (
                b.invariant == "completion_missing"
                and self._part_removed(b.path, records, stored_done)
            )
        ]
        if broken:
            fail(f"{folder.name} breaks {[str(b) for b in broken]}")

    def _part_removed(
        self, path: str, records: dict[str, AgentRecord], stored_done: set[str]
    ) -> bool:
        """Whether the agent at ``path`` is one a cut command was removing, stored closed
        with none of its completions (they are deleted first)."""
        return any(
            r.path == path
            and r.id in self.removing
            and r.state is AgentState.CLOSED
            and r.id not in stored_done
            for r in records.values()
        )

    @invariant()
    def live_agents_are_the_models(self) -> None:
        """The runtime's live agents are the model's; each one's parent is live."""
        if self.rt is None:
            return
        live = {a.id: a for a in self.rt.agents()}
        known = {a.id for a in self._live()}
        if set(live) != known:
            fail(f"live agents differ from the model's: {sorted(set(live) ^ known)}")
        paths = {a.path for a in live.values()}
        for info in live.values():
            if info.parent_path != "/root" and info.parent_path not in paths:
                fail(f"{info.path} is live under a closed or missing parent")


record_failures(RetentionMachine)
