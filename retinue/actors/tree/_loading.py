"""Filling the tree's agent and completion indexes from a restore, in one pass each.

An open restores every agent and every undelivered completion: put one at a time
(:meth:`~retinue.actors.tree.Tree.put_agent`, ``add_completion``), each goes
through the journaled containers' bookkeeping and a handful of lookups, and
that is most of an open's time past 100,000 agents. Here the indexes are
built in plain dicts and sets first, then handed to the tree's journaled
containers in one step each, with the same content the one-at-a-time path
gives (``tests/persistence/test_open_loading.py`` compares the two). The journal
is idle while a tree loads (no command is served before the open ends), so
nothing is journaled either way.

:class:`BulkLoad` is a part of :class:`~retinue.actors.tree.Tree` (the tree
is made of it), never used alone: only the tree's methods edit its indexes.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator

from retinue.actors.tree._journal import JDict, Journal, JSet
from retinue.actors.tree._keys import HOST_KEY, recipient_key, spawn_key
from retinue.protocol.messages import AgentState
from retinue.protocol.records import AgentRecord, CompletionRecord

__all__ = ["BUSY_STATES", "BulkLoad", "collector_paused"]

BUSY_STATES = frozenset(state for state in AgentState if state.busy)
"""The states of the agents in ``Tree.busy`` (a set lookup: ``.busy`` is a property)."""


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
    partial: set[str]
    undelivered: dict[str, int]

    def _load_agents(self, agents: Iterable[AgentRecord]) -> None:
        """Index restored agents (parents before children, each id once) into an empty tree.

        The same indexes :meth:`Tree.put_agent` keeps, built in one pass:
        counts by state and live profile, live paths, live children, the top
        of each agent's tree, live agents per tree, busy agents, closed
        agents, stored children and spawn keys.
        """
        closed = AgentState.CLOSED
        busy: dict[str, None] = {}
        closed_at: dict[str, float] = {}
        stored: dict[str, int] = {}
        records: dict[str, AgentRecord] = {}
        states: dict[AgentState, int] = {}
        profiles: dict[str, int] = {}
        live_paths: dict[str, str] = {}
        kids: dict[str, list[str]] = {}
        top_of: dict[str, str] = {}
        per_tree: dict[str, int] = {}
        keys: dict[tuple[str, str], str] = {}
        for record in agents:
            agent_id = record.id
            parent_id = record.parent_id
            state = record.state
            records[agent_id] = record
            states[state] = states.get(state, 0) + 1
            top = agent_id if parent_id is None else top_of.get(parent_id, parent_id)
            top_of[agent_id] = top
            if record.idempotency_key is not None:
                keys[spawn_key(parent_id, record.idempotency_key)] = agent_id
            if state is closed:
                closed_at[agent_id] = record.closed_at or record.updated_at
                if parent_id is not None:
                    stored[parent_id] = stored.get(parent_id, 0) + 1
                continue
            if state in BUSY_STATES:
                busy[agent_id] = None
            profiles[record.profile] = profiles.get(record.profile, 0) + 1
            live_paths[record.path] = agent_id
            mine = kids.get(HOST_KEY if parent_id is None else parent_id)
            if mine is None:
                kids[HOST_KEY if parent_id is None else parent_id] = [agent_id]
            else:
                mine.append(agent_id)
            per_tree[top] = per_tree.get(top, 0) + 1
        for parent_id, ids in kids.items():  # the closed children were counted above
            if parent_id != HOST_KEY:
                stored[parent_id] = stored.get(parent_id, 0) + len(ids)
        journal = self._journal
        dict.update(self.agents, records)
        dict.update(self.state_counts, {state.value: count for state, count in states.items()})
        dict.update(self.live_profiles, profiles)
        dict.update(self.live_paths, live_paths)
        dict.update(self.top_of, top_of)
        dict.update(self.busy, busy)
        dict.update(self.closed, closed_at)
        dict.update(self.stored_children, stored)
        dict.update(self.tree_count, per_tree)
        dict.update(self.spawn_keys, keys)
        host = self.children[HOST_KEY]
        set.update(host, kids.pop(HOST_KEY, ()))
        dict.update(self.children, {key: JSet(journal, ids) for key, ids in kids.items()})
        self.live_count += len(live_paths)

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
            set.update(self.partial, known)
