"""Turn ends, follow-ups, interrupts and closes: the rules that span the supervisor's parts.

A settled, interrupted or closed turn releases its slot (scheduler) and its
wait (waiters), and produces its one completion (router). Closing an agent
interrupts it first, hands its pending completions to its heir and ends the
waits on it. A failed turn may be restarted by its profile's policy instead
(supervision), which makes no completion yet. A turn's inputs are consumed
only if it completes; otherwise they go back (:mod:`~retinue.actors.supervisor._turn_inputs`).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from retinue.actors import Journaled
from retinue.actors.commands import (
    Close,
    CloseTree,
    ExpireTurn,
    FollowUp,
    Interrupt,
    InterruptTree,
    Resume,
    Settle,
)
from retinue.actors.supervisor._host_waits import HostWaits, host_take
from retinue.actors.supervisor._routing import Router
from retinue.actors.supervisor._scheduler import TURN_ENDED, Scheduler
from retinue.actors.supervisor._supervision import Supervision
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._turn_inputs import Event, consume, given_back_ids, take_held
from retinue.actors.supervisor._waiters import Waiters
from retinue.actors.supervisor._world import World, info_of
from retinue.errors import (
    ActiveDescendants,
    AgentBusy,
    AgentClosed,
    AgentStateError,
    CompletionBacklogFull,
    TurnInterrupted,
    UnknownProfile,
)
from retinue.protocol.checks import check_text
from retinue.protocol.failures import TURN_TIMEOUT, TurnError
from retinue.protocol.messages import (
    AgentClosedEvent,
    AgentInfo,
    AgentState,
    CompletionStatus,
)
from retinue.protocol.records import AgentRecord, GenerationEnd
from retinue.protocol.text import bounded_text

__all__ = ["INTERRUPTED_QUEUED", "INTERRUPTED_RUNNING", "Lifecycle"]

_held = dict.get  # a held agent's record, in C (AgentTable.get, a Python call, reads settled ones)
_replace = msgspec.structs.replace
_COMPLETED = AgentState.COMPLETED  # a global: an enum member's lookup is a slow descriptor
_DONE = CompletionStatus.COMPLETED  # (the same: each a metaclass __getattr__ hook, ~1 k)
_FAILED = CompletionStatus.FAILED

INTERRUPTED_QUEUED = "interrupted before execution"
"""The error of a turn interrupted while it waited for a slot (it never ran)."""
INTERRUPTED_RUNNING = "interrupted"
"""The error of a turn interrupted while its runner ran."""
_LIVE = frozenset({AgentState.RUNNING, AgentState.AWAITING_APPROVAL})
"""States of an agent whose turn has a runner (parked for approval, after a reopen, none)."""


class Lifecycle(Journaled):
    """How turns end and agents close."""

    def __init__(
        self,
        world: World,
        scheduler: Scheduler,
        waiters: Waiters,
        hosts: HostWaits,
        router: Router,
        supervision: Supervision,
    ) -> None:
        """Act on ``world`` through the scheduler, the turn and host waits, the router and
        supervision (restarts, approvals, call admission)."""
        self._journal = world.journal
        self.world = world
        self.scheduler = scheduler
        self.waiters = waiters
        self.hosts = hosts
        self.router = router
        self.supervision = supervision

    # -- turn ends ----------------------------------------------------------------------

    def settle(
        self,
        tx: Transition,
        command: Settle,
        held: dict[str, Any] | None = None,
        record: AgentRecord | None = None,
    ) -> None:
        """A runner finished; settle its turn unless it was interrupted meanwhile.

        ``held``: changes to the agent's record its last step left for this
        write (``ModelState.last_step``); they are written whatever happens.
        ``record``: the agent's record as the tree holds it now, when the caller
        looked it up already (None: looked up here).
        """
        turn = command.sender
        if record is None:
            agents = self.world.tree.agents
            record = _held(agents, turn.agent_id)  # a running agent's is held (in C)
            if record is None:
                record = agents.get(turn.agent_id)
        handle = _held(self.scheduler.turns, turn.agent_id)  # is_current's look, in C
        if (
            handle is None
            or handle.generation != turn.generation
            or record is None
            or record.state not in _LIVE
        ):
            if held and record is not None:  # the step counts: its changes are written
                self.world.update(record, updated_at=record.updated_at, **held)
            return  # a late result of an interrupted turn: discarded
        changes = held or {}
        if command.trace is not None:
            tx.trace = command.trace  # a wake it causes links to this turn's span
            if record.trace is None:  # an agent spawned outside any span: its trace is this
                changes["trace"] = command.trace
        self.finish_turn(
            tx, record, command.output, command.error, span=command.trace, changes=changes
        )

    def finish_turn(
        self,
        tx: Transition,
        record: AgentRecord,
        output: str | None,
        error: TurnError | None,
        *,
        pump: bool = True,
        returned: tuple[Event, ...] = (),
        span: str | None = None,
        changes: dict[str, Any] | None = None,
    ) -> None:
        """End ``record``'s running turn with ``output`` or ``error`` and route its completion.

        ``span`` is the W3C ``traceparent`` of the turn's span (its runner's
        report), kept with the generation (see :mod:`~retinue.actors.supervisor._history`).
        ``changes``: further changes to the agent's record (its last step's usage,
        its trace), written with the turn's end in one record write.

        A failed turn's completion carries the error's text and class (``error_type``).

        A turn that completes consumes its inputs; one that fails gives back
        what it holds (its inputs, what its waits received, unless a model
        turn's transcript stored them) for its next attempt or turn, and is
        woken only by completions besides those (``returned``: what its cancel
        gave back already). A failed turn its restart policy restarts makes no
        completion (the agent is ``restarting``).
        """
        scheduler, agent_id = self.scheduler, record.id
        handle = _held(scheduler.turns, agent_id)
        # _release's work, inline (every settle's); the error a part fails a wait or a
        # request with is made only by a part that holds one (nearly every turn: none).
        scheduler.release(tx, agent_id, None)
        if agent_id in self.waiters.by_turn:
            self.waiters.release(tx, agent_id, TurnInterrupted(TURN_ENDED))
        self.supervision.turn_ended(tx, agent_id, None)
        back = list(returned)
        if handle is not None:
            journal = self._journal
            back += take_held(handle, journal) if error is not None else consume(handle, journal)
        if back:  # nearly every turn: nothing to give back (no call)
            self.router.give_back(tx, record.id, back)
        # Whatever ran the turn, what is stored is storable and bounded.
        cap = self.world.limits.output_max_bytes
        if error is not None:
            if changes:  # written before the restart policy reads the record
                record = self.world.update(record, updated_at=record.updated_at, **changes)
                changes = None
            error = TurnError(bounded_text(error.text, cap), error.type, error.permanent)
            error = self.supervision.restarts.after_failure(tx, record, error, span=span)
            if error is None:  # restarting: the task's completion is still to come
                if pump:
                    self.scheduler.pump(tx)
                return
        elif output is not None:
            output = bounded_text(output, cap)
        status = _DONE if error is None else _FAILED
        changes = {} if changes is None else changes
        # Set one by one: an update(**) builds a dict of its own first.
        changes["state"] = _COMPLETED if error is None else AgentState.FAILED
        changes["output"] = output
        changes["error"] = None if error is None else bounded_text(error.text, cap)
        changes["error_type"] = None if error is None else error.type
        record = self._write_end(tx, record, status, changes, span)
        if pump:
            self.scheduler.pump(tx)
        if _held(self.world.tree.pending, record.id):  # maybe_wake's first look, in C (most:
            gave_back = frozenset() if error is None else given_back_ids(back)  # none pending)
            self.router.maybe_wake(tx, record.id, besides=gave_back)

    def _write_end(
        self,
        tx: Transition,
        record: AgentRecord,
        status: CompletionStatus,
        changes: dict[str, Any],
        span: str | None,
    ) -> AgentRecord:
        """Write the turn's end (``changes``, its ``state`` among them) in one record write,
        make its completion and route it; return the record written.

        A turn whose completion is not made yet stamps the record with how
        its generation ended (``History.ended``) and the receipt mark of a
        blocked host wait that takes it (:meth:`HostWaits.take_now`), in that write.
        """
        world = self.world
        tree = world.tree
        now = changes["updated_at"] = time.time()
        current: AgentRecord | None = _held(tree.agents, record.id)
        if current is None:  # a settled one's (or the caller's)
            current = tree.agents.get(record.id, record)
        generation = current.generation
        mine = _held(tree.completions, record.id)  # has_completion's looks, in C first
        ended = current.ended
        if (mine is not None and generation in mine) or (
            ended is not None and ended.generation == generation and tree.has_completion(current)
        ):  # made already: only the record changes
            record = world.update(record, **changes)
            self.router.emit_completion(tx, record, status, span=span)
            return record
        hosts = self.hosts
        taken = hosts.take_now(current) if record.id in hosts.host else None
        if taken is not None:
            changes.update(host_take(current, generation))
        changes["ended"] = GenerationEnd(
            generation=generation, state=changes["state"], at=now, span=span
        )
        # World.update's work on the ``current`` found above (updated_at given), inline.
        if record.id in tree.open_calls:  # a running agent's newer count rides along
            changes.setdefault("open_calls", tree.open_calls.pop(record.id))
        record = tree.put_agent(_replace(current, **changes))
        self.router.emit_completion(tx, record, status, span=span, ended=now, taken=taken)
        return record

    def expire(self, tx: Transition, command: ExpireTurn) -> None:
        """A turn ran past its profile's ``turn_timeout_s``: cancel it and settle it failed.

        A turn parked for approval that a reopen restored (no runner holds it)
        expires too: its pending requests are cancelled.
        """
        turn = command.sender
        record = self.world.tree.agents.get(turn.agent_id)
        if record is None or record.generation != turn.generation or record.state not in _LIVE:
            return  # it settled (or was interrupted) in time
        error = TurnError(f"{TURN_TIMEOUT}: turn exceeded {command.seconds:g} s", TURN_TIMEOUT)
        if not self.scheduler.is_current(turn.agent_id, turn.generation):
            if record.state is AgentState.AWAITING_APPROVAL:  # restored by a reopen: no runner
                self.finish_turn(tx, record, None, error)
            return
        why = TurnInterrupted(f"{record.path} ran past its turn_timeout_s")
        returned = self._cancel(tx, record, why, give_back=False)
        self.finish_turn(tx, record, None, error, returned=tuple(returned))

    def _cancel(
        self, tx: Transition, record: AgentRecord, why: TurnInterrupted, *, give_back: bool = True
    ) -> list[Event]:
        """Cancel a running turn, release it, and take back what it holds; return that.

        That is every input it was handed (unless a model turn's transcript
        stored them) and what its waits took: they are pending or unread
        again in this same transition (``give_back``; else the caller gives
        them back), so a turn cancelled by an interrupt, a close, a timeout
        or the runtime closing loses nothing it was handed.
        """
        handle = self.scheduler.turns.get(record.id)
        self.scheduler.cancel(tx, record)
        self._release(tx, record.id, why)
        back = [] if handle is None else take_held(handle, self._journal)
        if give_back:
            self.router.give_back(tx, record.id, back)
        return back

    def _release(self, tx: Transition, agent_id: str, why: TurnInterrupted) -> None:
        """Drop a turn's slot, handle, waiter, queued slot request, park and reservation."""
        self.scheduler.release(tx, agent_id, why)
        if agent_id in self.waiters.by_turn:  # (in C: a turn that ends waiting is rare)
            self.waiters.release(tx, agent_id, why)
        self.supervision.turn_ended(tx, agent_id, why)

    def detach(self, tx: Transition, record: AgentRecord) -> None:
        """The runtime closes under a turn parked for approval: stop it, keep the park.

        The agent stays ``awaiting_approval`` in the store with its requests
        pending; the next open carries the turn on once they are answered.
        """
        why = TurnInterrupted(f"{record.path}: the runtime closed while it awaited approval")
        self.scheduler.cancel(tx, record)
        self.scheduler.release(tx, record.id, why)
        self.waiters.release(tx, record.id, why)
        self.supervision.approvals.detach(record.id)

    # -- follow-ups and interrupts -----------------------------------------------------------

    def follow_up(self, tx: Transition, me: AgentRecord | None, command: FollowUp) -> AgentInfo:
        """Queue a follow-up turn for an idle agent.

        Raises:
            AgentBusy, AgentClosed, UnknownProfile, CompletionBacklogFull,
            MessageTooLarge, NotPermitted, UnknownAgent.
        """
        world = self.world
        record = world.target(me, command.ref, "follow up", command.field)
        task = check_text(command.task, "task")
        world.check_size(task, "task")
        return info_of(self._follow_up(tx, record, task, "follow_up"))

    def _follow_up(
        self, tx: Transition, record: AgentRecord, task: str, reason: str
    ) -> AgentRecord:
        world = self.world
        if record.state is AgentState.CLOSED:
            raise AgentClosed(f"{record.path} is closed", path=record.path)
        if record.state.busy:
            raise AgentBusy(
                f"{record.path} is {record.state}; wait for it or interrupt it", path=record.path
            )
        if record.profile not in world.profiles:
            raise UnknownProfile(
                f"{record.path} has profile {record.profile!r}, which this runtime does not define"
            )
        backlog = world.tree.undelivered.get(record.id, 0)
        cap = world.limits.pending_completions_per_agent
        if backlog >= cap:
            raise CompletionBacklogFull(
                f"{record.path} has {backlog} completions nobody received yet "
                f"(pending_completions_per_agent is {cap}); wait for them first",
                limit=cap,
                value=backlog,
                path=record.path,
            )
        return self.scheduler.queue_turn(tx, record, task, reason)

    def resume(self, tx: Transition, me: AgentRecord | None, command: Resume) -> AgentInfo:
        """Re-run an interrupted agent's task.

        Raises:
            AgentStateError: it is not interrupted. AgentClosed: it is closed.
        """
        record = self.world.target(me, command.ref, "resume", command.field)
        if record.state is not AgentState.INTERRUPTED:
            if record.state is AgentState.CLOSED:
                raise AgentClosed(f"{record.path} is closed", path=record.path)
            raise AgentStateError(
                f"{record.path} is {record.state}; only an interrupted agent can be resumed",
                path=record.path,
            )
        return info_of(self._follow_up(tx, record, record.task, "resume"))

    def interrupt(self, tx: Transition, me: AgentRecord | None, command: Interrupt) -> AgentInfo:
        """Cancel an agent's queued or running turn (an idle agent is left as it is).

        Raises:
            AgentClosed: it is closed.
        """
        record = self.world.target(me, command.ref, "interrupt", command.field)
        if record.state is AgentState.CLOSED:
            raise AgentClosed(f"{record.path} is closed", path=record.path)
        return info_of(self.interrupt_turn(tx, record))

    def interrupt_tree(
        self, tx: Transition, me: AgentRecord | None, command: InterruptTree
    ) -> list[AgentInfo]:
        """Interrupt the queued and running turns of an agent's live subtree, leaves first.

        Returns every live agent of the subtree in that order (idle ones as
        they are). None of them is woken by the others' interrupted
        completions; the subtree root's completion goes to its parent as
        for any interrupt.

        Raises:
            AgentClosed: the agent is closed. NotPermitted: a turn may only
            interrupt its own subtree.
        """
        record = self.world.target(me, command.ref, "interrupt", command.field)
        if record.state is AgentState.CLOSED:
            raise AgentClosed(f"{record.path} is closed", path=record.path)
        tree = self.world.tree
        order = tree.descendants_postorder(record.id)
        tx.closing_subtree = set(order)  # interrupted leaves wake none of their ancestors
        try:
            return [info_of(self.interrupt_turn(tx, tree.agents[i])) for i in order]
        finally:
            tx.closing_subtree = set()

    def interrupt_turn(self, tx: Transition, record: AgentRecord) -> AgentRecord:
        """Cancel ``record``'s queued or running turn: it settles ``interrupted``; return it.

        The completion's error says which: ``interrupted before execution``
        (it was queued, or a restart was pending) or ``interrupted`` (its
        runner ran; a turn parked for approval too, whose requests are
        cancelled).
        """
        ran = self._stop_turn(tx, record, TurnInterrupted(f"{record.path} was interrupted"))
        if ran is None:
            return record
        error = INTERRUPTED_RUNNING if ran else INTERRUPTED_QUEUED
        record = self.world.update(
            record,
            state=AgentState.INTERRUPTED,
            output=None,
            error=error,
            error_type=None,
            restart_due_at=None,
        )
        self.router.emit_completion(tx, record, CompletionStatus.INTERRUPTED)
        self.scheduler.pump(tx)
        return record

    def _stop_turn(self, tx: Transition, record: AgentRecord, why: TurnInterrupted) -> bool | None:
        """Stop ``record``'s queued, running, parked or restarting turn; return whether a
        runner ran it (None: the agent has no such turn)."""
        if record.state is AgentState.STARTING:
            self.scheduler.unqueue(record.id)
            return False
        if record.state in _LIVE:  # running, or parked for approval
            self._cancel(tx, record, why)
            return True
        if record.state is AgentState.RESTARTING:  # its next attempt never ran
            self.supervision.restarts.cancel(tx, record.id)
            return False
        return None

    def fail_turn(
        self, tx: Transition, agent_id: str, error: str, error_type: str = "InternalError"
    ) -> None:
        """End ``agent_id``'s turn ``failed`` with ``error``, whatever it was doing; no restart.

        The repair of a command that failed (:mod:`retinue.actors.supervisor._rescue`): the
        turn is stopped as an interrupt would stop it, and its one completion
        is routed as a failure's, waking its recipient as a failure would.
        """
        record = self.world.tree.agents.get(agent_id)
        if record is None:
            return
        why = TurnInterrupted(f"{record.path}: {error}")
        if self._stop_turn(tx, record, why) is None:
            return
        record = self.world.update(
            record,
            state=AgentState.FAILED,
            output=None,
            error=bounded_text(error, self.world.limits.output_max_bytes),
            error_type=error_type,
            restart_due_at=None,
        )
        self.router.emit_completion(tx, record, CompletionStatus.FAILED)
        self.scheduler.pump(tx)
        self.router.maybe_wake(tx, record.id)

    # -- closing --------------------------------------------------------------------------

    def close(self, tx: Transition, me: AgentRecord | None, command: Close) -> AgentInfo:
        """Close an agent without live children (interrupting its turn first).

        Raises:
            ActiveDescendants: it has live children. AgentClosed: already closed.
        """
        return info_of(self._close(tx, self.world.target(me, command.ref, "close", command.field)))

    def _close(self, tx: Transition, record: AgentRecord) -> AgentRecord:
        tree = self.world.tree
        if record.state is AgentState.CLOSED:
            raise AgentClosed(f"{record.path} is closed", path=record.path)
        live = tree.live_children(record.id)
        if live:
            raise ActiveDescendants(
                f"{record.path} has {len(live)} live children; close them first or use close_tree",
                path=record.path,
            )
        record = self.interrupt_turn(tx, record)
        if record.parent_id is None:  # its tree closes with it: no call of it is estimated
            self.supervision.admission.forget_tree(record.id)
        now = time.time()
        record = self.world.update(record, state=AgentState.CLOSED, closed_at=now, updated_at=now)
        tx.emit(AgentClosedEvent(agent_id=record.id, path=record.path, at=now))
        heir = tree.nearest_live_ancestor(record)
        for pending in tree.pending_for(record.id):
            self.router.reroute(tx, pending, heir)
        self.hosts.serve_host(tx, record.id)
        if record.parent_id is not None:
            self.waiters.child_closed(tx, record.parent_id, record)
        return record

    def close_tree(
        self, tx: Transition, me: AgentRecord | None, command: CloseTree
    ) -> list[AgentInfo]:
        """Close an agent's whole live subtree, children before parents.

        Raises:
            AgentClosed: it is already closed.
        """
        record = self.world.target(me, command.ref, "close", command.field)
        if record.state is AgentState.CLOSED:
            raise AgentClosed(f"{record.path} is closed", path=record.path)
        order = self.world.tree.descendants_postorder(record.id)
        tx.closing_subtree = set(order)  # a parent about to close is not woken
        try:
            return [info_of(self._close(tx, self.world.tree.agents[i])) for i in order]
        finally:
            tx.closing_subtree = set()
