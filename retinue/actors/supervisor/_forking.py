"""Forks: a settled copy of an agent as of a past generation, its subtree as of then too.

A fork is one command, its whole subtree copied in one transition. What it
copies of each agent: the record as the generation ended (profile, task,
state, output, error; :mod:`~retinue.actors.supervisor._history` keeps them)
and the stored transcript's messages of that generation and earlier (each
message carries the generation that added it). Usage starts from nothing, no
mailbox or pending completion is copied, the origin is untouched, and the
copies share nothing with it. The fork's numbering carries on from the
generation it was forked as of; ``forked_from`` names the origin.

"As of" a generation ``N`` of the origin is the moment ``N`` ended: each
agent of the subtree created by then and not closed by then is copied as of
its newest generation settled by then; one whose first turn was still
running is copied ``interrupted`` (its task, no transcript), ready to
resume. ``at=None`` is now: a settled origin and its settled descendants as
they are; a busy one (or a closed one) as of its last settled generation.

A fork counts like a spawn, with the same typed refusals: the copies' names
and paths (the root's under its new parent, ``<name>_fork<n>`` by default),
the depth cap for every copy, the profiles (the new parent may spawn the
root's), the fan-out of the new parent and of each copy, and the live
agents of the runtime and of the tree the fork joins. A refused fork changes
nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from retinue.actors import Journaled
from retinue.actors.commands import Fork
from retinue.actors.supervisor._spawning import Spawner
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World, info_of
from retinue.errors import (
    AgentLimitExceeded,
    ArgumentTypeError,
    DepthLimitExceeded,
    DuplicateAgentPath,
    FanoutLimitExceeded,
    GenerationNotKept,
    InvalidArgument,
)
from retinue.protocol import paths
from retinue.protocol.ids import new_id
from retinue.protocol.messages import AgentInfo, AgentSpawned, AgentState, ForkedFrom, Usage
from retinue.protocol.records import (
    TRANSCRIPT_VERSION,
    AgentRecord,
    GenerationEnd,
    GenerationRecord,
    TranscriptRecord,
)

__all__ = ["INTERRUPTED_UNSETTLED", "Forker"]

INTERRUPTED_UNSETTLED = "interrupted: its first turn was still running when its fork was made"
"""The error of a copy whose first turn had not settled at the fork's moment."""

_decode_transcript = msgspec.msgpack.Decoder(TranscriptRecord).decode
_encode = msgspec.msgpack.Encoder().encode
_MAX_SUFFIX = 10_000
"""Most ``_fork<n>`` names tried for a fork given no name."""


@dataclass(frozen=True)
class _Copy:
    """One agent of a fork: its origin, what it is copied as of, and where it goes."""

    origin: AgentRecord
    asof: GenerationRecord
    parent: int | None  # the index of its parent's copy (None: the fork's root)
    name: str
    path: str
    depth: int


