"""One command's transition: its store writes, events, after-commit effects and answer.

The supervisor makes a :class:`Transition` per command and hands it to every
part that serves the command; the parts add what the command changes (the
tree gathers the store writes) instead of resetting shared fields on every
call. Once the handler returns, the writes go to the store as one
transition; when the store says they are committed, the events are published,
the caller is answered (unless the answer was deferred to a waiter) and the
effects run (start a runner, answer a waiter). The events come before the
effects, so whatever a started runner publishes comes after them; the answer
too, so a host learns of its spawn before the spawned turn is handed over.
:func:`hand_over` gives the store's writer the transitions the supervisor
served since its last hand-off, as one group (group commit).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import msgspec
import pykka

from retinue.actors.events import EventBus
from retinue.errors import RetinueError, StoreCorrupted, StoreError
from retinue.persistence.commits import Queued
from retinue.persistence.store import Store, Write
from retinue.protocol.messages import Event

__all__ = ["Transition", "hand_over", "resolve_future"]

log = logging.getLogger("retinue.supervisor")

_NONE: frozenset[str] = frozenset()


def resolve_future(future: concurrent.futures.Future[Any], value: Any) -> None:
    """Answer ``future`` with ``value`` (an exception is raised to the waiter), at most once.

    A future answered (or cancelled) already refuses the answer with
    ``InvalidStateError``, which is ignored: no ``done()`` call first.
    """
    try:
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)
    except concurrent.futures.InvalidStateError:
        pass


class Transition(msgspec.Struct, eq=False):
    """What one command did, committed as one store transition. Supervisor thread only.

    A msgspec struct, not a class with an ``__init__``: the supervisor makes one per
    command, and a struct is built in C (a Python ``__init__`` setting its sixteen
    fields cost about 1,600 instructions more per command). It compares by identity.
    Built as ``Transition(reply, bus, what, record_events, trace)``: positional
    arguments, as a keyword builds a dict per call.

    What nearly every command leaves empty starts as a shared empty tuple (or
    frozenset), made a list (or set) by the first :meth:`after`, :meth:`answer`,
    :meth:`emit`, :meth:`start`, :meth:`drain` or :meth:`idle_host` (or replaced:
    ``writes``, ``spread``, ``closing_subtree``): nine containers fewer to build per
    command.

    Attributes:
        reply: the future the command's caller waits on.
        bus: where its events are published once committed.
        what: what it serves (its command: named if an effect fails).
        record_events: whether :meth:`emit` keeps events (someone listens on ``bus``).
        trace: the span that caused this command (W3C ``traceparent``; None when
            the runtime traces nothing): stored with the agents it spawns, a
            link of the turns it starts.
        result: the answer (an exception is raised to the caller).
        deferred: True once a waiter holds ``reply``; ``result`` is then not sent.
        writes: the store writes, set when the command is submitted.
        spread: a compaction's deletes, committed after ``writes`` in small
            transactions of their own (see :mod:`retinue.persistence.writer`).
        events: events published after the commit.
        effects: callables run after the commit, in order.
        answers: other callers' futures an effect answers (failed if the commit fails).
        started: agent actors started for turns (stopped if the commit fails).
        drained: agents whose completion backlog shrank (they may wake).
        closing_subtree: agents a close_tree is closing (none of them is woken).
        idle_hosts: agents with host waits left unanswered; once the command is
            done, those waits end with ``NothingToWaitFor`` if the agent is idle.
    """

    reply: concurrent.futures.Future[Any]
    bus: EventBus
    what: object
    record_events: bool
    trace: str | None = None
    result: Any = None
    deferred: bool = False
    writes: Sequence[Write] = ()
    spread: Sequence[Write] = ()
    events: list[Event] | tuple[()] = ()
    effects: list[Callable[[], None]] | tuple[()] = ()
    answers: list[concurrent.futures.Future[Any]] | tuple[()] = ()
    started: list[pykka.ActorRef[Any]] | tuple[()] = ()
    drained: set[str] | frozenset[str] = _NONE
    closing_subtree: AbstractSet[str] = _NONE
    idle_hosts: set[str] | frozenset[str] = _NONE

    def after(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` once the transition is committed."""
        effects = self.effects
        if isinstance(effects, list):
            effects.append(effect)
        else:
            self.effects = [effect]

    def answer(self, future: concurrent.futures.Future[Any], value: Any) -> None:
        """Answer another caller's ``future`` with ``value`` once committed.

        An exception ``value`` is raised to that caller. If the commit fails,
        that caller gets the failure instead: a waiter whose answer this
        transition took must never wait for an answer that cannot come.
        """
        answers = self.answers
        if isinstance(answers, list):
            answers.append(future)
        else:
            self.answers = [future]
        self.after(lambda: resolve_future(future, value))

    def start(self, actor: pykka.ActorRef[Any]) -> None:
        """Note ``actor``, started for a turn: stopped if the transition fails."""
        started = self.started
        if isinstance(started, list):
            started.append(actor)
        else:
            self.started = [actor]

    def drain(self, agent_id: str) -> None:
        """Note that ``agent_id``'s completion backlog shrank (it may wake)."""
        drained = self.drained
        if isinstance(drained, set):
            drained.add(agent_id)
        else:
            self.drained = {agent_id}

    def idle_host(self, agent_id: str) -> None:
        """Note host waits on ``agent_id`` left unanswered (ended once the command is done
        if the agent is idle then)."""
        idle = self.idle_hosts
        if isinstance(idle, set):
            idle.add(agent_id)
        else:
            self.idle_hosts = {agent_id}

    def emit(self, event: Event) -> None:
        """Publish ``event`` once the transition is committed (if anyone listens)."""
        if self.record_events:
            events = self.events
            if isinstance(events, list):
                events.append(event)
            else:
                self.events = [event]

    def discard(self) -> None:
        """Drop everything the command did (it failed and was rolled back): its writes,
        events, effects and other callers' answers; stop the actors it started."""
        for actor in self.started:  # their turns were never recorded
            actor.stop()
        self.started = ()
        self.writes = ()
        self.spread = ()
        self.events = ()
        self.effects = ()
        self.answers = ()
        self.deferred = False
        self.drained = _NONE
        self.idle_hosts = _NONE

    def defer(self) -> concurrent.futures.Future[Any]:
        """Hand the reply to a waiter: the commit will not answer it; return it."""
        self.deferred = True
        return self.reply

    def committed(self, error: BaseException | None) -> None:
        """Finish after the store answered: publish, reply, run effects; or fail the caller.

        The store's writer calls it (the transition is its queued item,
        :class:`~retinue.persistence.commits.Queued`: no callback built per transition).
        """
        if error is not None:
            for actor in self.started:  # their turns were never recorded
                actor.stop()
            # A damaged store stays StoreCorrupted for the caller (with the path).
            failure = StoreCorrupted if isinstance(error, StoreCorrupted) else StoreError
            path = error.path if isinstance(error, StoreError) else None
            failed = failure(f"the store could not commit: {error}", path=path)
            resolve_future(self.reply, failed)
            for future in self.answers:
                resolve_future(future, failed)
            return
        # Events first: a turn's runner starts in an effect, and what it publishes
        # live (tool and model calls) must follow its turn_started.
        if self.events:
            self.bus.publish(self.events)
        # The caller's answer before the effects: the commit is durable already, and a
        # host that spawned learns of it (and sends its wait) before the turn it started
        # is handed to the runtime loop, so the turn's completion finds the wait there
        # instead of being stored in the host's mailbox and taken by another command.
        if not self.deferred:  # as resolve_future, inline: one frame less per answer
            result = self.result
            try:
                if isinstance(result, BaseException):
                    self.reply.set_exception(result)
                else:
                    self.reply.set_result(result)
            except concurrent.futures.InvalidStateError:
                pass
        effects = self.effects
        if effects:  # nearly every step: none (no iterator built over the empty tuple)
            for effect in effects:
                try:
                    effect()
                except Exception:  # one broken effect must not starve the others
                    log.exception("an after-commit effect of %r failed", self.what)


