"""Filling the tree's agent and completion indexes from a restore, in one pass each.

An open restores every agent and every undelivered completion: put one at a time
(:meth:`~retinue.actors.tree.Tree.put_agent`, ``add_completion``), each goes
through the journaled containers' bookkeeping and a handful of lookups, and
that is most of an open's time past 100,000 agents. Here the indexes are
built in plain dicts and sets first (an open's agent indexes by restore's
walk as it places the agents, :class:`~retinue.persistence.placed.Placed`),
then handed to the tree's journaled containers in one step each, with the
same content the one-at-a-time path gives
(``tests/persistence/test_open_loading.py`` compares the two). The journal
is idle while a tree loads (no command is served before the open ends), so
nothing is journaled either way.

:class:`BulkLoad` is a part of :class:`~retinue.actors.tree.Tree` (the tree
is made of it), never used alone: only the tree's methods edit its indexes.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator

from retinue.actors.tree._completions import StoredShare
from retinue.actors.tree._journal import JDict, Journal, JSet
from retinue.actors.tree._keys import HOST_KEY, recipient_key, spawn_key
from retinue.persistence.placed import BUSY_STATES, Placed
from retinue.protocol.records import AgentRecord, CompletionRecord

__all__ = ["BUSY_STATES", "BulkLoad", "collector_paused"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the block (as it was after).

    A restore allocates a few containers per agent and frees almost none: the
    collector's passes over them, each longer as the tree grows, find nothing
    to free. Reference counting still frees what the block drops.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class BulkLoad:
    """One-pass fills of an empty tree's agent and completion indexes."""

    _journal: Journal
    agents: dict[str, AgentRecord]
    state_counts: dict[str, int]
    live_profiles: dict[str, int]
    live_paths: dict[str, str]
    children: dict[str, set[str]]
    top_of: dict[str, str]
    busy: dict[str, None]
    closed: dict[str, float]
    stored_children: dict[str, int]
    tree_count: dict[str, int]
    spawn_keys: dict[tuple[str, str], str]
    live_count: int
    pending: dict[str, dict[str, CompletionRecord]]
    completions: dict[str, dict[int, CompletionRecord]]
    shares: StoredShare
    undelivered: dict[str, int]

    def _load_agents(self, agents: Iterable[AgentRecord], placed: Placed | None = None) -> None:
        """Index restored agents (parents before children, each id once) into an empty tree.

        The same indexes :meth:`Tree.put_agent` keeps: counts by state and
        live profile, live paths, live children, the top of each agent's tree,
        live agents per tree, busy agents, closed agents, stored children and
        spawn keys. ``placed``: the same agents as restore's walk indexed them
        (an open's), taken as they are; without it they are indexed here.
        """
        if placed is None:
            placed = Placed.of(list(agents))
        journal = self._journal
        dict.update(self.agents, placed.agents)
        dict.update(self.state_counts, {s.value: n for s, n in placed.states.items()})
        dict.update(self.live_profiles, placed.live_profiles)
        dict.update(self.live_paths, placed.live_paths)
        dict.update(self.top_of, placed.top_of)
        dict.update(self.busy, placed.busy)
        dict.update(self.closed, placed.closed)
        dict.update(self.stored_children, placed.stored_children)
        dict.update(self.tree_count, placed.live_per_tree)
        keys = placed.spawn_keys
        dict.update(self.spawn_keys, {spawn_key(*key): agent_id for key, agent_id in keys.items()})
        kids = placed.live_kids
        set.update(self.children[HOST_KEY], kids.get(None, ()))
        dict.update(
            self.children,
            {key: JSet(journal, ids) for key, ids in kids.items() if key is not None},
        )
        self.live_count += len(placed.live_paths)

    def _load_completions(
        self, completions: Iterable[CompletionRecord], *, partial: bool = False
    ) -> None:
        """Index restored completions (in arrival order) into a tree with none yet.

        As ``add_completion`` without a write: every completion by agent and
        generation, the undelivered ones queued for their recipient.
        ``partial``: the store holds more (the delivered ones), so each agent's
        are marked partial (read from the store when asked for).
        """
        journal = self._journal
        known: dict[str, JDict[int, CompletionRecord]] = {}
        queues: dict[str, dict[str, CompletionRecord]] = {}
        undelivered: dict[str, int] = {}
        put = dict.__setitem__  # unjournaled: the journal is idle while a tree loads
        for record in completions:
            completion = record.completion
            agent_id = completion.agent_id
            mine = known.get(agent_id)
            if mine is None:  # made here, not copied from a plain dict after
                mine = known[agent_id] = JDict(journal, ordered=True)
            put(mine, completion.generation, record)
            if not record.delivered:
                queue = queues.setdefault(recipient_key(record.recipient_id), {})
                queue[completion.id] = record
                undelivered[agent_id] = undelivered.get(agent_id, 0) + 1
        dict.update(self.completions, known)
        dict.update(self.pending[HOST_KEY], queues.pop(HOST_KEY, {}))
        dict.update(
            self.pending,
            {key: JDict(journal, queue, ordered=True) for key, queue in queues.items()},
        )
        dict.update(self.undelivered, undelivered)
        if partial:
            set.update(self.shares.partial, known)