class Forker(Journaled):
    """Checks and records forks. Supervisor thread only."""

    _config = frozenset({"world", "spawner"})

    def __init__(self, world: World, spawner: Spawner) -> None:
        """Fork into ``world``, with ``spawner``'s checks of a new agent."""
        self._journal = world.journal
        self.world = world
        self.spawner = spawner

    def fork(self, tx: Transition, command: Fork) -> AgentInfo:
        """Record the copies :class:`~retinue.actors.commands.Fork` asks for; return the root's.

        Raises:
            UnknownAgent, InvalidAgentPath, ArgumentTypeError: a bad ``ref`` or ``parent``.
            InvalidArgument: ``at`` is not a generation of the agent.
            GenerationNotKept: that generation (or one of the subtree's as of
                then) is not kept, or never settled.
            UnknownProfile, NotPermitted, AgentClosed, DuplicateAgentPath,
            DepthLimitExceeded, FanoutLimitExceeded, AgentLimitExceeded: as a spawn.
        """
        world = self.world
        origin = world.find(None, command.ref)
        if not isinstance(command.tree, bool):
            raise ArgumentTypeError(f"tree must be True or False, not {command.tree!r}")
        root, moment = self._root_as_of(origin, _check_at(command.at))
        parent = None
        if command.parent is None:
            if origin.parent_id is not None:
                parent = world.tree.agents[origin.parent_id]
        elif command.parent != paths.ROOT:
            parent = world.find(None, command.parent, "parent")
        copies = self._plan(root, moment, parent, command.name, subtree=command.tree)
        self._check(parent, copies)
        return info_of(self._record(tx, parent, copies))

    # -- as of when ---------------------------------------------------------------------

    def _root_as_of(
        self, origin: AgentRecord, at: int | None
    ) -> tuple[GenerationRecord, float | None]:
        """The origin as of ``at`` and the moment its subtree is copied as of (None: now).

        Raises:
            InvalidArgument, GenerationNotKept: as :meth:`fork`.
        """
        history = self.world.history
        if at is None:
            if origin.state.settled:
                kept = history.get(origin.id, origin.generation)
                span = None if kept is None else kept.span
                return GenerationRecord(agent=origin, settled_at=time.time(), span=span), None
            settled = [g for g in history.kept(origin) if g.agent.generation <= origin.generation]
            if not settled:
                raise GenerationNotKept(
                    f"{origin.path} has no settled generation to fork yet (it is "
                    f"{origin.state}); wait for its turn to settle, then fork it",
                    path=origin.path,
                )
            return settled[-1], settled[-1].settled_at
        if at > origin.generation:
            raise InvalidArgument(
                f"at={at}: {origin.path} has had {origin.generation} generation(s); "
                f"fork one of 1 to {origin.generation}"
            )
        kept = history.get(origin.id, at)
        if kept is not None:
            return kept, kept.settled_at
        if at == origin.generation and origin.state.settled:  # a store from before it kept them
            return GenerationRecord(agent=origin, settled_at=time.time()), None
        raise GenerationNotKept(self._why_not_kept(origin, at), path=origin.path)

    def _why_not_kept(self, origin: AgentRecord, at: int) -> str:
        """Why ``origin``'s generation ``at`` cannot be forked, and what to do instead."""
        head = f"generation {at} of {origin.path}"
        forked = origin.forked_from
        if at == origin.generation and not origin.state.settled:
            return f"{head} has not settled (it is {origin.state}); fork an earlier one, or wait"
        if forked is not None and at < forked.generation:
            return (
                f"{head} is from before it was forked from {forked.path} (as of generation "
                f"{forked.generation}); fork {forked.path} (id {forked.agent_id}) as of {at}"
            )
        keep = self.world.limits.fork_generations
        return (
            f"{head} is not kept: the store keeps each agent's newest {keep} settled "
            "generations (Limits.fork_generations); fork a newer one, or raise the limit"
        )

    def _as_of(self, record: AgentRecord, moment: float | None) -> GenerationRecord:
        """A descendant as of ``moment`` (None: now): its newest generation settled by then,
        or ``interrupted`` in its first turn if none had.

        Raises:
            GenerationNotKept: what it was then is not kept any more.
        """
        if moment is None and record.state.settled:
            return GenerationRecord(agent=record, settled_at=time.time())
        kept = self.world.history.kept(record)
        settled = [
            g
            for g in kept
            if (moment is None or g.settled_at <= moment)
            and g.agent.generation <= record.generation
        ]
        if settled:
            return settled[-1]
        first = kept[0].agent if kept else record
        if first.generation != 1:
            when = "now" if moment is None else "as of the fork's generation"
            raise GenerationNotKept(
                f"{record.path} {when} is not kept (the store keeps each agent's newest "
                f"{self.world.limits.fork_generations} settled generations); fork with "
                "tree=False, or a newer generation",
                path=record.path,
            )
        unsettled = msgspec.structs.replace(
            first,
            state=AgentState.INTERRUPTED,
            generation=1,
            attempt=1,
            output=None,
            error=INTERRUPTED_UNSETTLED,
            error_type=None,
        )
        return GenerationRecord(agent=unsettled, settled_at=moment or time.time())

    # -- the plan and its checks -----------------------------------------------------------

    def _plan(
        self,
        root: GenerationRecord,
        moment: float | None,
        parent: AgentRecord | None,
        name: Any,
        *,
        subtree: bool,
    ) -> list[_Copy]:
        """Every copy, parents first: the root below ``parent``, then its subtree as of then."""
        origin = self.world.tree.agents[root.agent.id]
        parent_path = paths.ROOT if parent is None else parent.path
        root_name = self._root_name(origin, parent_path, name)
        depth = paths.depth(parent_path, valid=True) + 1
        path = paths.child_path(parent_path, root_name)
        copies = [_Copy(origin, root, None, root_name, path, depth)]
        if not subtree:
            return copies
        children = self._children()
        index = 0
        while index < len(copies):
            here = copies[index]
            for child in children.get(here.origin.id, ()):
                if _alive_at(child, moment):
                    copies.append(
                        _Copy(
                            child,
                            self._as_of(child, moment),
                            index,
                            child.name,
                            paths.child_path(here.path, child.name),
                            here.depth + 1,
                        )
                    )
            index += 1
        return copies

    def _children(self) -> dict[str, list[AgentRecord]]:
        """Every agent's children, closed ones included, oldest first."""
        out: dict[str, list[AgentRecord]] = {}
        for record in sorted(self.world.tree.agents.values(), key=lambda r: r.created_at):
            if record.parent_id is not None:
                out.setdefault(record.parent_id, []).append(record)
        return out

    def _root_name(self, origin: AgentRecord, parent_path: str, name: Any) -> str:
        """The root copy's name: ``name``, else the first free ``<origin's name>_fork<n>``.

        Raises:
            InvalidAgentPath, ArgumentTypeError: a bad ``name``.
        """
        if name is not None:
            return paths.validate_name(name, field="name")
        live = self.world.tree.live_paths
        for n in range(1, _MAX_SUFFIX):
            suffix = f"_fork{n}"
            candidate = origin.name[: paths.MAX_NAME_LENGTH - len(suffix)] + suffix
            if paths.join(parent_path, candidate) not in live:
                return candidate
        raise DuplicateAgentPath(f"every name like {origin.name}_fork<n> is taken; give a name")

    def _check(self, parent: AgentRecord | None, copies: Sequence[_Copy]) -> None:
        """Every rule of a spawn, for every copy (see the module docstring).

        Raises:
            as :meth:`fork` says (nothing has changed).
        """
        spawner, limits = self.spawner, self.world.limits
        root = copies[0]
        spawner._check_profile(parent, root.asof.agent.profile)
        spawner._check_place(root.path)
        deepest = max(copies, key=lambda c: c.depth)
        if not limits.depth_allowed(deepest.depth):
            raise DepthLimitExceeded(
                f"the fork's {deepest.path} would be at depth {deepest.depth}; depth_cap is "
                f"{limits.depth_cap} (fork with tree=False, or under a shallower parent)",
                limit=limits.depth_cap,
                value=deepest.depth,
                path=deepest.path,
            )
        spawner._check_counts(parent)  # the new parent's fan-out, then the runtime's count
        kids: dict[int, int] = {}
        for copy in copies[1:]:
            assert copy.parent is not None
            kids[copy.parent] = kids.get(copy.parent, 0) + 1
            spawner._check_profile(copies[copy.parent].asof.agent, copy.asof.agent.profile)
        for at, count in kids.items():
            if count > limits.fanout_cap:
                raise FanoutLimitExceeded(
                    f"the fork's {copies[at].path} would have {count} children; fanout_cap "
                    f"is {limits.fanout_cap}",
                    limit=limits.fanout_cap,
                    value=count,
                    path=copies[at].path,
                )
        self._check_room(parent, len(copies))

    def _check_room(self, parent: AgentRecord | None, count: int) -> None:
        """The runtime's live agents, and those of the tree the fork joins, have room for
        ``count`` more."""
        limits, tree = self.world.limits, self.world.tree
        if tree.live_count + count > limits.max_agents:
            raise AgentLimitExceeded(
                f"the fork's {count} agents would pass max_agents {limits.max_agents} "
                f"(the runtime has {tree.live_count} live agents)",
                limit=limits.max_agents,
                value=tree.live_count + count,
            )
        in_tree = 0 if parent is None else tree.tree_count.get(tree.top_of[parent.id], 0)
        if in_tree + count > limits.max_tree_agents:
            top = None if parent is None else tree.agents[tree.top_of[parent.id]].path
            raise AgentLimitExceeded(
                f"the fork's {count} agents would pass max_tree_agents "
                f"{limits.max_tree_agents} (the tree has {in_tree} live agents)",
                limit=limits.max_tree_agents,
                value=in_tree + count,
                path=top,
            )

    # -- recording ---------------------------------------------------------------------

    def _record(
        self, tx: Transition, parent: AgentRecord | None, copies: Sequence[_Copy]
    ) -> AgentRecord:
        """Record every copy, its transcript and its kept generation; return the root's."""
        world = self.world
        now = time.time()
        made: list[AgentRecord] = []
        for copy in copies:
            above = parent if copy.parent is None else made[copy.parent]
            record = self._copy(tx, copy, above, now)
            world.tree.put_agent(record)
            self._copy_transcript(copy, record)
            tx.emit(
                AgentSpawned(
                    agent_id=record.id,
                    path=record.path,
                    at=now,
                    profile=record.profile,
                    parent_path=record.parent_path,
                )
            )
            made.append(record)
        return made[0]

    def _copy(
        self, tx: Transition, copy: _Copy, parent: AgentRecord | None, now: float
    ) -> AgentRecord:
        """The record of one copy: the origin as of its generation, usage from nothing."""
        agent = copy.asof.agent
        state = agent.state if agent.state.settled else AgentState.INTERRUPTED
        origin = copy.origin
        return msgspec.structs.replace(
            agent,
            id=new_id(),
            name=copy.name,
            path=copy.path,
            parent_id=None if parent is None else parent.id,
            parent_path=paths.ROOT if parent is None else parent.path,
            depth=copy.depth,
            state=state,
            created_at=now,
            updated_at=now,
            host_received=agent.generation,  # the host has nothing of the fork's to receive
            host_returned=(),
            closed_at=None,
            usage=Usage(),
            tree_usage=Usage(),
            idempotency_key=None,
            restart_due_at=None,
            restarts=(),
            lost=0,
            open_calls=0,  # the copy's transcript carries no journal: no call of its is in doubt
            trace=tx.trace,
            restart=self.world.policies.get(agent.profile, agent.restart),
            forked_from=ForkedFrom(
                agent_id=origin.id,
                path=origin.path,
                generation=agent.generation,
                trace=copy.asof.span or origin.trace,
            ),
            # its generation as kept: settled now, with the span of the turn that ended it
            ended=GenerationEnd(
                generation=agent.generation, state=state, at=now, span=copy.asof.span
            ),
        )

    def _copy_transcript(self, copy: _Copy, record: AgentRecord) -> None:
        """Store the origin's transcript up to the copy's generation as the copy's.

        A message added by a later generation is left out; what a later
        generation's growth cut from an earlier one stays cut (the store keeps
        one bounded transcript per agent, not one per generation).
        """
        raw = self.world.store.get("transcripts", copy.origin.id.encode())
        if raw is None:
            return
        try:
            stored = _decode_transcript(raw)
        except msgspec.DecodeError:
            return  # an undecodable transcript: the copy starts over, as its origin would
        if stored.version > TRANSCRIPT_VERSION:
            return
        upto = record.generation
        kept = TranscriptRecord(
            version=stored.version,
            agent_id=record.id,
            messages=tuple(m for m in stored.messages if m.generation <= upto),
            cut=stored.cut,
            calls=tuple(c for c in stored.calls if c.generation <= upto),
        )
        self.world.tree.put_transcript(record.id, _encode(kept))


def _check_at(at: Any) -> int | None:
    """Return ``at`` as a generation number (None: now).

    Raises:
        ArgumentTypeError: it is not an int. InvalidArgument: it is below 1.
    """
    if at is None:
        return None
    if isinstance(at, bool) or not isinstance(at, int):
        raise ArgumentTypeError(f"at must be a generation number (an int), not {type(at).__name__}")
    if at < 1:
        raise InvalidArgument(f"at must be a generation number, 1 or more, not {at}")
    return at


def _alive_at(record: AgentRecord, moment: float | None) -> bool:
    """Whether ``record``'s agent existed, not closed, at ``moment`` (None: now)."""
    if moment is None:
        return record.state is not AgentState.CLOSED
    return record.created_at <= moment and (record.closed_at is None or record.closed_at > moment)
