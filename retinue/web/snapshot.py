"""One picture of the store for the web view, indexed for paging, and what changed since the last.

A :class:`Snapshot` is built from one ``rt.agents(include_closed=True)``
read. It knows every agent's parent (by id: a path can be reused once its
holder is closed, so a child belongs to the holder of its parent path that was
created last before it), the children of each agent in creation order, and
one row per agent (:func:`~retinue.web.rows.row_of`). Building the next
snapshot reuses every row whose agent, children counts and tool did not
change, so :func:`changes` finds what changed by identity.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from retinue.protocol.messages import AgentInfo
from retinue.web.rows import Row, row_of

__all__ = ["ATTENTION", "ROOT", "Changes", "Snapshot", "build", "changes"]

ROOT = ""
"""The parent id of top-level agents (the host, ``/root``)."""


@dataclass
class Snapshot:
    """Every agent of one read, with its row, parent and children (ids, oldest first)."""

    version: int
    at: float
    infos: dict[str, AgentInfo] = field(default_factory=dict)
    rows: dict[str, Row] = field(default_factory=dict)
    parent: dict[str, str] = field(default_factory=dict)
    kids: dict[str, list[str]] = field(default_factory=dict)
    states: Counter[str] = field(default_factory=Counter)
    tokens: int = 0
    cost_usd: float = 0.0

    def children(
        self, parent: str, *, closed: bool, offset: int, limit: int
    ) -> tuple[list[Row], int]:
        """Return one page of ``parent``'s children (``ROOT`` for top level) and their count.

        Closed children are left out unless ``closed``.
        """
        ids = self.kids.get(parent, [])
        if not closed:
            ids = [i for i in ids if self.infos[i].state != "closed"]
        return [self.rows[i] for i in ids[offset : offset + limit]], len(ids)

    def subtree(self, top: str, limit: int) -> list[str]:
        """Return up to ``limit`` ids of ``top``'s subtree in tree order (``top`` first)."""
        out: list[str] = []
        stack = [top]
        while stack and len(out) < limit:
            agent = stack.pop()
            out.append(agent)
            stack.extend(reversed(self.kids.get(agent, [])))
        return out

    def top_of(self, agent: str) -> str:
        """Return the top-level agent above (or at) ``agent``."""
        while self.parent.get(agent, ROOT) != ROOT:
            agent = self.parent[agent]
        return agent

    def ancestors(self, agent: str) -> list[str]:
        """Return the ids from the top-level agent down to ``agent``'s parent."""
        chain: list[str] = []
        while (up := self.parent.get(agent, ROOT)) != ROOT:
            chain.append(up)
            agent = up
        return chain[::-1]

    def search(self, text: str, limit: int, state: str | None = None) -> tuple[list[Row], int]:
        """Return up to ``limit`` rows whose path or profile contains ``text`` (any case; blank:
        every agent) and, with ``state``, whose state it is; live first, then by path; and
        their count."""
        needle = text.lower()
        hits = [
            i
            for i, info in self.infos.items()
            if (state is None or info.state == state)
            and (needle in info.path.lower() or needle in info.profile.lower())
        ]
        hits.sort(key=lambda i: (self.infos[i].state == "closed", self.infos[i].path))
        return [self.rows[i] for i in hits[:limit]], len(hits)

    def shown(self, *, closed: bool) -> int:
        """Return how many agents the tree shows (closed ones only with ``closed``)."""
        return len(self.infos) - (0 if closed else self.states.get("closed", 0))

    def tree(self, *, closed: bool, limit: int) -> list[Row] | None:
        """Return every row the tree shows in tree order (each parent before its children,
        oldest first), or None when there are more than ``limit``."""
        if self.shown(closed=closed) > limit:
            return None
        out: list[Row] = []
        stack = list(reversed(self.kids.get(ROOT, [])))
        while stack:
            agent = stack.pop()
            if not closed and self.infos[agent].state == "closed":
                continue
            out.append(self.rows[agent])
            stack.extend(reversed(self.kids.get(agent, [])))
        return out

    def summary(self) -> dict[str, object]:
        """Return the counts the page's header shows."""
        return {
            "version": self.version,
            "at": self.at,
            "agents": len(self.infos),
            "states": dict(self.states),
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
        }


