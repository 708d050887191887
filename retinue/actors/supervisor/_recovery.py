"""Recovery on open: what a crash left of the turns that were queued or running.

:func:`recover` runs once, as the runtime opens (:func:`~retinue.actors.system._boot.boot`),
over the tree just loaded from the store and before the supervisor serves
anything: every turn a crash lost ends as ``interrupted`` (or its restart
policy runs it again), a pending restart an open without the agent's
profile made is decided (``max_lost``, intensity), and completions whose
recipient is gone go to its heir. Its writes stay in the tree for boot to
commit.
"""

from __future__ import annotations

import msgspec

from retinue.actors.calls import Reply
from retinue.actors.supervisor._lifecycle import INTERRUPTED_QUEUED, INTERRUPTED_RUNNING
from retinue.actors.supervisor._restarts import Restarts
from retinue.actors.supervisor._routing import Router
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World
from retinue.protocol.messages import AgentState, CompletionStatus
from retinue.protocol.records import AgentRecord, ToolStep, open_count

__all__ = ["recover"]

# The states recovery acts on: a pending restart, or a turn the crash lost.
_RECOVERED = frozenset({AgentState.RESTARTING, AgentState.STARTING, AgentState.RUNNING})


def recover(world: World, restarts: Restarts, router: Router) -> list[AgentRecord]:
    """Turn agents that were queued or running at the crash into ``interrupted``.

    Each gets its ``interrupted`` completion (unless the store already had
    it), and pending completions whose recipient is gone are rerouted.
    A turn whose restart policy answers ``lost`` is restarted instead (or
    given up on); a pending restart is given up on if this runtime's policy
    would not have made it (:meth:`Restarts.decide_pending`), else it stays
    as stored, as does a pending approval.
    Nothing is woken and no event is published. Returns the agents it
    interrupted; the writes stay in the tree for the caller to commit.
    """
    tx = Transition(Reply(), world.bus, "recovery", record_events=False)
    world.restoring = True
    interrupted = _interrupt_lost_turns(world, restarts, router, tx)
    _reroute_orphaned(world, router, tx)
    world.restoring = False
    return interrupted


def _interrupt_lost_turns(
    world: World, restarts: Restarts, router: Router, tx: Transition
) -> list[AgentRecord]:
    """End every turn the crash lost (parents first), unless its restart policy runs it again;
    decide the pending restarts an open without their profile left."""
    interrupted: list[AgentRecord] = []
    tree = world.tree
    lost = [r for r in map(tree.agents.__getitem__, tree.busy) if r.state in _RECOVERED]
    _count_open_calls(world, [r for r in lost if r.state is AgentState.RUNNING])
    for record in sorted(lost, key=lambda r: (r.depth, r.created_at)):
        if record.state is AgentState.RESTARTING:
            restarts.decide_pending(tx, record)
        elif record.state.has_turn and not restarts.lost(tx, record):
            error = (
                INTERRUPTED_QUEUED if record.state is AgentState.STARTING else INTERRUPTED_RUNNING
            )
            record = world.update(
                record, state=AgentState.INTERRUPTED, output=None, error=error, error_type=None
            )
            router.emit_completion(tx, record, CompletionStatus.INTERRUPTED)
            interrupted.append(record)
    return interrupted


class _Journal(msgspec.Struct):
    """The journal of a stored transcript, decoded without its messages."""

    journal: ToolStep | None = None


_JOURNAL = msgspec.msgpack.Decoder(_Journal)


def _count_open_calls(world: World, running: list[AgentRecord]) -> None:
    """Hold the open tool calls each turn the crash lost left in its stored journal.

    A running agent's record may count as of its last write
    (:attr:`~retinue.protocol.records.AgentRecord.open_calls`): the count is
    taken from the journal, and the record's next change (its turn ends here)
    writes it. A transcript that does not decode leaves the record's count.
    """
    tree = world.tree
    for record in running:
        raw = world.store.get("transcripts", record.id.encode())
        if raw is None:
            continue
        try:
            count = open_count(_JOURNAL.decode(raw).journal)
        except msgspec.DecodeError:
            continue
        if count != record.open_calls:
            tree.open_calls[record.id] = count


def _reroute_orphaned(world: World, router: Router, tx: Transition) -> None:
    """Give the pending completions of a closed or unrestored recipient to its heir."""
    tree = world.tree
    for key in list(tree.pending):
        if key and not tree.is_live(key):
            for pending in tree.pending_for(key):
                # The recipient is closed or was not restored: its heir takes it.
                origin = tree.agents.get(key) or tree.agents[pending.completion.agent_id]
                router.reroute(tx, pending, tree.nearest_live_ancestor(origin))
