"""The router: completions to their recipients, and wakes.

Every settled turn makes exactly one completion, routed to the nearest live
ancestor (or the host) and pending until received. A completion a waiting
turn waits for is handed to its wait (see :mod:`retinue.actors.supervisor._waiters`); an
idle recipient with pending completions is woken with a follow-up turn.
Messages go through :mod:`retinue.actors.supervisor._mailboxes`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from collections.abc import Set as AbstractSet

from retinue.actors import Journaled, JSet
from retinue.actors.supervisor._host_waits import HostWaiter, HostWaits
from retinue.actors.supervisor._scheduler import Scheduler
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._waiters import Waiters
from retinue.actors.supervisor._world import World
from retinue.protocol import paths
from retinue.protocol.messages import (
    AgentState,
    Completion,
    CompletionRouted,
    CompletionStatus,
    Message,
    TurnSettled,
)
from retinue.protocol.records import AgentRecord, CompletionRecord

__all__ = ["Router"]

_FAILED = CompletionStatus.FAILED  # a global: an enum member's lookup is a slow descriptor


class Router(Journaled):
    """Completions and wakes."""

    def __init__(
        self, world: World, scheduler: Scheduler, waiters: Waiters, hosts: HostWaits
    ) -> None:
        """Route in ``world``; wakes queue turns on ``scheduler``; waits are in the two others."""
        self._journal = world.journal
        self.world = world
        self.scheduler = scheduler
        self.waiters = waiters
        self.hosts = hosts
        self.held_wakes: set[str] = JSet(world.journal)

    # -- wakes ------------------------------------------------------------------------

    def maybe_wake(
        self, tx: Transition, agent_id: str, *, besides: AbstractSet[str] = frozenset()
    ) -> None:
        """Give an idle agent with pending completions its wake turn.

        Completions named in ``besides`` (what its failed turn gave back) wake
        nothing on their own; the wake turn gets them with the others. A wake
        refused only because the agent's own completions fill its backlog is
        remembered and retried once the backlog drains.
        """
        world = self.world
        if not world.tree.pending.get(agent_id):  # nothing pending for it: no wake (most)
            return
        record = world.tree.agents[agent_id]
        if (
            not record.state.idle_after_work
            or not self._wakes(agent_id, besides)
            or not getattr(world.profiles.get(record.profile), "wake_on_completion", False)
            or world.closing
            or world.restoring
            or agent_id in tx.closing_subtree
        ):
            return
        if world.tree.undelivered.get(agent_id, 0) >= world.limits.pending_completions_per_agent:
            self.held_wakes.add(agent_id)
            return
        self.held_wakes.discard(agent_id)
        self.scheduler.queue_turn(tx, record, record.task, "wake")

    def _wakes(self, agent_id: str, besides: AbstractSet[str]) -> bool:
        """Whether a completion pending for ``agent_id`` is not in ``besides``."""
        pending = self.world.tree.pending_for(agent_id)
        return any(p.completion.id not in besides for p in pending) if besides else bool(pending)

    def wake_drained(self, tx: Transition) -> None:
        """Wake agents held back by a full backlog once their completions are received."""
        drained = tx.drained
        if not isinstance(drained, set):  # nothing drained (Transition.drain makes the set)
            return
        while drained:
            agent_id = drained.pop()
            if agent_id in self.held_wakes:
                self.maybe_wake(tx, agent_id)

    # -- completions ----------------------------------------------------------------

    def emit_completion(
        self,
        tx: Transition,
        record: AgentRecord,
        status: CompletionStatus,
        *,
        span: str | None = None,
        ended: float | None = None,
        taken: HostWaiter | None = None,
    ) -> None:
        """Make the one completion of ``record``'s current turn and route it.

        The generation is kept to fork as of (``span``: the W3C ``traceparent``
        of the turn that ended it, when its runner reported one). ``ended``: the
        caller found the turn has no completion yet and stamped ``record`` with
        how its generation ended (``History.ended``) at that time, in the write
        that settled it (one record built, not two). ``taken``: the host wait the
        caller claimed for this completion (:meth:`HostWaits.take_now`) and whose
        receipt it marked in that same write; it is answered here, and a
        completion routed to the host is stored delivered (written once, never
        queued).
        """
        world = self.world
        tree = world.tree
        if ended is not None:
            now = ended
        elif tree.has_completion(record):
            return  # exactly one completion per turn
        else:
            now = time.time()
            record = world.history.ended(record, span=span, at=now)  # rides on the record's write
        completion = Completion(
            id=f"{record.id}:{record.generation}",
            agent_id=record.id,
            path=record.path,
            generation=record.generation,
            status=status,
            output=record.output,
            error=record.error,
            created_at=now,
            attempt=record.attempt,
            error_type=record.error_type if status is _FAILED else None,
        )
        recipient = None if record.parent_id is None else tree.nearest_live_ancestor(record)
        if taken is not None and recipient is None:  # received by the host as it is made
            # (No drain to note: its backlog never grew. A wake the agent's full backlog
            # held back is the caller's maybe_wake's, as the turn settles.)
            pending = CompletionRecord(
                completion=completion, recipient_id=None, seq=tree.next_seq(), delivered=True
            )
        else:
            pending = CompletionRecord(
                completion=completion, recipient_id=recipient, seq=tree.next_seq()
            )
        tree.add_completion(pending)
        if tx.record_events:  # no event built when nobody listens
            failed = status is _FAILED
            tx.emit(
                TurnSettled(
                    agent_id=record.id,
                    path=record.path,
                    at=now,
                    generation=record.generation,
                    status=status,
                    error=record.error if failed else None,
                    error_type=record.error_type if failed else None,
                )
            )
            self._emit_routed(tx, completion, recipient, now)
        hosts = self.hosts
        if taken is not None:
            hosts.hand(tx, taken, completion)
        if record.id in hosts.host:  # (in C) no host wait left on it: serve_host has no work
            hosts.serve_host(tx, record.id)
        if recipient is not None:
            self.offer(tx, recipient, pending)

    def offer(self, tx: Transition, recipient_id: str, pending: CompletionRecord) -> None:
        """Hand a routed completion to a waiting turn, or wake an idle recipient."""
        if not self.waiters.completion_arrived(tx, recipient_id, pending):
            self.maybe_wake(tx, recipient_id)

    def give_back(
        self, tx: Transition, agent_id: str, events: Iterable[Message | Completion]
    ) -> None:
        """Put events a turn of ``agent_id`` was handed but never saw back in its queue.

        A completion is pending again for that agent (or, if the agent closed
        since, for its nearest live ancestor or the host) and offered as a new
        arrival: a waiting turn takes it, an idle agent may be woken. A
        message is unread again (unless compaction removed it meanwhile).
        """
        tree = self.world.tree
        for event in events:
            if isinstance(event, Message):
                tree.unread_again(event)
                continue
            done = tree.completion(event.agent_id, event.generation)
            if done is None or not done.delivered or done.recipient_id != agent_id:
                continue  # compacted, or not this agent's: nothing to give back
            back = tree.undeliver(done)
            recipient = tree.agents.get(agent_id)
            if recipient is None or recipient.state is AgentState.CLOSED:
                origin = tree.agents[event.agent_id]
                self.reroute(tx, back, tree.nearest_live_ancestor(origin))
            else:
                self.offer(tx, agent_id, back)

    def reroute(self, tx: Transition, pending: CompletionRecord, heir: str | None) -> None:
        """Move a pending completion to a new recipient, publish it and offer it there."""
        moved = self.world.tree.reroute(pending, heir)
        self._emit_routed(tx, moved.completion, heir, time.time())
        if heir is None:
            self.hosts.serve_host(tx, moved.completion.agent_id)
        else:
            self.offer(tx, heir, moved)

    def _emit_routed(
        self, tx: Transition, completion: Completion, recipient: str | None, at: float
    ) -> None:
        """Publish that ``completion`` now waits for ``recipient`` (None: the host)."""
        if not tx.record_events:  # nobody listens: no event built
            return
        path = paths.ROOT if recipient is None else self.world.tree.agents[recipient].path
        tx.emit(
            CompletionRouted(
                agent_id=completion.agent_id,
                path=completion.path,
                at=at,
                completion_id=completion.id,
                recipient=path,
            )
        )