def hand_over(store: Store, group: Sequence[Transition]) -> None:
    """Hand ``group``'s transitions to the store's writer as one group.

    Once it is committed, on the writer thread, their effects run and their
    callers are answered, in order. If the store has failed for good, each
    caller is answered with the failure now: nobody hangs. A transition that
    changed nothing but a waiter's registration is not handed over (its
    waiter is answered by the transition that answers the wait; if the store
    has failed, that transition's failure answers it).
    """
    # Each transition is the writer's item as it is (Transition.committed). One that only
    # handed its reply to a waiter (a wait registered, nothing else changed: no write,
    # event or effect) has nothing to commit and nobody to answer: it stays here, and a
    # group of only such wakes the writer not at all.
    if len(group) == 1:  # nearly every group: its one transition, with no comprehension
        tx = group[0]
        keep = not tx.deferred or tx.writes or tx.spread or tx.events or tx.effects or tx.started
        items: list[Queued] = [tx] if keep else []
    else:
        items = [
            tx
            for tx in group
            if not tx.deferred or tx.writes or tx.spread or tx.events or tx.effects or tx.started
        ]
    if not items:
        return
    try:
        store.submit_queued(items)
    except RetinueError as exc:  # the store failed for good: say so, never hang
        for item in items:  # each transition's own answer, as the writer would give it
            item.committed(exc)
