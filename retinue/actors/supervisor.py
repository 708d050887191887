"""The supervisor: the one actor that owns the tree, enforces the caps and runs the turns.

:class:`Supervisor` composes small parts with one job each over one shared
:class:`~retinue.actors.core.World` (store, tree, profiles, limits, bus):

- :class:`~retinue.actors.spawning.Spawner`: every cap checked at spawn time;
- :class:`~retinue.actors.scheduler.Scheduler`: turn slots and turn starts;
- :class:`~retinue.actors.waiters.Waiters`: blocked turn waits;
- :class:`~retinue.actors.host_waits.HostWaits`: blocked host waits (agents and the inbox);
- :class:`~retinue.actors.mailboxes.Mailboxes`: messages and a starting turn's inbox;
- :class:`~retinue.actors.routing.Router`: completions and wakes;
- :class:`~retinue.actors.lifecycle.Lifecycle`: settles, follow-ups,
  interrupts and closes (the rules that span the parts);
- :class:`~retinue.actors.supervision.Supervision`: restart policies,
  approvals of tool calls and the admission of model calls under a budget.

It serves each typed command (:mod:`retinue.actors.commands`) in one
``match``; every command writes into its own
:class:`~retinue.actors.transition.Transition` (store writes, events, effects
after the commit). The transitions it served while its inbox had more go to
the store's writer as one group (group commit) and are answered once committed.
:class:`SupervisorActor` is its pykka shell, handling one command at a time
in arrival order.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Mapping
from typing import Any, assert_never

import pykka

from retinue.actors.commands import (
    AckLease,
    AdmitCall,
    Agents,
    Approvals,
    Approve,
    AwaitApproval,
    Barrier,
    Children,
    Close,
    CloseTree,
    Compact,
    CountBacklog,
    Deny,
    Envelope,
    ExpireApprovals,
    ExpireTurn,
    FireRestarts,
    FollowUp,
    Get,
    GiveBack,
    GiveUpWait,
    Host,
    HostMessages,
    Idle,
    Inspect,
    Interrupt,
    InterruptTree,
    Leases,
    LlmLoad,
    LlmStep,
    Rearm,
    ReleaseLease,
    Resume,
    RunMany,
    Send,
    Settle,
    Shutdown,
    Spawn,
    SpawnMany,
    SupervisorCommand,
    TurnRef,
    Wait,
)
from retinue.actors.compaction import CompactionReport, Retention, compact
from retinue.actors.core import World, agent_list, backlog_of, check_tail, detail_of, info_of
from retinue.actors.engine import Engine
from retinue.actors.events import EventBus
from retinue.actors.executor import Executor
from retinue.actors.host_waits import HostWaits
from retinue.actors.lifecycle import INTERRUPTED_QUEUED, INTERRUPTED_RUNNING, Lifecycle
from retinue.actors.mailboxes import Mailboxes
from retinue.actors.observer import Spans
from retinue.actors.profile import Profile
from retinue.actors.reply import Reply
from retinue.actors.routing import Router
from retinue.actors.scheduler import Scheduler
from retinue.actors.spawning import Spawner
from retinue.actors.supervision import Supervision
from retinue.actors.transition import Transition
from retinue.actors.tree import Tree
from retinue.actors.turn import Runner
from retinue.actors.waiters import Waiters
from retinue.errors import ArgumentTypeError, RetinueError, RuntimeClosed, TurnInterrupted
from retinue.persistence.store import Store
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, AgentState, CompletionStatus, Message, Usage
from retinue.protocol.records import AgentRecord

__all__ = ["Supervisor", "SupervisorActor", "info_of"]

log = logging.getLogger("retinue.supervisor")


class Supervisor:
    """The tree's one writer, composed of its parts. Supervisor thread only."""

    def __init__(
        self,
        *,
        store: Store,
        tree: Tree,
        profiles: Mapping[str, Profile],
        runners: Mapping[str, Runner],
        limits: Limits,
        bus: EventBus,
        engine: Engine,
        executor: Executor | None = None,
        spans: Spans | None = None,
    ) -> None:
        """Compose the parts over one world (``spans``: where its spans go, if it traces)."""
        self.world = World(
            store=store,
            tree=tree,
            profiles=profiles,
            runners=runners,
            limits=limits,
            bus=bus,
            engine=engine,
            executor=executor,
            spans=spans,
        )
        self.scheduler = Scheduler(self.world, inbox=self._inbox, start_failed=self._start_failed)
        self.waiters = Waiters(self.world, self.scheduler)
        self.hosts = HostWaits(self.world)
        self.mailboxes = Mailboxes(self.world, self.waiters, self.hosts)
        self.router = Router(self.world, self.scheduler, self.waiters, self.hosts)
        self.spawner = Spawner(self.world, self.scheduler)
        self.supervision = Supervision(self.world, self.scheduler, self.router)
        self.lifecycle = Lifecycle(
            self.world, self.scheduler, self.waiters, self.hosts, self.router, self.supervision
        )
        self.retention = Retention(limits)  # enforces retain_* counts as they are crossed
        self._group: list[tuple[Transition, SupervisorCommand]] = []  # served, not yet handed over

    @property
    def tree(self) -> Tree:
        """The tree this supervisor owns."""
        return self.world.tree

    # -- one command, one transition --------------------------------------------------

    def handle(self, envelope: Envelope, *, last: bool = True) -> None:
        """Serve one command; answer once its transition is committed.

        Transitions go to the store in groups: the group is handed over when
        ``last`` says no command waits behind this one (or the group is
        full), so the commands that queued meanwhile cross to the store's
        writer thread at once, and the supervisor serves on while it commits.
        """
        command = envelope.command
        world = self.world
        tx = Transition(envelope.reply, record_events=world.bus.active)
        tx.trace = envelope.trace
        try:
            if world.closing and not command.after_close:
                raise RuntimeClosed("the runtime is closing")
            tx.result = self.dispatch(tx, command)
            self.router.wake_drained(tx)
            self.hosts.end_idle_host_waits(tx)
            self.hosts.serve_idle(tx, last and self.supervision.quiet())
        except (RetinueError, TurnInterrupted) as exc:
            tx.result = exc
        except Exception as exc:  # a bug must answer the caller, not kill the supervisor
            log.exception("supervisor command %r failed", command)
            tx.result = exc
        tx.writes = world.tree.take_writes()
        self._group.append((tx, command))
        if last or len(self._group) >= world.store.max_group:
            self.commit()

    def commit(self) -> None:
        """Hand the transitions served since the last hand-off to the store as one group.

        Once it is committed, on the writer thread, their effects run and
        their callers are answered.
        """
        group, self._group = self._group, []
        if not group:
            return
        bus = self.world.bus
        items = [
            (tx.writes, lambda error, tx=tx, c=c: tx.on_commit(error, bus, c)) for tx, c in group
        ]
        try:
            self.world.store.submit_group(items)
        except RetinueError as exc:  # the store failed for good: say so, never hang
            for tx, command in group:
                tx.on_commit(exc, bus, command)

    def dispatch(self, tx: Transition, command: SupervisorCommand) -> Any:
        """Serve one command in ``tx``; return its answer (unused once deferred).

        The sender is resolved once, here: a command a stale turn may not send
        is refused before any handler runs.

        Raises:
            RetinueError: the command is refused (nothing changed).
            TurnInterrupted: its sending turn is no longer its agent's running turn.
        """
        world = self.world
        me = world.sender(command.sender) if command.live_sender else None
        match command:
            case Spawn():
                return self.spawner.spawn(tx, me, command)
            case SpawnMany():
                return self.spawner.spawn_many(tx, me, command.requests)
            case Send():
                return self.mailboxes.send(tx, me, command)
            case Wait(sender=Host()):
                return self.hosts.host_wait(tx, command)
            case Wait():
                return self.waiters.child_wait(tx, _turn(me), command)
            case RunMany():
                return self._run_many(tx, _turn(me), command)
            case GiveUpWait(sender=Host()):
                return self.hosts.give_up_host(command)
            case GiveUpWait(sender=TurnRef(agent_id=agent_id)):
                return self.waiters.give_up(tx, agent_id, command)
            case GiveUpWait():
                raise TypeError(f"a give-up from an unknown sender: {command!r}")
            case GiveBack(recipient_id=None):
                return self.hosts.give_back(tx, command.events)
            case GiveBack(recipient_id=str(agent_id)):
                return self.router.give_back(tx, agent_id, command.events)
            case GiveBack():
                raise TypeError(f"a give-back to an unknown recipient: {command!r}")
            case AckLease():
                return self.hosts.ack_lease(command.lease)
            case ReleaseLease():
                return self.hosts.release_lease(tx, command.lease)
            case Leases():
                return dict(world.tree.leases)
            case Settle():
                self.scheduler.runner_returned(tx, command.sender)
                return self.lifecycle.settle(tx, command)
            case ExpireTurn():
                return self.lifecycle.expire(tx, command)
            case FollowUp():
                return self.lifecycle.follow_up(tx, me, command)
            case Resume():
                return self.lifecycle.resume(tx, me, command)
            case Interrupt():
                return self.lifecycle.interrupt(tx, me, command)
            case InterruptTree():
                return self.lifecycle.interrupt_tree(tx, me, command)
            case HostMessages():
                return self.hosts.host_messages(tx)
            case Close():
                info = self.lifecycle.close(tx, me, command)
                self._retain()
                return info
            case CloseTree():
                infos = self.lifecycle.close_tree(tx, me, command)
                self._retain()
                return infos
            case Get():
                return info_of(world.find(me, command.ref, command.field))
            case Inspect():
                tail = check_tail(command.transcript_tail)
                record = world.find(me, command.ref, command.field)
                raw = world.store.get("transcripts", record.id.encode())
                return detail_of(world.tree, record, raw, tail)
            case Agents():
                return agent_list(world.tree, include_closed=command.include_closed)
            case CountBacklog():
                return backlog_of(world.tree)
            case Children():
                return self.children(_turn(me))
            case LlmLoad():
                return self.llm_load(_turn(me))
            case LlmStep():
                return self.llm_step(tx, _turn(me), command)
            case Compact():
                return self.compact()
            case Barrier():
                return None
            case Idle():
                return self.hosts.wait_idle(tx)
            case Shutdown():
                return self.shutdown(tx)
            case (
                FireRestarts()
                | Rearm()
                | AwaitApproval()
                | Approvals()
                | Approve()
                | Deny()
                | ExpireApprovals()
                | AdmitCall()
            ):
                return self.supervision.serve(tx, me, command)
            case _:
                assert_never(command)

    # -- waits ---------------------------------------------------------------------------

    def _run_many(self, tx: Transition, me: AgentRecord, command: RunMany) -> None:
        self.waiters.check_idle(me)  # before the spawns: a refused wait spawns nothing
        spawned = self.spawner.spawn_many(tx, me, command.requests)
        self.waiters.wait_for_batch(tx, self.world.tree.agents[me.id], spawned)

    # -- the scheduler's callbacks -------------------------------------------------------

    def _inbox(self, tx: Transition, record: AgentRecord) -> list[Message]:
        return self.mailboxes.inbox(tx, record)

    def _start_failed(self, tx: Transition, record: AgentRecord, error: str) -> None:
        self.lifecycle.finish_turn(tx, record, None, error, pump=False)

    # -- reads and upkeep -------------------------------------------------------------------

    def children(self, me: AgentRecord) -> list[AgentInfo]:
        """Return the sending turn's live children, oldest first."""
        tree = self.world.tree
        kids = [tree.agents[i] for i in tree.live_children(me.id)]
        return [info_of(r) for r in sorted(kids, key=lambda r: r.created_at)]

    def _retain(self) -> None:
        """Enforce the retention counts after a close (approvals of removed agents go too)."""
        now = time.time()
        if self.retention.enforce(self.world.tree, now) is not None:
            self.supervision.approvals.prune(now - self.world.limits.retain_age_s)

    def compact(self) -> CompactionReport:
        """Remove what retention no longer keeps, as one transition."""
        now = time.time()
        report = compact(self.world.tree, self.world.limits, now)
        self.supervision.approvals.prune(now - self.world.limits.retain_age_s)
        return report

    # -- LLM state: transcripts and usage ---------------------------------------------------

    def llm_load(self, me: AgentRecord) -> tuple[bytes | None, Usage, Usage]:
        """Return the sender's stored transcript, its usage and its tree's usage."""
        world = self.world
        raw = world.store.get("transcripts", me.id.encode())
        top = world.tree.agents[world.tree.top_of[me.id]]
        return raw, me.usage, top.tree_usage

    def llm_step(self, tx: Transition, me: AgentRecord, command: LlmStep) -> tuple[Usage, Usage]:
        """Add one model step's usage to the sender and its tree; store its transcript."""
        world = self.world
        tree = world.tree
        usage, transcript = command.usage, command.transcript
        if transcript is not None:
            tree.put_transcript(me.id, transcript)
        handle = self.scheduler.turns.get(me.id)
        if command.takes_input and handle is not None and handle.holds_input:
            handle.holds_input = False  # the turn's input is the transcript's now
            tree.consume_inputs(me.id, me.generation, handle.turn.messages)
        if transcript is not None and handle is not None:  # so are its waits' receipts
            stored = [event for held in handle.turn.handover.consume() for event in held]
            tree.consume_inputs(me.id, me.generation, stored)
        if usage != Usage():
            me = world.update(me, usage=me.usage.add(usage), updated_at=me.updated_at)
            top = tree.agents[tree.top_of[me.id]]
            world.update(top, tree_usage=top.tree_usage.add(usage), updated_at=top.updated_at)
            me = tree.agents[me.id]
        if command.ends_call:  # after the usage: what waits is admitted against the new totals
            self.supervision.admission.call_done(tx, me, usage)
        return me.usage, tree.agents[tree.top_of[me.id]].tree_usage

    # -- start and stop ------------------------------------------------------------------

    def recover(self) -> list[AgentRecord]:
        """Turn agents that were queued or running at the crash into ``interrupted``.

        Each gets its ``interrupted`` completion (unless the store already had
        it), and pending completions whose recipient is gone are rerouted.
        A turn whose restart policy answers ``lost`` is restarted instead (or
        given up on); a pending restart or approval stays as it was stored.
        Nothing is woken and no event is published. Returns the agents it
        interrupted; the writes stay in the tree for the caller to commit.
        """
        world = self.world
        tree = world.tree
        tx = Transition(Reply(), record_events=False)
        interrupted: list[AgentRecord] = []
        world.restoring = True
        for record in sorted(tree.agents.values(), key=lambda r: (r.depth, r.created_at)):
            if record.state.has_turn and not self.supervision.restarts.lost(tx, record):
                error = (
                    INTERRUPTED_QUEUED
                    if record.state is AgentState.STARTING
                    else INTERRUPTED_RUNNING
                )
                record = world.update(
                    record, state=AgentState.INTERRUPTED, output=None, error=error
                )
                self.router.emit_completion(tx, record, CompletionStatus.INTERRUPTED)
                interrupted.append(record)
        for key in list(tree.pending):
            if key and not tree.is_live(key):
                for pending in tree.pending_for(key):
                    # The recipient is closed or was not restored: its heir takes it.
                    origin = tree.agents.get(key) or tree.agents[pending.completion.agent_id]
                    self.router.reroute(tx, pending, tree.nearest_live_ancestor(origin))
        world.restoring = False
        return interrupted

    def shutdown(self, tx: Transition) -> list[tuple[str, pykka.ActorRef[Any]]]:
        """Interrupt every queued and running turn; return the actors still running, by agent.

        ``closing`` is set first, so no interrupt frees a slot for another turn
        or wakes a parent on the way out.
        """
        self.world.closing = True
        actors = self.scheduler.running_actors()
        for agent_id in self.scheduler.scheduled():
            record = self.world.tree.agents[agent_id]
            if record.state is AgentState.AWAITING_APPROVAL:
                self.lifecycle.detach(tx, record)  # the park stays in the store, pending
            elif record.state.busy:
                self.lifecycle.interrupt_turn(tx, record)
        self.hosts.fail_hosts(tx, RuntimeClosed("the runtime closed during the wait"))
        return actors


def _turn(me: AgentRecord | None) -> AgentRecord:
    """Return the sending turn's agent of a command only a running turn sends.

    Raises:
        ArgumentTypeError: the host sent it.
    """
    if me is None:
        raise ArgumentTypeError("only a running turn sends this command")
    return me


class SupervisorActor(pykka.ThreadingActor):
    """The pykka shell around :class:`Supervisor`: one command at a time, in arrival order."""

    use_daemon_thread = True

    def __init__(self, core: Supervisor) -> None:
        """Create the shell around ``core`` (recovered and committed already)."""
        super().__init__()
        self.core = core

    def on_receive(self, message: Any) -> Any:
        """Serve an :class:`Envelope`; anything else is a bug, logged and dropped."""
        if isinstance(message, Envelope):
            self.core.handle(message, last=self.actor_inbox.empty())
        else:
            log.error("the supervisor got a message that is not an Envelope: %r", message)
        return None

    def on_stop(self) -> None:
        """Commit what was served but not committed yet (nothing is left unanswered)."""
        self.core.commit()

    @staticmethod
    def _create_actor_inbox() -> Any:
        """A C-implemented queue: the supervisor's inbox is the runtime's busiest."""
        return queue.SimpleQueue()
