"""Turn waits: a turn blocked in ``wait`` on one child, as a small named record.

A turn waits for the next event from one child (a message it sent, or its
completion); meanwhile it gives its turn slot to others, and takes the event
only once it has a slot again, so an interrupt in between loses nothing.
Every event taken for a turn is handed to it (``Turn.hand``) until its
runner receives it, so a cancel can take back what no runner saw.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from retinue.actors.commands import GiveUpWait, Wait
from retinue.actors.core import World
from retinue.actors.scheduler import Scheduler, SlotRequest
from retinue.actors.transition import Transition
from retinue.errors import AgentBusy, AgentClosed, NotPermitted, RetinueError, WaitTimeout
from retinue.protocol.messages import AgentState
from retinue.protocol.records import AgentRecord

__all__ = ["AgentWaiter", "Waiters"]


@dataclass(frozen=True, slots=True)
class AgentWaiter:
    """A turn blocked in ``wait`` on its child ``child_id`` (one at a time per turn).

    ``kind`` is ``"completion"`` (only the child's completion) or ``"any"``
    (a message the child sent, or its completion).
    """

    child_id: str
    kind: str
    future: concurrent.futures.Future[Any]


class Waiters:
    """Every blocked turn wait, and how each one is answered."""

    def __init__(self, world: World, scheduler: Scheduler) -> None:
        """Keep the turns' waits on ``world``; a turn's slot comes from ``scheduler``."""
        self.world = world
        self.scheduler = scheduler
        self.agent: dict[str, AgentWaiter] = {}

    # -- turns ---------------------------------------------------------------------

    def agent_wait(self, tx: Transition, me: AgentRecord, command: Wait) -> None:
        """Answer a turn's wait with the next event from its child, or register it.

        Raises:
            NotPermitted: ``ref`` is not the turn's child.
            AgentBusy: the turn already waits on a child.
            AgentClosed: the child is closed and has nothing left for it.
        """
        child = self.world.find(me, command.ref, command.field)
        tree = self.world.tree
        if child.parent_id != me.id:
            raise NotPermitted(f"{me.path} may only wait on its own children, not {child.path}")
        current = self.agent.get(me.id)
        if current is not None:
            raise AgentBusy(
                f"{me.path} already waits on {tree.agents[current.child_id].path}; "
                "a turn waits on one child at a time"
            )
        take = self._next_event(tx, me, child, command.kind)
        if take is not None:
            self._claim(tx, me.id, tx.defer(), take)
            return
        if child.state is AgentState.CLOSED:
            raise AgentClosed(f"{child.path} is closed")
        self.agent[me.id] = AgentWaiter(child.id, command.kind, tx.defer())
        self.scheduler.yield_slot(tx, me.id)  # a waiting turn gives its slot to others

    def _next_event(
        self, tx: Transition, me: AgentRecord, child: AgentRecord, kind: str
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

    def waiting(self, waiter_id: str) -> AgentWaiter | None:
        """Return the wait of the turn of ``waiter_id``, if it waits."""
        return self.agent.get(waiter_id)

    def _claim(
        self,
        tx: Transition,
        waiter_id: str,
        future: concurrent.futures.Future[Any],
        take: Callable[[Transition], Any],
    ) -> None:
        if not future.set_running_or_notify_cancel():
            return
        value = take(tx)
        self.scheduler.hand(waiter_id, future, value)
        tx.answer(future, value)

    def answer(self, tx: Transition, waiter_id: str, take: Callable[[Transition], Any]) -> None:
        """Answer a blocked wait; the turn runs on once it has a slot again.

        The event is taken (marked read or delivered) only when the slot is
        granted, so an interrupt in between leaves it for the next turn.
        """
        future = self.agent.pop(waiter_id).future
        if not future.set_running_or_notify_cancel():
            return
        self.scheduler.request_slot(tx, SlotRequest(waiter_id, future, take))

    def give_up_agent(self, tx: Transition, me: AgentRecord, command: GiveUpWait) -> None:
        """A turn's wait ran out of time: end it with ``WaitTimeout`` once it has a slot.

        If an event was already taken for it, the wait keeps that event instead.
        """
        future, seconds = command.future, command.seconds
        waiter = self.agent.get(me.id)
        if waiter is None or waiter.future is not future:
            return  # answered already (or failed by an interrupt)
        del self.agent[me.id]
        if not future.set_running_or_notify_cancel():
            return
        child = self.world.tree.agents.get(waiter.child_id)
        what = waiter.child_id if child is None else child.path
        timeout = WaitTimeout(f"no event from {what} within {seconds:g}s; it keeps running")
        self.scheduler.request_slot(tx, SlotRequest(me.id, future, lambda _: timeout))

    def release(self, tx: Transition, agent_id: str, why: RetinueError) -> None:
        """The turn of ``agent_id`` ended: fail its wait with ``why``."""
        waiter = self.agent.pop(agent_id, None)
        if waiter is not None and waiter.future.set_running_or_notify_cancel():
            future = waiter.future
            tx.answer(future, why)
