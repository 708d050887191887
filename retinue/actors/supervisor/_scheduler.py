"""The turn-slot scheduler: at most ``max_active_turns`` turns hold a slot, first come first served.

A queued turn (``starting``) waits for a slot; a turn back from a wait asks for
its slot again before anything else starts. The scheduler starts a turn by
marking its agent ``running``, gathering its inputs and handing the turn, after
the commit, to a fresh agent actor (a sync runner's) or to the runtime's loop as
a task (an async runner's, :class:`~retinue.actors.turns.LoopTurns`: no actor).
It knows nothing of routing: the inputs and a failed start go through the two
callbacks it is built with.

Turns run on the world's executors (a sync runner's actor on a pooled thread,
an async runner as a task on the runtime's loop): starting one starts no
thread. A sync runner that ignores its cancellation keeps its thread,
*abandoned*, until it returns; threads running sync runners never exceed
``max_active_turns + max_abandoned_runners``, so past it a sync turn waits as
``starting``. A profile's ``turn_timeout_s`` arms a timer on the executor's
loop that sends :class:`~retinue.actors.commands.ExpireTurn`
(:mod:`~retinue.actors.supervisor._deadlines`).

A starting turn takes its inputs (:mod:`~retinue.actors.supervisor._turn_inputs`): they
stay the turn's, tagged with its generation, until it completes.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import pykka

from retinue.actors import JDeque, JDict, Journaled, JSet
from retinue.actors.calls import handed_events
from retinue.actors.commands import LlmStarted, LlmStep, Settle, TurnRef
from retinue.actors.supervisor._deadlines import arm_deadline
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World, info_of, spawned_info
from retinue.actors.turns import AgentActor, LoopTurns, Report, Turn, TurnControl, turn_ref
from retinue.errors import TurnInterrupted
from retinue.protocol.failures import TurnError
from retinue.protocol.messages import (
    AgentState,
    Message,
    RunnerAbandoned,
    TurnQueued,
    TurnStarted,
)
from retinue.protocol.records import AgentRecord
from retinue.protocol.supervision import APPROVAL_REASON, SPAWN_REASON
from retinue.protocol.usage import Usage

__all__ = [
    "TURN_ENDED",
    "Inbox",
    "Scheduler",
    "SlotRequest",
    "StartFailed",
    "TurnHandle",
    "llm_started",
    "settle_of",
]

TURN_ENDED = "the turn ended"
"""Why a turn's waits and requests fail once it settled (a ``TurnInterrupted``'s text)."""


def _nothing_stored() -> None:
    """The stored transcript of an agent that has none yet (a spawn's turn reads no store)."""


# Frozen dataclasses made once per turn, built with their slots' own setters: their
# ``__init__`` sets each field through ``object.__setattr__`` (a global lookup and a call
# per field), several times the cost. What is built is the same object (equal, hashed
# alike; ``tests/actors/test_scheduler_builds.py`` checks it).
_new = object.__new__
_STARTED: Any = LlmStarted
_set_transcript = _STARTED.transcript.__set__
_set_usage = _STARTED.usage.__set__
_set_tree_usage = _STARTED.tree_usage.__set__
_SETTLE: Any = Settle
_set_sender = _SETTLE.sender.__set__
_set_output = _SETTLE.output.__set__
_set_error = _SETTLE.error.__set__
_set_trace = _SETTLE.trace.__set__
_set_step = _SETTLE.step.__set__
_make_turn = type.__call__  # Turn._create's own work (its metaclass refuses a plain call)
_new_tuple = tuple.__new__


def llm_started(
    transcript: Callable[[], bytes | None], usage: Usage, tree_usage: Usage
) -> LlmStarted:
    """Return ``LlmStarted(transcript, usage, tree_usage)`` (see ``_STARTED``)."""
    started = _new(LlmStarted)
    _set_transcript(started, transcript)
    _set_usage(started, usage)
    _set_tree_usage(started, tree_usage)
    return started


def settle_of(
    agent_id: str,
    generation: int,
    output: str | None,
    error: TurnError | None,
    trace: str | None,
    step: LlmStep | None,
) -> Settle:
    """Return ``Settle(TurnRef(agent_id, generation), output, error, trace, step)`` (see
    ``_STARTED``)."""
    command = _new(Settle)
    _set_sender(command, turn_ref(agent_id, generation))
    _set_output(command, output)
    _set_error(command, error)
    _set_trace(command, trace)
    _set_step(command, step)
    return command


# inbox(tx, record) -> the inputs of the turn that starts now, taken from the store.
Inbox = Callable[[Transition, AgentRecord], list[Message]]
# start_failed(tx, record, error): the turn could not start; settle it failed.
StartFailed = Callable[[Transition, AgentRecord, TurnError], None]


class TurnHandle(NamedTuple):
    """The supervisor's grip on a running turn: its generation, context and actor (None for
    an async runner's turn: a task on the runtime's loop, stopped by its cancellation).

    Immutable: a change is a new handle in :attr:`Scheduler.turns` (journaled). A named
    tuple, built in one call per turn (a frozen dataclass sets each field with
    ``object.__setattr__``).
    """

    generation: int
    turn: TurnControl  # the runner holds its Turn; the supervisor, the turn's control
    actor: pykka.ActorRef[Any] | None = None
    sync: bool = True  # a sync runner holds a pool thread until it returns
    # The turn still holds the inputs it started with: it gives them back unless it
    # completes, or its transcript stores them first (a model turn's LlmStep.takes_input).
    holds_input: bool = False


@dataclass(frozen=True)
class SlotRequest:
    """A turn back from a wait, queued for a slot; ``take(tx)`` claims its event."""

    agent_id: str
    future: concurrent.futures.Future[Any]
    take: Callable[[Transition], Any] | None


_NO_HANDLE = object()  # no handle was held (see _let_go)
_held_handle = dict.get  # the scheduler's own sets and dict, journaled by _let_go's entry
_set_handle = dict.__setitem__
_new_handle = dict.setdefault
_add = set.add
_discard = set.discard
_pop_handle = dict.pop


def _let_go(
    scheduler: Scheduler,
    agent_id: str,
    ran: tuple[str, int],
    handle: TurnHandle | object,
    was_active: bool,
    was_unreported: bool,
) -> None:
    """Undo a turn's start in :meth:`Scheduler._run`: its handle (``_NO_HANDLE``: none
    was held), its slot and its report to come, as they were."""
    if isinstance(handle, TurnHandle):
        dict.__setitem__(scheduler.turns, agent_id, handle)
    else:  # _NO_HANDLE
        dict.pop(scheduler.turns, agent_id, None)
    if not was_active:
        set.discard(scheduler.active, agent_id)
    if not was_unreported:
        set.discard(scheduler.unreported, ran)


def _hold_again(
    scheduler: Scheduler, agent_id: str, handle: TurnHandle | object, was_active: bool
) -> None:
    """Undo :meth:`Scheduler.release`: the turn's handle (``_NO_HANDLE``: none was held)
    and its slot, as they were."""
    if isinstance(handle, TurnHandle):
        dict.__setitem__(scheduler.turns, agent_id, handle)
    if was_active:
        set.add(scheduler.active, agent_id)


class Scheduler(Journaled):
    """Turn slots, the queue of starting turns, and the running turns' handles."""

    _config = frozenset({"world", "_order", "_loop_turns"})

    def __init__(self, world: World, *, inbox: Inbox, start_failed: StartFailed) -> None:
        """Schedule turns in ``world``; ``inbox`` and ``start_failed`` as above."""
        j = self._journal = world.journal
        self.world = world
        self._inbox = inbox
        self._start_failed = start_failed
        self.active: set[str] = JSet(j)
        # Queued turns, sync (False) and async (True) apart: (arrival order, agent id).
        self.queues: dict[bool, deque[tuple[int, str]]] = JDict(
            j, {False: JDeque(j), True: JDeque(j)}
        )
        self._order = itertools.count()  # numbers a rolled-back command took are skipped
        self.pending_turn: dict[str, tuple[str, str, int]] = JDict(j)  # id -> (task, reason, order)
        # The span that caused a queued turn (a follow-up's, a waking child's), for its link.
        self.causes: dict[str, str] = JDict(j)
        self.turns: dict[str, TurnHandle] = JDict(j)
        self.reacquire: deque[SlotRequest] = JDeque(j)
        self._settle = self._settle_teller()  # how every runner reports back
        # What starts each async profile's turns on the loop (made once: no command changes it).
        self._loop_turns: dict[str, LoopTurns] = {
            name: LoopTurns(
                world.runners[name],
                self._settle,
                world.limits.output_max_bytes,
                world.executor.loop,
                world.observer,
            )
            for name, is_async in world.runner_is_async.items()
            if is_async
        }
        # Sync turns cancelled while their runner still runs: (agent id, generation).
        self.abandoned: set[tuple[str, int]] = JSet(j)
        # Turns whose runner has not reported back yet (every runner reports, once).
        self.unreported: set[tuple[str, int]] = JSet(j)

    def input_stored(self, agent_id: str) -> None:
        """The running turn of ``agent_id`` stored its input (a model runner's transcript):
        a turn that ends from now on has nothing to give back."""
        handle = self.turns.get(agent_id)
        if handle is not None and handle.holds_input:
            self.turns[agent_id] = handle._replace(holds_input=False)

    def would_start(self, profile: str) -> bool:
        """Whether a turn of ``profile`` queued now would start at once (a slot and a thread)."""
        world = self.world
        if world.closing or self.reacquire:
            return False
        is_async = world.runner_is_async.get(profile, False)  # _is_async's lookup, once
        return (
            not self.queues[is_async]
            and len(self.active) < world.limits.max_active_turns
            and (is_async or self._threads_free())  # as _thread_free(profile)
        )

    def queue_turn(
        self, tx: Transition, record: AgentRecord, task: str, reason: str
    ) -> AgentRecord:
        """Start a new generation of an existing agent's ``record``; return it as stored.

        It runs at once if a slot is free, else it waits as ``starting``; the
        record is written once either way. It is a new task: its first attempt,
        whose ``reason`` is the task's ``origin``.
        """
        now = time.time()
        starts = self.would_start(record.profile)
        self.world.history.leave(tx, record)  # the generation it ends is kept on its own now
        record = self.world.update(
            record,
            state=AgentState.RUNNING if starts else AgentState.STARTING,
            generation=record.generation + 1,
            task=task,
            output=None,
            error=None,
            started_at=now if starts else record.started_at,
            updated_at=now,
            attempt=1,
            last_error=None,
            restart_due_at=None,
            restarts=(),
            error_type=None,
            restart=self.world.policies.get(record.profile, record.restart),
            lost=0,
            origin=reason,
        )
        return self.enqueue(tx, record, task, reason, start=starts)

    def enqueue(
        self,
        tx: Transition,
        record: AgentRecord,
        task: str,
        reason: str,
        *,
        start: bool,
        fresh: bool = False,
    ) -> AgentRecord:
        """Queue the turn of ``record`` (stored already); run it at once if ``start``.

        ``start`` is what :meth:`would_start` said as the record was made
        (``running`` then, else ``starting``). ``fresh``: the agent was made in
        this same command, so nothing can have been sent to it yet: a turn that
        starts now takes no inbox (a turn queued for later takes its inbox as it
        starts, as any).
        """
        if tx.record_events:  # no event built when nobody listens
            tx.emit(
                TurnQueued(
                    agent_id=record.id,
                    path=record.path,
                    at=record.updated_at,
                    generation=record.generation,
                )
            )
        if tx.trace is not None and tx.trace != record.trace:
            self.causes[record.id] = tx.trace
        if start:
            self._run(tx, record, task, reason, fresh=fresh)
        else:
            order = next(self._order)
            self.pending_turn[record.id] = (task, reason, order)
            self.queues[self._is_async(record.profile)].append((order, record.id))
            self.pump(tx)
        return self.world.tree.agents[record.id]

    def pump(self, tx: Transition) -> None:
        """Grant slots while some are free: waits coming back first, then queued turns.

        Sync and async turns queue apart, each first come first served: a sync
        turn that waits for a thread (abandoned runners hold them) holds back
        no async turn queued after it.
        """
        queues = self.queues
        if not self.reacquire and not queues[False] and not queues[True]:
            return  # nothing waits for a slot (most settles): no loop, no look at the queues
        cap = self.world.limits.max_active_turns
        while len(self.active) < cap and not self.world.closing:
            if self.reacquire:
                self._grant(tx, self.reacquire.popleft())
                continue
            agent_id = self._next_queued()
            if agent_id is None:
                return
            self._start_turn(tx, agent_id)

    def _next_queued(self) -> str | None:
        """Take the oldest queued turn that may start now (None: none may)."""
        heads: list[tuple[int, bool]] = []
        for is_async, queue in self.queues.items():
            while queue and self._stale(*queue[0]):
                queue.popleft()  # interrupted while queued
            if queue and (is_async or self._threads_free()):
                heads.append((queue[0][0], is_async))
        if not heads:
            return None
        _, is_async = min(heads)
        return self.queues[is_async].popleft()[1]

    def _stale(self, order: int, agent_id: str) -> bool:
        """Whether a queue entry is no longer its agent's queued turn."""
        pending = self.pending_turn.get(agent_id)
        return pending is None or pending[2] != order

    def _is_async(self, profile: str) -> bool:
        return self.world.runner_is_async.get(profile, False)

    def _thread_free(self, profile: str) -> bool:
        """Whether a turn of ``profile`` may start: async turns hold no thread."""
        return self._is_async(profile) or self._threads_free()

    def _threads_free(self) -> bool:
        """Whether a sync turn may start: turns running plus abandoned runners stay
        below ``max_active_turns + max_abandoned_runners``."""
        if not self.abandoned:
            return True
        limits = self.world.limits
        ceiling = limits.max_active_turns + limits.max_abandoned_runners
        return len(self.active) + len(self.abandoned) < ceiling

    def _start_turn(self, tx: Transition, agent_id: str) -> None:
        """Start a queued turn: its agent becomes ``running`` (a turn carried on after a
        park keeps the time it first started: its deadline counts from then)."""
        task, reason, _ = self.pending_turn.pop(agent_id)
        now = time.time()
        world = self.world
        record = world.tree.agents[agent_id]
        started = record.started_at if reason == APPROVAL_REASON else now
        record = world.update(record, state=AgentState.RUNNING, started_at=started, updated_at=now)
        self._run(tx, record, task, reason)

    def _run(
        self, tx: Transition, record: AgentRecord, task: str, reason: str, *, fresh: bool = False
    ) -> None:
        """Hand the turn of a ``running`` record to a fresh actor or the loop after the commit;
        ``fresh``: the agent was made in this command (see :meth:`enqueue`), its inbox empty."""
        world = self.world
        agent_id = record.id
        is_async = world.runner_is_async.get(record.profile, False)  # _is_async's, once
        actor: pykka.ActorRef[Any] | None = None  # an async runner's turn: a task, no actor
        if not is_async:
            try:
                actor = AgentActor.start(
                    world.runners[record.profile],
                    self._settle,
                    world.limits.output_max_bytes,
                    world.executor,
                    world.observer,
                )
            except Exception as exc:  # thread ceiling: the turn fails, its inputs stay unread
                text = f"{type(exc).__name__}: cannot start an actor for the turn: {exc}"
                self._start_failed(tx, record, TurnError(text, type(exc).__name__))
                return
            tx.start(actor)
        profile = world.profiles[record.profile]
        turn = TurnControl(  # positional (see TurnControl.__init__)
            world.engine,
            spawned_info(record) if fresh else info_of(record),  # agent
            task,
            [] if fresh else self._inbox(tx, record),  # messages
            reason,
            world.limits,
            profile,
            True,  # keeps_receipts
            record.origin,
        )
        # Not set again: what a turn starts with (its agent as root, TurnControl's defaults).
        root_id = agent_id
        if record.parent_id is not None:
            root_id = turn.root_id = world.tree.top_of.get(agent_id, agent_id)
        if world.admission is not None:
            turn.admission = world.admission
        if record.profile in world.model_runners:  # a model runner's load, without a round trip
            turn.llm_state = llm_started(
                # a spawn's turn is its agent's first: nothing has stored a transcript yet
                _nothing_stored
                if reason == SPAWN_REASON
                else partial(world.store.get, "transcripts", agent_id.encode()),
                record.usage,
                record.tree_usage if root_id == agent_id else world.tree.agents[root_id].tree_usage,
            )
        if world.observer.spans is not None:
            if record.trace is not None:
                turn.trace = record.trace
            causes = self.causes  # (checked in C: an absent key costs no call)
            if agent_id in causes:
                turn.cause = causes.pop(agent_id)
            elif record.forked_from is not None:  # a fork's first turn links to its origin's
                forked = record.forked_from
                if (record.generation, record.attempt) == (forked.generation + 1, 1):
                    turn.cause = forked.trace
        # TurnHandle(...) as its tuple (the named tuple's __new__ is a Python function).
        handle = _new_tuple(
            TurnHandle, (record.generation, turn, actor, not is_async, bool(turn.messages))
        )
        self._hold(agent_id, handle)
        if tx.record_events:  # no event built when nobody listens
            tx.emit(
                TurnStarted(
                    agent_id=agent_id,
                    path=record.path,
                    at=record.updated_at,
                    generation=record.generation,
                )
            )
        face = _make_turn(Turn, turn)  # what the runner sees (Turn._create(turn), inline)
        start = self._loop_turns[record.profile].start if actor is None else actor.tell
        tx.after(partial(start, face))  # a failed or rolled back command drops it: never runs
        if profile.turn_timeout_s is not None:  # arm_deadline's own first check, without its call
            arm_deadline(world, tx, record, from_start=reason == APPROVAL_REASON)

    def _hold(self, agent_id: str, handle: TurnHandle) -> None:
        """Hold a started turn's ``handle``, its slot and its report to come (undone by one
        journal entry, :func:`_let_go`)."""
        turns, active, unreported = self.turns, self.active, self.unreported
        ran = (agent_id, handle.generation)
        journal = self._journal
        if journal.active:
            was = (_held_handle(turns, agent_id, _NO_HANDLE), agent_id in active, ran in unreported)
            journal.log((_let_go, (self, agent_id, ran, *was)))
        if _new_handle(turns, agent_id, handle) is not handle:  # (setdefault: no slot wrapper)
            _set_handle(turns, agent_id, handle)  # a handle held already (nearly never)
        _add(active, agent_id)
        _add(unreported, ran)

    def _settle_teller(self) -> Report:
        engine = self.world.engine

        def settle(
            agent_id: str,
            generation: int,
            output: str | None,
            error: TurnError | None,
            trace: str | None,
            step: LlmStep | None,
        ) -> None:
            # Refused only once the runtime closed, which interrupted the turn already.
            engine.tell(settle_of(agent_id, generation, output, error, trace, step))

        return settle

    def is_current(self, agent_id: str, generation: int) -> bool:
        """True if ``generation`` is the agent's running turn."""
        handle = self.turns.get(agent_id)
        return handle is not None and handle.generation == generation

    def request_slot(self, tx: Transition, request: SlotRequest) -> None:
        """Give a turn back from a wait its slot now, or queue it ahead of new turns."""
        if len(self.active) < self.world.limits.max_active_turns:
            self._grant(tx, request)
        else:
            self.reacquire.append(request)

    def _grant(self, tx: Transition, request: SlotRequest) -> None:
        self.active.add(request.agent_id)
        value = None if request.take is None else request.take(tx)
        future = request.future
        self.hand(request.agent_id, future, value)
        tx.answer(future, value)

    def hand(self, agent_id: str, future: concurrent.futures.Future[Any], value: Any) -> None:
        """Tell the running turn of ``agent_id`` that ``value`` (events) was taken for it.

        Until its runner receives it, a cancel of the turn takes it back
        (the turn's :class:`~retinue.actors.calls._handover.Handover`).
        """
        handle = self.turns.get(agent_id)
        events = handed_events(value)
        if handle is not None and events:
            handle.turn.handover.hand(future, events, self._journal)

    def yield_slot(self, tx: Transition, agent_id: str) -> None:
        """A turn starts waiting: its slot goes to others meanwhile."""
        self.active.discard(agent_id)
        self.pump(tx)

    def release(self, tx: Transition, agent_id: str, why: TurnInterrupted | None) -> None:
        """Drop a turn's slot, handle and queued slot request (failed with ``why``; None:
        with ``TurnInterrupted(TURN_ENDED)``, made only if a request is queued)."""
        turns, active = self.turns, self.active
        handle = _held_handle(turns, agent_id, _NO_HANDLE)
        was_active = agent_id in active
        journal = self._journal
        if journal.active and (was_active or handle is not _NO_HANDLE):  # one entry for both
            journal.log((_hold_again, (self, agent_id, handle, was_active)))
        _pop_handle(turns, agent_id, None)
        _discard(active, agent_id)
        if self.reacquire and any(r.agent_id == agent_id for r in self.reacquire):
            if why is None:
                why = TurnInterrupted(TURN_ENDED)
            for request in self.reacquire:
                if request.agent_id == agent_id:  # its event stays pending
                    tx.answer(request.future, why)
            self.reacquire = JDeque(
                self._journal, (r for r in self.reacquire if r.agent_id != agent_id)
            )

    def unqueue(self, agent_id: str) -> None:
        """Forget a queued turn that has not started (its queue entry is dropped when reached)."""
        self.pending_turn.pop(agent_id, None)
        self.causes.pop(agent_id, None)

    def cancel(self, tx: Transition, record: AgentRecord) -> TurnControl | None:
        """Cancel a running turn: set ``turn.cancelled`` and cancel an async turn's task.

        Returns the cancelled turn (None if none runs): the caller gives back
        what its runner never saw (``turn.runner_started`` is final now). A
        sync runner still running keeps its thread: it is counted as
        abandoned (and announced) until its late settle arrives.
        """
        handle = self.turns.get(record.id)
        if handle is None:
            return None
        started = handle.turn.cancel(self._journal)
        if started and handle.sync and not handle.turn.runner_returned:
            self.abandoned.add((record.id, handle.generation))
            tx.emit(
                RunnerAbandoned(
                    agent_id=record.id,
                    path=record.path,
                    at=time.time(),
                    generation=handle.generation,
                    abandoned=len(self.abandoned),
                )
            )
        return handle.turn

    def runner_returned(self, tx: Transition, turn: TurnRef) -> None:
        """A runner reported back: an abandoned one frees its thread for a waiting turn."""
        ran, unreported = (turn.agent_id, turn.generation), self.unreported
        if ran in unreported:  # JSet.discard's work, without its frame
            journal = self._journal
            if journal.active:
                journal.log((_add, (unreported, ran)))
            set.discard(unreported, ran)
        if self.abandoned and (turn.agent_id, turn.generation) in self.abandoned:
            self.abandoned.discard((turn.agent_id, turn.generation))
            self.pump(tx)

    def quiet(self) -> bool:
        """True when no turn is queued or running and every runner has reported back."""
        return not (self.pending_turn or self.turns or self.reacquire or self.unreported)

    def running_actors(self) -> list[tuple[str, pykka.ActorRef[Any]]]:
        """Return the actors of the running turns, by agent id."""
        return [(i, h.actor) for i, h in self.turns.items() if h.actor is not None]

    def scheduled(self) -> list[str]:
        """Return the agents with a queued or running turn (queued first, in arrival order)."""
        queued = sorted(entry for queue in self.queues.values() for entry in queue)
        return [i for order, i in queued if not self._stale(order, i)] + list(self.turns)
