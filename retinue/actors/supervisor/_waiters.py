"""Turn waits: a turn blocked in ``wait`` on one child, or in ``run_many`` on a batch.

A turn waits for the next event from one child (a message it sent, or its
completion), or for the completions of a batch of children at once; one
wait at a time. Meanwhile it gives its turn slot to others, and takes the
events only once it has a slot again, so an interrupt in between loses
nothing. Every event taken for a turn is handed to it (``Scheduler.hand``, into the
turn's handover ledger) until
its runner receives it, so a cancel can take back what no runner saw.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from retinue.actors import JDict, Journaled, claim
from retinue.actors.calls import timed_out
from retinue.actors.commands import GiveUpWait, Wait, WaitKind
from retinue.actors.supervisor._scheduler import Scheduler, SlotRequest
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World
from retinue.errors import (
    AgentBusy,
    AgentClosed,
    NotPermitted,
    RetinueError,
    TurnInterrupted,
)
from retinue.protocol.messages import AgentInfo, AgentState, Completion, Message
from retinue.protocol.records import AgentRecord, CompletionRecord

__all__ = ["BatchWait", "ChildWait", "Waiters"]


@dataclass(frozen=True, slots=True)
class ChildWait:
    """A turn blocked in ``wait`` on its child ``child_id`` (one at a time per turn).

    ``kind`` is ``"completion"`` (only the child's completion) or ``"any"``
    (a message the child sent, or its completion).
    """

    child_id: str
    kind: WaitKind
    future: concurrent.futures.Future[Any]

    def wants(self, child_id: str) -> bool:
        """True if an event from ``child_id`` answers this wait."""
        return child_id == self.child_id


@dataclass(frozen=True, slots=True)
class BatchWait:
    """A turn blocked in ``run_many`` on all its batch at once.

    ``entries`` follow the batch's requests: a child's id, or the error that
    refused its spawn (it keeps its place in the answer).
    """

    entries: tuple[str | RetinueError, ...]
    future: concurrent.futures.Future[Any]
    messages: bool = False  # also take the messages its children sent (see RunMany)

    @property
    def children(self) -> list[str]:
        """The ids of the batch's children, in request order."""
        return [entry for entry in self.entries if isinstance(entry, str)]

    def wants(self, child_id: str) -> bool:
        """True if ``child_id`` is one of the batch."""
        return child_id in self.entries


Waiter = ChildWait | BatchWait


def _closed(what: str) -> AgentClosed:
    """The error of a wait on ``what``, closed with nothing left for its parent."""
    return AgentClosed(f"{what} was closed while its parent waited on it", path=what)


class Waiters(Journaled):
    """Every blocked turn wait, and how each one is answered."""

    def __init__(self, world: World, scheduler: Scheduler) -> None:
        """Keep the turns' waits on ``world``; a turn's slot comes from ``scheduler``."""
        self._journal = world.journal
        self.world = world
        self.scheduler = scheduler
        self.by_turn: dict[str, Waiter] = JDict(world.journal)  # agent id -> its turn's wait

    # -- turns ---------------------------------------------------------------------

    def child_wait(self, tx: Transition, me: AgentRecord, command: Wait) -> None:
        """Answer a turn's wait with the next event from its child, or register it.

        Raises:
            NotPermitted: ``ref`` is not the turn's child.
            AgentBusy: the turn already waits on a child.
            AgentClosed: the child is closed and has nothing left for it.
        """
        child = self.world.find(me, command.ref, command.field)
        if child.parent_id != me.id:
            raise NotPermitted(f"{me.path} may only wait on its own children, not {child.path}")
        self.check_idle(me)
        take = self._next_event(tx, me, child, command.kind)
        if take is not None:
            self._claim(tx, me.id, tx.defer(), take)
            return
        if child.state is AgentState.CLOSED:
            raise AgentClosed(f"{child.path} is closed", path=child.path)
        self.by_turn[me.id] = ChildWait(child.id, command.kind, tx.defer())
        self.scheduler.yield_slot(tx, me.id)  # a waiting turn gives its slot to others

    def wait_for_batch(
        self,
        tx: Transition,
        me: AgentRecord,
        spawned: list[AgentInfo | RetinueError],
        *,
        messages: bool = False,
    ) -> None:
        """Register the turn's wait for the batch it just spawned, or answer it at once
        (``messages``: see :class:`~retinue.actors.commands.RunMany`).

        Raises:
            AgentBusy: the turn already waits.
        """
        self.check_idle(me)
        entries = tuple(e if isinstance(e, RetinueError) else e.id for e in spawned)
        waiter = BatchWait(entries, tx.defer(), messages)
        if self._batch_done(me.id, waiter):  # every spawn was refused
            self._claim(tx, me.id, waiter.future, self._take_batch(me.id, waiter))
            return
        self.by_turn[me.id] = waiter
        self.scheduler.yield_slot(tx, me.id)  # a waiting turn gives its slot to others

    def check_idle(self, me: AgentRecord) -> None:
        """Raise AgentBusy if the turn of ``me`` already waits."""
        current = self.by_turn.get(me.id)
        if current is None:
            return
        if isinstance(current, ChildWait):
            on = self.world.tree.agents[current.child_id].path
        else:
            on = f"a batch of {len(current.children)} children"
        raise AgentBusy(
            f"{me.path} already waits on {on}; a turn waits on one thing at a time", path=me.path
        )

    def _batch_done(self, waiter_id: str, waiter: BatchWait) -> bool:
        """True once each child of the batch has a completion pending for it, or is closed."""
        tree = self.world.tree
        pending = {p.completion.agent_id for p in tree.pending_for(waiter_id)}
        for child_id in waiter.children:
            if child_id in pending:
                continue
            child = tree.agents.get(child_id)
            if child is not None and child.state is not AgentState.CLOSED:
                return False
        return True

    def _take_batch(
        self, waiter_id: str, waiter: BatchWait, seconds: float = 0.0
    ) -> Callable[[Transition], list[Completion | Message | RetinueError]]:
        """Return how to take the batch's completions (each child's oldest), in order.

        A closed child with none keeps its place as ``AgentClosed``; a child
        still running (only once the batch gave up after ``seconds``) as
        ``WaitTimeout``. A batch that takes its children's messages takes them
        after the entries, oldest first.
        """
        world = self.world

        def take(tx: Transition) -> list[Completion | Message | RetinueError]:
            tree = world.tree
            oldest: dict[str, CompletionRecord] = {}
            for record in tree.pending_for(waiter_id):
                oldest.setdefault(record.completion.agent_id, record)
            results: list[Completion | Message | RetinueError] = []
            for entry in waiter.entries:
                if isinstance(entry, RetinueError):  # its spawn was refused
                    results.append(entry)
                    continue
                pending = oldest.get(entry)
                child = tree.agents.get(entry)
                what = entry if child is None else child.path
                if pending is not None:
                    results.append(world.take_completion(tx, pending))
                elif child is not None and child.state is not AgentState.CLOSED:
                    results.append(timed_out(what, seconds))
                else:
                    results.append(_closed(what))
            if waiter.messages:
                children = set(waiter.children)
                sent = [m for m in tree.unread(waiter_id) if m.message.sender_id in children]
                results.extend(world.take_message(m) for m in sent)
            return results

        return take

    def completion_arrived(self, tx: Transition, waiter_id: str, pending: CompletionRecord) -> bool:
        """A completion is routed to ``waiter_id``: answer its wait if that wait wants it.

        Returns True if the turn's wait takes it (now, or with its batch once
        the batch is done); False if the turn does not wait for it.
        """
        waiter = self.by_turn.get(waiter_id)
        if waiter is None or not waiter.wants(pending.completion.agent_id):
            return False
        if isinstance(waiter, ChildWait):
            world = self.world
            self.answer(tx, waiter_id, lambda t: world.take_completion(t, pending))
        else:
            self._answer_batch_if_done(tx, waiter_id, waiter)
        return True

    def child_closed(self, tx: Transition, waiter_id: str, child: AgentRecord) -> None:
        """``child`` of ``waiter_id`` was closed: end a wait on it that nothing else will answer."""
        waiter = self.by_turn.get(waiter_id)
        if waiter is None or not waiter.wants(child.id):
            return
        if isinstance(waiter, ChildWait):
            closed = _closed(child.path)
            self.answer(tx, waiter_id, lambda _: closed)
        else:
            self._answer_batch_if_done(tx, waiter_id, waiter)

    def _answer_batch_if_done(self, tx: Transition, waiter_id: str, waiter: BatchWait) -> None:
        """Answer the batch wait of ``waiter_id`` once its last child is done."""
        if self._batch_done(waiter_id, waiter):
            self.answer(tx, waiter_id, self._take_batch(waiter_id, waiter))

    def _next_event(
        self, tx: Transition, me: AgentRecord, child: AgentRecord, kind: WaitKind
    ) -> Callable[[Transition], Any] | None:
        """Return how to take the child's oldest event for ``me``, or None if none is there."""
        world = self.world
        best: tuple[int, Callable[[Transition], Any]] | None = None
        for pending in world.tree.pending_for(me.id):
            if pending.completion.agent_id == child.id:
                best = (pending.seq, lambda t, p=pending: world.take_completion(t, p))
                break
        if kind == "any":
            for message in world.tree.unread(me.id):
                if message.message.sender_id == child.id:
                    if best is None or message.seq < best[0]:
                        best = (message.seq, lambda _, m=message: world.take_message(m))
                    break
        return None if best is None else best[1]

    def waiting(self, waiter_id: str) -> Waiter | None:
        """Return the wait of the turn of ``waiter_id``, if it waits."""
        return self.by_turn.get(waiter_id)

    def _claim(
        self,
        tx: Transition,
        waiter_id: str,
        future: concurrent.futures.Future[Any],
        take: Callable[[Transition], Any],
    ) -> None:
        if not claim(self._journal, future):
            return
        value = take(tx)
        self.scheduler.hand(waiter_id, future, value)
        tx.answer(future, value)

    def answer(self, tx: Transition, waiter_id: str, take: Callable[[Transition], Any]) -> None:
        """Answer a blocked wait; the turn runs on once it has a slot again.

        The event is taken (marked read or delivered) only when the slot is
        granted, so an interrupt in between leaves it for the next turn.
        """
        future = self.by_turn.pop(waiter_id).future
        if not claim(self._journal, future):
            return
        self.scheduler.request_slot(tx, SlotRequest(waiter_id, future, take))

    def give_up(self, tx: Transition, agent_id: str, command: GiveUpWait) -> None:
        """A turn's wait ran out of time: end it with ``WaitTimeout`` once it has a slot.

        If an event was already taken for it, the wait keeps that event
        instead; a wait already answered (or ended by an interrupt) is left alone.
        """
        future, seconds = command.future, command.seconds
        waiter = self.by_turn.get(agent_id)
        if waiter is None or waiter.future is not future:
            return  # answered already (or failed by an interrupt)
        del self.by_turn[agent_id]
        if not claim(self._journal, future):
            return
        if isinstance(waiter, BatchWait):  # what is there is taken, the rest times out
            take = self._take_batch(agent_id, waiter, seconds)
            self.scheduler.request_slot(tx, SlotRequest(agent_id, future, take))
            return
        child = self.world.tree.agents.get(waiter.child_id)
        what = waiter.child_id if child is None else child.path
        timeout = timed_out(what, seconds)
        self.scheduler.request_slot(tx, SlotRequest(agent_id, future, lambda _: timeout))

    def release(self, tx: Transition, agent_id: str, why: TurnInterrupted) -> None:
        """The turn of ``agent_id`` ended: fail its wait with ``why``."""
        waiter = self.by_turn.pop(agent_id) if agent_id in self.by_turn else None
        if waiter is not None and claim(self._journal, waiter.future):
            future = waiter.future
            tx.answer(future, why)