def _parents(agents: Sequence[AgentInfo]) -> dict[str, str]:
    """Map every agent id to its parent's id (``ROOT`` at top level or when unknown)."""
    holders: dict[str, tuple[list[float], list[str]]] = {}
    for info in sorted(agents, key=lambda a: a.created_at):
        times, ids = holders.setdefault(info.path, ([], []))
        times.append(info.created_at)
        ids.append(info.id)
    parent: dict[str, str] = {}
    for info in agents:
        held = holders.get(info.parent_path)
        if info.depth <= 1 or held is None:
            parent[info.id] = ROOT
            continue
        times, ids = held
        at = bisect.bisect_right(times, info.created_at) - 1
        parent[info.id] = ids[at] if at >= 0 else ROOT
    return parent


ATTENTION = ("failed", "awaiting_approval")
"""States a parent is marked for when an agent under it is in one (``failed_below``,
``waiting_below``)."""


def _below(agents: Sequence[AgentInfo], parent: Mapping[str, str]) -> dict[str, tuple[int, int]]:
    """Map each agent with a failed or waiting agent under it to how many of each."""
    counts: dict[str, tuple[int, int]] = {}
    for info in agents:
        if info.state not in ATTENTION:
            continue
        failed = info.state == "failed"
        up = parent.get(info.id, ROOT)
        seen: set[str] = set()
        while up != ROOT and up not in seen:
            seen.add(up)
            was = counts.get(up, (0, 0))
            counts[up] = (was[0] + 1, was[1]) if failed else (was[0], was[1] + 1)
            up = parent.get(up, ROOT)
    return counts


def build(
    agents: Sequence[AgentInfo],
    version: int,
    at: float,
    tools: Mapping[str, str],
    previous: Snapshot | None = None,
) -> Snapshot:
    """Index one read of the store; reuse ``previous``'s rows that did not change.

    ``tools`` maps agent ids to the tool call they have in progress.
    """
    snap = Snapshot(version=version, at=at)
    snap.infos = {a.id: a for a in agents}
    snap.parent = _parents(agents)
    order = sorted(agents, key=lambda a: a.created_at)
    live: Counter[str] = Counter()
    for info in order:
        up = snap.parent[info.id]
        snap.kids.setdefault(up, []).append(info.id)
        if info.state != "closed":
            live[up] += 1
        snap.states[str(info.state)] += 1
        if info.tree_usage is not None:
            snap.tokens += info.tree_usage.prompt_tokens + info.tree_usage.completion_tokens
            snap.cost_usd += info.tree_usage.cost_usd
    old_rows = previous.rows if previous is not None else {}
    old_infos = previous.infos if previous is not None else {}
    marks = _below(agents, snap.parent)
    for info in order:
        kid_ids = snap.kids.get(info.id, ())
        up, kids, tool = snap.parent[info.id], live[info.id], tools.get(info.id)
        below = marks.get(info.id, (0, 0))
        old = old_rows.get(info.id)
        if (
            old is not None
            and old_infos.get(info.id) == info
            and old["parent"] == up
            and old["kids"] == kids
            and old["kids_all"] == len(kid_ids)
            and old["tool"] == tool
            and (old["failed_below"], old["waiting_below"]) == below
        ):
            snap.rows[info.id] = old
        else:
            snap.rows[info.id] = row_of(info, up, kids, len(kid_ids), tool, below)
    return snap


@dataclass(frozen=True)
class Changes:
    """The rows that changed from one snapshot to the next, and the ids that went."""

    version: int
    changed: tuple[str, ...]
    removed: tuple[str, ...]


def changes(before: Snapshot | None, after: Snapshot) -> Changes:
    """Return what changed from ``before`` (None: everything is new) to ``after``."""
    if before is None:
        return Changes(after.version, tuple(after.rows), ())
    old = before.rows
    changed = tuple(i for i, row in after.rows.items() if old.get(i) is not row)
    removed = tuple(i for i in old if i not in after.rows)
    return Changes(after.version, changed, removed)
