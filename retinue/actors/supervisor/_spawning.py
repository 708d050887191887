"""Spawning: every cap checked at spawn time, then a new agent and its first queued turn.

A refused spawn changes nothing. The checks, in order: argument types, the
profile exists and the parent may spawn it, the task size, the name, the depth
cap, a free path, the parent's fan-out, the runtime's and the top-level tree's
live-agent counts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from retinue.actors import Journaled
from retinue.actors.commands import Run, Spawn, SpawnRequest
from retinue.actors.supervisor._scheduler import Scheduler
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World, info_of, require_str
from retinue.actors.tree import spawn_key
from retinue.errors import (
    AgentClosed,
    AgentLimitExceeded,
    DedupKeyTooLong,
    DepthLimitExceeded,
    DuplicateAgentPath,
    FanoutLimitExceeded,
    InvalidArgument,
    NotPermitted,
    RetinueError,
    UnknownProfile,
)
from retinue.protocol import paths
from retinue.protocol.checks import check_key, check_text, preview
from retinue.protocol.ids import new_id
from retinue.protocol.messages import AgentInfo, AgentSpawned, AgentState
from retinue.protocol.records import AgentRecord
from retinue.protocol.supervision import SPAWN_REASON

__all__ = ["Spawner"]

# Globals: an enum member's lookup is its metaclass's __getattr__ hook (about 1 k each).
_RUNNING = AgentState.RUNNING
_STARTING = AgentState.STARTING


class Spawner(Journaled):
    """Checks and records new agents; their first turns go to the scheduler."""

    def __init__(self, world: World, scheduler: Scheduler) -> None:
        """Spawn into ``world``, queueing first turns on ``scheduler``."""
        self._journal = world.journal
        self.world = world
        self.scheduler = scheduler

    def spawn(self, tx: Transition, me: AgentRecord | None, command: Spawn | Run) -> AgentInfo:
        """Record a new agent below the sending turn (or the host's ``parent``); queue its turn.

        With an ``idempotency_key`` already used under the same parent, the
        agent that spawn made is returned instead (see :meth:`_retried`),
        before any cap is checked: a retry after a crash never spawns twice.

        Raises:
            UnknownProfile, NotPermitted, DuplicateAgentPath, DepthLimitExceeded,
            FanoutLimitExceeded, AgentLimitExceeded, InvalidAgentPath, UnknownAgent,
            MessageTooLarge, ArgumentTypeError, TurnInterrupted, DedupKeyTooLong,
            InvalidArgument.
        """
        parent = me
        if me is None and command.parent not in (None, paths.ROOT):
            parent = self.world.find(None, command.parent, "parent")
        key = command.idempotency_key
        if key is not None:
            original = self._retried(parent, command.profile, key)
            if original is not None:
                return original
        return self._spawn(
            tx, parent, command.profile, command.task, command.name, key, command.name_field
        )

    def _retried(self, parent: AgentRecord | None, profile: Any, key: Any) -> AgentInfo | None:
        """Return the agent an earlier spawn under ``parent`` made with ``key``, if any.

        Keys are scoped to the parent (the host for top-level agents) and
        bounded like deduplication keys. The original is returned as it is
        now, even if it has closed since (until compaction removes it).

        Raises:
            ArgumentTypeError, InvalidArgument: a key that is not a non-empty,
                storable str.
            DedupKeyTooLong: the key is longer than ``dedup_key_max_length``.
            InvalidArgument: the key was used for a spawn of another profile.
        """
        world = self.world
        key = check_key(key, "idempotency_key")
        cap = world.limits.dedup_key_max_length
        if len(key) > cap:
            raise DedupKeyTooLong(
                f"idempotency_key has {len(key)} characters; max is {cap}",
                limit=cap,
                value=len(key),
            )
        agent_id = world.tree.spawn_keys.get(spawn_key(None if parent is None else parent.id, key))
        if agent_id is None:
            return None
        original = world.tree.agents[agent_id]
        if original.profile != profile:
            raise InvalidArgument(
                f"idempotency_key {preview(key)} already spawned {original.path} of profile "
                f"{original.profile!r}, not {preview(profile)}; use a new key for a new spawn"
            )
        return info_of(original)

    def spawn_many(
        self, tx: Transition, me: AgentRecord | None, requests: Sequence[SpawnRequest]
    ) -> list[AgentInfo | RetinueError]:
        """Spawn a batch of children of ``me`` in one transition; a refusal keeps its place.

        A request whose idempotency key an earlier spawn under ``me`` used gets
        the agent that spawn made (see :meth:`_retried`).

        Raises:
            FanoutLimitExceeded: the batch is larger than ``fanout_cap``.
        """
        if len(requests) > self.world.limits.fanout_cap:
            raise FanoutLimitExceeded(
                f"a batch of {len(requests)} exceeds fanout_cap {self.world.limits.fanout_cap}",
                limit=self.world.limits.fanout_cap,
                value=len(requests),
                path=None if me is None else me.path,
            )
        results: list[AgentInfo | RetinueError] = []
        journal = self.world.journal
        for request in requests:
            mark = journal.savepoint()  # a refused child changes nothing; the others stand
            try:
                key = request.idempotency_key
                original = None if key is None else self._retried(me, request.profile, key)
                results.append(
                    original
                    or self._spawn(
                        tx,
                        me,
                        request.profile,
                        request.task,
                        request.name,
                        key,
                        name_field=request.name_field,
                    )
                )
            except RetinueError as exc:
                journal.roll_back_to(mark)
                results.append(exc)
        return results

    def _check_spawn(
        self,
        parent: AgentRecord | None,
        profile: Any,
        task: Any,
        name: Any,
        name_field: str = "name",
    ) -> tuple[str, str, str, int]:
        """Check every rule of a spawn, in order; return the new agent's id, name, path
        and depth.

        Raises:
            as :meth:`spawn` says (nothing has changed).
        """
        profile = require_str(profile, "profile")
        check_text(task, "task")
        self._check_profile(parent, profile)
        self.world.check_size(task, "task")
        agent_id = new_id()
        if name is None:  # "agent_" and 12 hex digits, as derive_name's (valid by construction),
            # drawn as the id is, not hashed from it: a spawn hashes nothing. Ids and names are
            # unique, not secret (the generator is not cryptographic: tokens use ``secrets``).
            # A live name is refused as any (DuplicateAgentPath), with odds n / 2**48 per spawn.
            name = "agent_" + new_id()[:12]
        else:
            name = paths.validate_name(name, field=name_field)
        parent_path = paths.ROOT if parent is None else parent.path
        path = paths.child_path(parent_path, name)  # both valid: only the length can fail
        depth = self._check_place(path)
        self._check_counts(parent)
        return agent_id, name, path, depth

    def _check_profile(self, parent: AgentRecord | None, profile: str) -> None:
        """The profile exists, and the parent (alive, of a known profile) may spawn it."""
        world = self.world
        if profile not in world.profiles:
            raise UnknownProfile(
                f"unknown profile {preview(profile)}; known: {sorted(world.profiles)}"
            )
        if parent is None:
            return
        if parent.state is AgentState.CLOSED:
            raise AgentClosed(f"{parent.path} is closed", path=parent.path)
        if parent.profile not in world.profiles:
            raise UnknownProfile(
                f"{parent.path} has profile {parent.profile!r}, which this runtime does "
                "not define, so it may spawn nothing"
            )
        allowed = world.profiles[parent.profile].subagents
        if profile not in allowed:
            raise NotPermitted(
                f"profile {parent.profile!r} may not spawn {profile!r}; "
                f"it may spawn: {sorted(allowed)}"
            )

    def _check_place(self, path: str) -> int:
        """The new path is within the depth cap and no live agent holds it; return its depth."""
        limits = self.world.limits
        depth = paths.depth(path, valid=True)
        if not limits.depth_allowed(depth):
            cap = limits.depth_cap
            raise DepthLimitExceeded(
                f"{path} would be at depth {depth}; depth_cap is {cap}",
                limit=cap,
                value=depth,
                path=path,
            )
        if path in self.world.tree.live_paths:
            raise DuplicateAgentPath(f"a live agent already holds {path}")
        return depth

    def _check_counts(self, parent: AgentRecord | None) -> None:
        """The parent's fan-out, the runtime's live agents and the top-level tree's."""
        tree = self.world.tree
        limits = self.world.limits
        live = 0 if parent is None else len(tree.live_children(parent.id))  # the host's: no cap
        if parent is not None and live >= limits.fanout_cap:
            raise FanoutLimitExceeded(
                f"{parent.path} already has {live} live children; "
                f"fanout_cap is {limits.fanout_cap}",
                limit=limits.fanout_cap,
                value=live,
                path=parent.path,
            )
        if tree.live_count >= limits.max_agents:
            raise AgentLimitExceeded(
                f"the runtime already has {tree.live_count} live agents; "
                f"max_agents is {limits.max_agents}",
                limit=limits.max_agents,
                value=tree.live_count,
            )
        if parent is None:
            return
        top = tree.top_of[parent.id]
        in_tree = tree.tree_count.get(top, 0)
        if in_tree >= limits.max_tree_agents:
            top_path = tree.agents[top].path
            raise AgentLimitExceeded(
                f"the tree of {top_path} already has {in_tree} live "
                f"agents; max_tree_agents is {limits.max_tree_agents}",
                limit=limits.max_tree_agents,
                value=in_tree,
                path=top_path,
            )

    def _spawn(
        self,
        tx: Transition,
        parent: AgentRecord | None,
        profile: str,
        task: str,
        name: str | None,
        idempotency_key: str | None = None,
        name_field: str = "name",
    ) -> AgentInfo:
        agent_id, name, path, depth = self._check_spawn(parent, profile, task, name, name_field)
        now = time.time()
        starts = self.scheduler.would_start(profile)  # the record is written once, as it ends
        record = AgentRecord(
            id=agent_id,
            name=name,
            path=path,
            profile=profile,
            parent_id=None if parent is None else parent.id,
            parent_path=paths.ROOT if parent is None else parent.path,
            depth=depth,
            state=_RUNNING if starts else _STARTING,
            generation=1,
            task=task,
            created_at=now,
            updated_at=now,
            idempotency_key=idempotency_key,
            started_at=now if starts else None,
            trace=tx.trace,
            restart=self.world.policies.get(profile),
        )
        self.world.tree.put_agent(record)
        if tx.record_events:  # no event built when nobody listens
            tx.emit(
                AgentSpawned(
                    agent_id=agent_id,
                    path=path,
                    at=now,
                    profile=profile,
                    parent_path=record.parent_path,
                )
            )
        stored = self.scheduler.enqueue(tx, record, task, SPAWN_REASON, start=starts, fresh=True)
        if stored is record:  # unchanged since its turn started: the turn's snapshot of it
            handle = self.scheduler.turns.get(agent_id)
            if handle is not None:
                return handle.turn.agent
        return info_of(stored)
