"""What restore's walk learns of the agents it keeps, for the tree to adopt.

An open's restore walks every kept agent top-down from the host (see
:mod:`retinue.persistence.restore`); the tree then needs, for the same
agents, their tree tops, live paths, live children and counts. Gathered by
the walk, a sibling group at a time while the records are at hand (the
counts by one C-level pass), they cost no second pass of Python over a
million agents: the tree hands them to its journaled containers in one step
each (``retinue/actors/tree/_loading.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import attrgetter

import msgspec

from retinue.protocol.messages import AgentState
from retinue.protocol.records import AgentRecord

__all__ = ["BUSY_STATES", "AgentPlace", "Placed"]

BUSY_STATES = frozenset(state for state in AgentState if state.busy)
"""The states of the busy agents (a set lookup: ``.busy`` is a property)."""


class AgentPlace(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What an open's walk reads of a stored agent record: where the agent sits, its
    state and its keys (:class:`~retinue.protocol.records.AgentRecord`'s fields of the
    same names). Its task, output, usage and the rest stay in the store, undecoded."""

    id: str
    name: str
    path: str
    profile: str
    parent_id: str | None
    parent_path: str
    depth: int
    state: AgentState
    generation: int
    created_at: float = 0.0
    updated_at: float = 0.0
    closed_at: float | None = None
    idempotency_key: str | None = None


_CLOSED = AgentState.CLOSED
_PARENT_ID = attrgetter("parent_id")
_STATE_PROFILE = attrgetter("state", "profile")


@dataclass
class Placed:
    """The kept agents (parents before children) and what the tree indexes of them.

    Attributes:
        agents: every kept agent by id, in the order kept.
        top_of: each agent's top-level ancestor (itself for a top-level one).
        live_paths: each live agent's path -> its id.
        live_kids: each parent's live children's ids (None: the host's top-level
            agents); a parent with none has no entry.
        live_per_tree: how many live agents each top-level agent's tree holds
            (a tree with none has no entry).
        stored_children: how many kept agents, closed ones included, each agent
            is the parent of.
        states: how many agents are in each state.
        live_profiles: how many live agents run each profile.
        busy: the busy agents' ids (see :data:`BUSY_STATES`), in the order kept.
        closed: each closed agent's id -> when it closed (closed_at, else updated_at).
        spawn_keys: (parent id, None for the host; the idempotency key a spawn
            gave) -> the id of the agent it made.
    """

    agents: dict[str, AgentRecord] = field(default_factory=dict)
    top_of: dict[str, str] = field(default_factory=dict)
    live_paths: dict[str, str] = field(default_factory=dict)
    live_kids: dict[str | None, list[str]] = field(default_factory=dict)
    live_per_tree: dict[str, int] = field(default_factory=dict)
    stored_children: dict[str, int] = field(default_factory=dict)
    states: dict[AgentState, int] = field(default_factory=dict)
    live_profiles: dict[str, int] = field(default_factory=dict)
    busy: dict[str, None] = field(default_factory=dict)
    closed: dict[str, float] = field(default_factory=dict)
    spawn_keys: dict[tuple[str | None, str], str] = field(default_factory=dict)

    @classmethod
    def of(cls, records: Sequence[AgentRecord]) -> Placed:
        """Index ``records`` (parents before children, each id once) as the walk does."""
        placed = cls()
        for parent_id, run in groupby(records, _PARENT_ID):
            placed.add(parent_id, list(run))
        placed.live_paths.update(
            (record.path, record.id) for record in records if record.state is not _CLOSED
        )
        placed.count(records)
        return placed

    def count(self, records: Iterable[AgentRecord]) -> None:
        """Count ``records``, the agents indexed (in any order), by state and the live ones
        by profile: one C-level pass, cheapest in the order they were decoded (which
        their memory follows), not the walk's."""
        states, profiles = self.states, self.live_profiles
        for (state, profile), count in Counter(map(_STATE_PROFILE, records)).items():
            states[state] = states.get(state, 0) + count
            if state is not _CLOSED:
                profiles[profile] = profiles.get(profile, 0) + count

    def add(self, parent_id: str | None, siblings: list[AgentRecord]) -> None:
        """Index ``siblings``, children of ``parent_id`` (None: top-level agents), in the
        order placed, their parent indexed before them. Their live paths are set by the
        walk as it checks them (by :meth:`of` for records not walked), their counts by
        :meth:`count`."""
        agents, top_of, busy = self.agents, self.top_of, self.busy
        live: list[str] = []
        top = None if parent_id is None else top_of.get(parent_id, parent_id)
        for record in siblings:
            agent_id = record.id
            state = record.state
            agents[agent_id] = record
            top_of[agent_id] = agent_id if top is None else top
            if record.idempotency_key is not None:
                self.spawn_keys[parent_id, record.idempotency_key] = agent_id
            if state is _CLOSED:
                self.closed[agent_id] = record.closed_at or record.updated_at
                continue
            if state in BUSY_STATES:
                busy[agent_id] = None
            live.append(agent_id)
        if parent_id is not None:
            stored = self.stored_children
            stored[parent_id] = stored.get(parent_id, 0) + len(siblings)
        if not live:
            return
        kids = self.live_kids.get(parent_id)
        if kids is None:
            self.live_kids[parent_id] = live
        else:
            kids += live
        per_tree = self.live_per_tree
        if top is None:  # each top-level agent's tree holds it
            per_tree.update(dict.fromkeys(live, 1))
        else:
            per_tree[top] = per_tree.get(top, 0) + len(live)
