"""The supervisor: the one actor that owns the tree, enforces the caps and runs the turns.

:class:`Supervisor` composes small parts with one job each over one shared
:class:`~retinue.actors.supervisor._world.World` (store, tree, profiles, limits, bus):

- :class:`~retinue.actors.supervisor._spawning.Spawner`: every cap checked at spawn time;
- :class:`~retinue.actors.supervisor._forking.Forker`: forks, counted as spawns are;
- :class:`~retinue.actors.supervisor._scheduler.Scheduler`: turn slots and turn starts;
- :class:`~retinue.actors.supervisor._waiters.Waiters`: blocked turn waits;
- :class:`~retinue.actors.supervisor._host_waits.HostWaits`: blocked host waits (agents,
  the inbox);
- :class:`~retinue.actors.supervisor._mailboxes.Mailboxes`: messages and a starting turn's inbox;
- :class:`~retinue.actors.supervisor._routing.Router`: completions and wakes;
- :class:`~retinue.actors.supervisor._lifecycle.Lifecycle`: settles, follow-ups,
  interrupts and closes (the rules that span the parts);
- :class:`~retinue.actors.supervisor._supervision.Supervision`: restart policies,
  approvals of tool calls and the admission of model calls under a budget;
- :class:`~retinue.actors.supervisor._model_state.ModelState`: model turns' transcripts and usage;
- :class:`~retinue.actors.supervisor._upkeep.Upkeep`: retention and compaction.

It serves each typed command (:mod:`retinue.actors.commands`) in one
``match``; every command writes into its own
:class:`~retinue.actors.supervisor._transition.Transition` (store writes, events, effects
after the commit) and is one transaction: a handler that raises is rolled
back, memory included (:mod:`retinue.actors.tree._journal`), and a refused command
changes nothing; an unexpected exception is answered with
:class:`~retinue.errors.InternalError`, and a turn it would leave with nothing
to carry it on ends ``failed`` (:mod:`retinue.actors.supervisor._rescue`). The transitions
it served while its inbox had more go to the store's writer as one group (group commit,
:func:`~retinue.actors.supervisor._transition.hand_over`) and are answered once committed.
What a crash left is recovered before it serves
(:func:`~retinue.actors.supervisor._recovery.recover`);
:class:`~retinue.actors.supervisor._actor.SupervisorActor` is its pykka shell,
handling one command at a time in arrival order.

Timing: :attr:`Supervisor.on_command`, when set (:mod:`retinue.actors.supervisor._timings`
sets it for a metrics collector), is told each command's kind and how long
the supervisor spent on it (its handler, and the group's hand-off to the
store when it closes one). Unset, a command reads no clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, assert_never

import pykka

from retinue.actors import JList, Profile
from retinue.actors.admission import Admission
from retinue.actors.calls import Engine
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
    CountAgents,
    CountBacklog,
    Deny,
    Envelope,
    ExpireApprovals,
    ExpireTurn,
    FireRestarts,
    FollowUp,
    Fork,
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
    Run,
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
from retinue.actors.events import EventBus, Spans
from retinue.actors.supervisor._forking import Forker
from retinue.actors.supervisor._host_waits import HostWaits, host_waiter
from retinue.actors.supervisor._lifecycle import Lifecycle
from retinue.actors.supervisor._mailboxes import Mailboxes
from retinue.actors.supervisor._model_state import ModelState
from retinue.actors.supervisor._recovery import recover
from retinue.actors.supervisor._rescue import Rescue, internal_error
from retinue.actors.supervisor._routing import Router
from retinue.actors.supervisor._scheduler import Scheduler
from retinue.actors.supervisor._spawning import Spawner
from retinue.actors.supervisor._supervision import Supervision
from retinue.actors.supervisor._transition import Transition, hand_over
from retinue.actors.supervisor._upkeep import Upkeep
from retinue.actors.supervisor._waiters import Waiters
from retinue.actors.supervisor._world import (
    World,
    agent_list,
    backlog_of,
    check_tail,
    detail_of,
    info_of,
    sending_turn,
)
from retinue.actors.tree import Tree
from retinue.actors.turns import Executor, Runner
from retinue.errors import InvalidArgument, RetinueError, RuntimeClosed, TurnInterrupted
from retinue.persistence.store import Store
from retinue.protocol.details import AgentCounts
from retinue.protocol.failures import TurnError
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, AgentState, Completion, Message
from retinue.protocol.records import AgentRecord

__all__ = ["CommandTimer", "Supervisor"]

log = logging.getLogger("retinue.supervisor")

_held = dict.get  # a held agent's record, in C (AgentTable.get, a Python call, reads settled ones)
_RUNNING = AgentState.RUNNING  # a global: an enum member's lookup is a slow descriptor
_BUSY = frozenset({AgentState.STARTING, AgentState.RUNNING})
"""The states a spawn leaves its agent in when its first turn is queued or running."""

CommandTimer = Callable[[str, float], None]
"""Told a command's kind (its class name) and the seconds it took (see ``on_command``)."""


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
        admission: Admission | None = None,
    ) -> None:
        """Compose the parts over one world (``spans``: where its spans go, if it traces;
        ``admission``: the gate of model calls under provider limits)."""
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
            admission=admission,
        )
        self.scheduler = Scheduler(self.world, inbox=self._inbox, start_failed=self._start_failed)
        self.waiters = Waiters(self.world, self.scheduler)
        self.hosts = HostWaits(self.world)
        self.mailboxes = Mailboxes(self.world, self.waiters, self.hosts)
        self.router = Router(self.world, self.scheduler, self.waiters, self.hosts)
        self.spawner = Spawner(self.world, self.scheduler)
        self.forker = Forker(self.world, self.spawner)
        self.supervision = Supervision(self.world, self.scheduler, self.router)
        self.lifecycle = Lifecycle(
            self.world, self.scheduler, self.waiters, self.hosts, self.router, self.supervision
        )
        self.models = ModelState(self.world, self.scheduler, self.supervision.admission)
        self.upkeep = Upkeep(self.world, self.supervision.approvals)
        self.rescue = Rescue(
            self.world,
            self.scheduler,
            self.lifecycle,
            self.supervision,
            self.hosts,
            parts=(
                self.world,
                self.scheduler,
                self.waiters,
                self.hosts,
                self.mailboxes,
                self.router,
                self.spawner,
                self.forker,
                self.supervision,
                self.lifecycle,
                self.models,
                self.upkeep,
            ),
        )
        self._group: list[Transition] = []  # served, not yet handed over
        self._journal = self.world.journal  # the world's one journal, for good
        self.on_command: CommandTimer | None = None  # told each command's seconds, if set

    @property
    def tree(self) -> Tree:
        """The tree this supervisor owns."""
        return self.world.tree

    def release(self) -> None:
        """Forget the tree once the actor has stopped (see :meth:`World.release`)."""
        self.world.release()

    # -- one command, one transition --------------------------------------------------

    def handle(self, envelope: Envelope, *, last: bool = True) -> None:
        """Serve one command; answer once its transition is committed.

        Transitions go to the store in groups: the group is handed over when
        ``last`` says no command waits behind this one (or the group is
        full), so the commands that queued meanwhile cross to the store's
        writer thread at once, and the supervisor serves on while it commits.
        """
        timer = self.on_command  # the one check when nobody times commands
        began = time.perf_counter() if timer is not None else 0.0
        command = envelope.command
        world = self.world
        bus = world.bus
        tx = Transition(envelope.reply, bus, command, bus.active, envelope.trace)
        journal = self._journal
        if journal.fault is None:  # Journal.begin's whole work when no test's plan is armed
            journal.active = True
        else:
            journal.begin(type(command).__name__)
        before = self.rescue.picture() if journal.armed else None  # a test's injected fault
        try:
            if world.closing and not command.after_close:
                raise RuntimeClosed("the runtime is closing")
            tx.result = self.dispatch(tx, command)
            # The end of every command's transition; each part only when it has work
            # (nearly every command has none: one check each, no call).
            if tx.drained and self.router.held_wakes:  # only a held wake may follow a drain
                self.router.wake_drained(tx)
            if tx.idle_hosts:
                self.hosts.end_idle_host_waits(tx)
            if self.hosts.idle:
                self.hosts.serve_idle(tx, last and self.supervision.quiet())
            tree = world.tree
            tx.writes = tree.take_writes()
            if tree.spread:  # nearly every command: none (tx.spread is empty already)
                tx.spread = tree.take_spread()
            journal.keep()
        except (RetinueError, TurnInterrupted) as exc:  # refused: nothing changed
            self.rescue.roll_back(tx)
            tx.result = exc
        except Exception as exc:  # a bug: undone, answered, and no agent left stranded
            log.exception("supervisor command %r failed; it was rolled back", command)
            self.rescue.roll_back(tx)
            error = tx.result = internal_error(command, exc)
            exact = before is not None and before == self.rescue.picture()
            second = self.rescue.rescue(command, error, last=last)
            if before is not None:  # a test's fault: how it went, for the test to check
                self.rescue.faults.append((type(command).__name__, exact, self.rescue.rescued))
            if second is not None:  # the turns it stranded, ended failed: committed after it
                self._group.append(tx)
                tx = second
        except BaseException:
            self.rescue.roll_back(tx)
            raise
        group = self._group
        if last and not group:  # a group of this one transition (most commands): no list
            hand_over(world.store, (tx,))
        else:
            group.append(tx)
            if last or len(group) >= world.store.max_group:
                self.commit()
        if timer is not None:
            try:
                timer(type(command).__name__, time.perf_counter() - began)
            except Exception:  # a broken timer must not kill the supervisor
                log.exception("a command timer failed")

    def commit(self) -> None:
        """Hand the transitions served since the last hand-off to the store as one group.

        Once it is committed, on the writer thread, their effects run and
        their callers are answered.
        """
        group, self._group = self._group, []
        if group:
            hand_over(self.world.store, group)

    def dispatch(self, tx: Transition, command: SupervisorCommand) -> Any:
        """Serve one command in ``tx``; return its answer (unused once deferred).

        The sender is resolved once, here: a command a stale turn may not send
        is refused before any handler runs.

        Raises:
            RetinueError: the command is refused (nothing changed).
            TurnInterrupted: its sending turn is no longer its agent's running turn.
        """
        world = self.world
        # The busiest commands first, each one isinstance (a ``case`` below is one with its
        # pattern's machinery besides, and every case costs every later command one more).
        if isinstance(command, Settle):  # a turn's report of its end: served for a stale turn
            turn = command.sender
            self.scheduler.runner_returned(tx, turn)
            # The agent is looked up once for the step and the settle: a running agent's
            # record is held (in C; World.sender's look and check, without its call).
            record = _held(world.tree.agents, turn.agent_id)
            if command.step is None:  # a turn that made no model call (or a sync runner's)
                return self.lifecycle.settle(tx, command, None, record)
            if (
                record is None
                or record.generation != turn.generation
                or record.state is not _RUNNING
            ):
                return self.lifecycle.settle(tx, command, None, record)  # its step is dropped
            held: dict[str, Any] = {}  # the step's record changes, for the settle's write
            command = self.models.last_step(tx, command, record, held)
            # (The step may have written the record: the settle reads it again, in C.)
            return self.lifecycle.settle(tx, command, held, _held(world.tree.agents, turn.agent_id))
        me = world.sender(command.sender) if command.live_sender else None
        if isinstance(command, LlmStep):  # only a running turn sends it (no call to say so)
            return self.models.step(tx, sending_turn(me) if me is None else me, command)
        if isinstance(command, Run):
            return self._run(tx, me, command)
        if isinstance(command, Spawn):
            return self.spawner.spawn(tx, me, command)
        if isinstance(command, Wait) and me is None:  # the host's (a turn's has its record)
            return self.hosts.host_wait(tx, command)
        match command:  # the commands served most first (each case costs every later one a check)
            case SpawnMany():
                return self.spawner.spawn_many(tx, me, command.requests)
            case Fork():
                return self.forker.fork(tx, command)
            case Send():
                return self.mailboxes.send(tx, me, command)
            case Wait():
                return self.waiters.child_wait(tx, sending_turn(me), command)
            case RunMany():
                return self._run_many(tx, sending_turn(me), command)
            case GiveUpWait(sender=Host()):
                return self.hosts.give_up_host(tx, command)
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
                self.upkeep.after_close()
                return info
            case CloseTree():
                infos = self.lifecycle.close_tree(tx, me, command)
                self.upkeep.after_close()
                return infos
            case Get():
                return info_of(world.find(me, command.ref, command.field))
            case Inspect():
                tail = check_tail(command.transcript_tail)
                record = world.find(me, command.ref, command.field)
                raw = world.store.get("transcripts", record.id.encode())
                return detail_of(world.tree, record, raw, tail)
            case Agents():
                return agent_list(
                    world.tree,
                    include_closed=command.include_closed,
                    limit=command.limit,
                    after=command.after,
                    page_max=world.limits.agents_page_max,
                )
            case CountBacklog():
                return backlog_of(world.tree)
            case CountAgents():
                return AgentCounts(
                    by_state=dict(world.tree.state_counts),
                    live_by_profile=dict(world.tree.live_profiles),
                )
            case Children():
                return self.children(sending_turn(me))
            case LlmLoad():
                return self.models.load(sending_turn(me))
            case Compact():
                return self.upkeep.compact()
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

    def _run(self, tx: Transition, me: AgentRecord | None, command: Run) -> Completion | None:
        """Spawn as :meth:`Spawner.spawn` does and register the host's wait on the agent.

        Raises:
            InvalidArgument: a turn sent it (``run`` is the host's).
            RetinueError: what the spawn or the host's wait raises (nothing changed).
        """
        if me is not None:
            raise InvalidArgument("run is the host's call; a turn runs a child with run_many")
        info = self.spawner.spawn(tx, None, command)
        if command.lease is None and command.idempotency_key is None and info.state in _BUSY:
            # The agent this spawn made, its first turn queued or running: it has no
            # completion to serve and is not idle, so the wait is only registered (what
            # HostWaits.wait_on would find, without serving it or noting it idle).
            self.hosts.host[info.id] = JList(self._journal, (host_waiter(tx.defer()),))
            return None
        return self.hosts.wait_on(tx, info.id, command.lease, command.internal_lease)

    def _run_many(self, tx: Transition, me: AgentRecord, command: RunMany) -> None:
        self.waiters.check_idle(me)  # before the spawns: a refused wait spawns nothing
        spawned = self.spawner.spawn_many(tx, me, command.requests)
        me = self.world.tree.agents[me.id]
        self.waiters.wait_for_batch(tx, me, spawned, messages=command.messages)

    # -- the scheduler's callbacks -------------------------------------------------------

    def _inbox(self, tx: Transition, record: AgentRecord) -> list[Message]:
        return self.mailboxes.inbox(tx, record)

    def _start_failed(self, tx: Transition, record: AgentRecord, error: TurnError) -> None:
        self.lifecycle.finish_turn(tx, record, None, error, pump=False)

    # -- reads -------------------------------------------------------------------

    def children(self, me: AgentRecord) -> list[AgentInfo]:
        """Return the sending turn's live children, oldest first."""
        tree = self.world.tree
        kids = [tree.agents[i] for i in tree.live_children(me.id)]
        return [info_of(r) for r in sorted(kids, key=lambda r: r.created_at)]

    # -- start and stop ------------------------------------------------------------------

    def recover(self) -> list[AgentRecord]:
        """Recover what a crash left, before serving
        (:func:`~retinue.actors.supervisor._recovery.recover`)."""
        return recover(self.world, self.supervision.restarts, self.router)

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
