"""Routing: messages into mailboxes, completions to their recipients, waits answered.

Every settled turn makes exactly one completion, routed to the nearest live
ancestor (or the host) and pending until received. A waiting turn gets the
next event from its child; a waiting host gets an agent's oldest completion it
has not received. A waiting turn gives up its turn slot and takes an event
only once it has a slot again, so an interrupt in between loses nothing.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterable
from typing import Any

from retinue.actors.commands import GiveUpWait, Send, Unreceive, Wait
from retinue.actors.core import (
    DEFERRED,
    AgentWaiter,
    HostWaiter,
    SlotRequest,
    SupervisorCore,
    require_str,
    resolve_future,
)
from retinue.errors import (
    AgentBusy,
    AgentClosed,
    DedupKeyTooLong,
    MailboxFull,
    NotPermitted,
    WaitTimeout,
)
from retinue.protocol import paths
from retinue.protocol.messages import (
    AgentState,
    Completion,
    CompletionRouted,
    CompletionStatus,
    Message,
    MessageQueued,
    TurnSettled,
)
from retinue.protocol.records import AgentRecord, CompletionRecord, MessageRecord

__all__ = ["Routing", "host_give_back", "host_next", "host_take"]


def host_next(record: AgentRecord, generations: Iterable[int]) -> int | None:
    """Return the generation a host wait on ``record`` receives next (None: nothing new).

    That is the oldest of the generations the host gave back and those above
    its receipt mark; ``generations`` are the agent's known completions.
    """
    returned = record.host_returned
    fresh = [g for g in generations if g > record.host_received or g in returned]
    return min(fresh) if fresh else None


def host_take(record: AgentRecord, generation: int) -> dict[str, Any]:
    """Return the record changes that mark ``generation`` received by the host."""
    if generation in record.host_returned:
        return {"host_returned": tuple(g for g in record.host_returned if g != generation)}
    return {"host_received": max(record.host_received, generation)}


def host_give_back(record: AgentRecord, generation: int) -> dict[str, Any] | None:
    """Return the record changes that give a received ``generation`` back (None: not received).

    The receipt mark drops while its top generation is given back, so the
    returned list only holds generations below the mark.
    """
    if generation > record.host_received or generation in record.host_returned:
        return None
    returned = set(record.host_returned) | {generation}
    mark = record.host_received
    while mark in returned:
        returned.discard(mark)
        mark -= 1
    return {"host_received": mark, "host_returned": tuple(sorted(returned))}


class Routing(SupervisorCore):
    """Messages, completions, wakes and waits."""

    def op_send(self, command: Send) -> Message:
        """Queue a message in the recipient's durable mailbox."""
        me = self._sender(command.sender)
        content = require_str(command.content, "content")
        target = self._find(me, command.ref)
        if me is not None:
            related = (
                target.id == me.parent_id
                or target.parent_id == me.id
                or (target.parent_id == me.parent_id and target.id != me.id)
            )
            if not related:
                raise NotPermitted(
                    f"{me.path} may message only its parent, children and siblings, "
                    f"not {target.path}"
                )
        sender_id = "" if me is None else me.id
        dedup_key = command.dedup_key
        if dedup_key is not None:
            dedup_key = require_str(dedup_key, "dedup_key")
            cap = self.limits.dedup_key_max_length
            if len(dedup_key) > cap:
                raise DedupKeyTooLong(f"dedup_key has {len(dedup_key)} characters; max is {cap}")
            original = self.tree.dedup.get((sender_id, dedup_key))
            if original is not None:
                return original  # a retry of an acknowledged send, even if it closed since
        if target.state is AgentState.CLOSED:
            raise AgentClosed(f"{target.path} is closed")
        self._check_size(content, "the message")
        unread = len(self.tree.mailbox.get(target.id, {}))
        if unread >= self.limits.mailbox_capacity:
            raise MailboxFull(
                f"{target.path} has {unread} unread messages; "
                f"mailbox_capacity is {self.limits.mailbox_capacity}"
            )
        now = time.time()
        seq = self.tree.next_seq()
        message = Message(
            id=f"{target.id}:{seq}",
            kind="message",
            sender=paths.ROOT if me is None else me.path,
            sender_id=sender_id,
            recipient=target.path,
            recipient_id=target.id,
            content=content,
            dedup_key=dedup_key,
            created_at=now,
        )
        record = MessageRecord(message=message, seq=seq)
        self.tree.add_message(record)
        self._emit(
            MessageQueued(
                agent_id=target.id,
                path=target.path,
                at=now,
                message_id=message.id,
                sender=message.sender,
            )
        )
        waiter = self.agent_waiters.get(target.id)
        if waiter is not None and waiter.child_id == sender_id and waiter.kind == "any":
            self._deliver_to_waiter(target.id, lambda: self._take_message(record))
        return message

    def _completion_message(self, pending: CompletionRecord, recipient: AgentRecord) -> Message:
        completion = pending.completion
        return Message(
            id=completion.id,
            kind="completion",
            sender=completion.path,
            sender_id=completion.agent_id,
            recipient=recipient.path,
            recipient_id=recipient.id,
            content=completion.output if completion.output is not None else completion.error or "",
            created_at=completion.created_at,
            completion=completion,
        )

    def _maybe_wake(self, agent_id: str) -> None:
        """Give an idle agent with pending completions its wake turn.

        A wake refused only because the agent's own completions fill its
        backlog is remembered and retried once the backlog drains.
        """
        record = self.tree.agents[agent_id]
        if (
            record.state not in (AgentState.COMPLETED, AgentState.FAILED)
            or not self.tree.pending_for(agent_id)
            or not getattr(self.profiles.get(record.profile), "wake_on_completion", False)
            or self.closing
            or self.restoring
            or agent_id in self._closing_subtree
        ):
            return
        if self.tree.undelivered.get(agent_id, 0) >= self.limits.pending_completions_per_agent:
            self._held_wakes.add(agent_id)
            return
        self._held_wakes.discard(agent_id)
        self._queue_turn(record, record.task, "wake")

    # -- completions ----------------------------------------------------------------

    def _emit_completion(self, record: AgentRecord, status: CompletionStatus) -> None:
        tree = self.tree
        if record.generation in tree.completions.get(record.id, {}):
            return  # exactly one completion per turn
        now = time.time()
        completion = Completion(
            id=f"{record.id}:{record.generation}",
            agent_id=record.id,
            path=record.path,
            generation=record.generation,
            status=status,
            output=record.output,
            error=record.error,
            created_at=now,
        )
        recipient = tree.nearest_live_ancestor(record)
        pending = CompletionRecord(
            completion=completion, recipient_id=recipient, seq=tree.next_seq()
        )
        tree.add_completion(pending)
        self._emit(
            TurnSettled(
                agent_id=record.id,
                path=record.path,
                at=now,
                generation=record.generation,
                status=status,
            )
        )
        self._emit_routed(completion, recipient, now)
        self._serve_host_waiters(record.id)
        if recipient is not None:
            self._offer(recipient, pending)

    def _offer(self, recipient_id: str, pending: CompletionRecord) -> None:
        """Hand a routed completion to a waiting turn, or wake an idle recipient."""
        waiter = self.agent_waiters.get(recipient_id)
        if waiter is not None and waiter.child_id == pending.completion.agent_id:
            self._deliver_to_waiter(recipient_id, lambda: self._take_completion(pending))
            return
        self._maybe_wake(recipient_id)

    def _take_completion(self, pending: CompletionRecord) -> Completion:
        """Mark a completion received by its waiting recipient (as it stands now)."""
        done = pending.completion
        current = self.tree.completions.get(done.agent_id, {}).get(done.generation, pending)
        if not current.delivered:
            self._deliver(current)
        return done

    def _reroute(self, pending: CompletionRecord, heir: str | None) -> CompletionRecord:
        """Move a pending completion to a new recipient and publish it."""
        moved = self.tree.reroute(pending, heir)
        self._emit_routed(moved.completion, heir, time.time())
        return moved

    def _emit_routed(self, completion: Completion, recipient: str | None, at: float) -> None:
        """Publish that ``completion`` now waits for ``recipient`` (None: the host)."""
        self._emit(
            CompletionRouted(
                agent_id=completion.agent_id,
                path=completion.path,
                at=at,
                completion_id=completion.id,
                recipient=paths.ROOT if recipient is None else self.tree.agents[recipient].path,
            )
        )

    def _deliver(self, pending: CompletionRecord) -> CompletionRecord:
        """Mark a completion received; its agent's backlog shrank, so it may wake."""
        self._drained.add(pending.completion.agent_id)
        return self.tree.mark_delivered(pending)

    def _wake_drained(self) -> None:
        """Wake agents held back by a full backlog once their completions are received."""
        while self._drained:
            agent_id = self._drained.pop()
            if agent_id in self._held_wakes:
                self._maybe_wake(agent_id)

    def _serve_host_waiters(self, agent_id: str) -> None:
        waiters = self.host_waiters.get(agent_id)
        tree = self.tree
        while waiters:
            record = tree.agents[agent_id]
            done = tree.completions.get(agent_id, {})
            generation = host_next(record, done)
            if generation is None:
                break
            future = waiters.pop(0).future
            if not future.set_running_or_notify_cancel():
                continue
            pending = done[generation]
            if not pending.delivered and pending.recipient_id is None:
                pending = self._deliver(pending)
            self._update(record, updated_at=record.updated_at, **host_take(record, generation))
            completion = pending.completion
            self._after(lambda f=future, c=completion: f.set_result(c))  # type: ignore[misc]
        if not waiters:
            self.host_waiters.pop(agent_id, None)
            return
        if tree.agents[agent_id].state is AgentState.CLOSED:
            closed = AgentClosed(f"{tree.agents[agent_id].path} is closed")
            for waiter in self.host_waiters.pop(agent_id):
                future = waiter.future
                if future.set_running_or_notify_cancel():
                    self._after(lambda f=future: f.set_exception(closed))  # type: ignore[misc]

    def op_host_wait(self, command: Wait) -> object:
        """Register a host wait for the agent's oldest completion the host has not received."""
        record = self._find(None, command.ref)
        assert self._reply is not None
        self.host_waiters.setdefault(record.id, []).append(HostWaiter(self._reply))
        self._serve_host_waiters(record.id)
        return DEFERRED

    def op_unreceive_host(self, command: Unreceive) -> None:
        """The host lost a completion it was handed (its wait was cancelled): take it back.

        It becomes the next completion a host wait on that agent receives.
        """
        agent_id, generation = command.agent_id, command.generation
        record = self.tree.agents.get(agent_id)
        done = self.tree.completions.get(agent_id, {}).get(generation)
        back = None if record is None else host_give_back(record, generation)
        if record is None or done is None or back is None:
            return  # compacted, or not received: nothing to undo
        if done.delivered and done.recipient_id is None:
            self.tree.undeliver(done)
        self._update(record, updated_at=record.updated_at, **back)
        self._serve_host_waiters(agent_id)

    def op_give_up_host_wait(self, command: GiveUpWait) -> None:
        """A host wait ran out of time: end it with ``WaitTimeout`` unless it was answered."""
        future, seconds = command.future, command.seconds
        for agent_id, waiters in list(self.host_waiters.items()):
            mine = [w for w in waiters if w.future is future]
            if mine:
                waiters.remove(mine[0])
                if not waiters:
                    del self.host_waiters[agent_id]
                if future.set_running_or_notify_cancel():
                    path = self.tree.agents[agent_id].path
                    future.set_exception(
                        WaitTimeout(f"{path} did not settle within {seconds:g}s; it keeps running")
                    )
                return

    def op_agent_wait(self, command: Wait) -> object:
        """Answer a turn's wait with the next event from its child, or register it."""
        me = self._sender(command.sender)
        kind = command.kind
        assert me is not None and self._reply is not None
        child = self._find(me, command.ref)
        if child.parent_id != me.id:
            raise NotPermitted(f"{me.path} may only wait on its own children, not {child.path}")
        current = self.agent_waiters.get(me.id)
        if current is not None:
            raise AgentBusy(
                f"{me.path} already waits on {self.tree.agents[current.child_id].path}; "
                "a turn waits on one child at a time"
            )
        take = self._next_event(me, child, kind)
        future = self._reply
        if take is not None:
            self._claim(future, take)
            return DEFERRED
        if child.state is AgentState.CLOSED:
            raise AgentClosed(f"{child.path} is closed")
        self.agent_waiters[me.id] = AgentWaiter(child.id, kind, future)
        self.active.discard(me.id)  # a waiting turn gives its slot to others
        self._pump()
        return DEFERRED

    def _next_event(
        self, me: AgentRecord, child: AgentRecord, kind: str
    ) -> Callable[[], Any] | None:
        tree = self.tree
        best: tuple[int, Callable[[], Any]] | None = None
        for pending in tree.pending_for(me.id):
            if pending.completion.agent_id == child.id:
                best = (pending.seq, lambda p=pending: self._take_completion(p))
                break
        if kind == "any":
            for message in tree.unread(me.id):
                if message.message.sender_id == child.id:
                    if best is None or message.seq < best[0]:
                        best = (message.seq, lambda m=message: self._take_message(m))
                    break
        return None if best is None else best[1]

    def _take_message(self, record: MessageRecord) -> Message:
        self.tree.mark_read(record, time.time())
        return record.message

    def _claim(self, future: concurrent.futures.Future[Any], take: Callable[[], Any]) -> bool:
        if not future.set_running_or_notify_cancel():
            return False
        value = take()
        self._after(lambda: future.set_result(value))
        return True

    def _deliver_to_waiter(self, waiter_id: str, take: Callable[[], Any]) -> None:
        """Answer a blocked wait; the turn runs on once it has a slot again.

        The event is taken (marked read or delivered) only when the slot is
        granted, so an interrupt in between leaves it for the next turn.
        """
        future = self.agent_waiters.pop(waiter_id).future
        if not future.set_running_or_notify_cancel():
            return
        self._request_slot(SlotRequest(waiter_id, future, take))

    def _request_slot(self, request: SlotRequest) -> None:
        if len(self.active) < self.limits.max_active_turns:
            self._grant(request)
        else:
            self.reacquire.append(request)

    def _grant(self, request: SlotRequest) -> None:
        self.active.add(request.agent_id)
        value = None if request.take is None else request.take()
        future = request.future
        self._after(lambda: resolve_future(future, value))

    def op_give_up_wait(self, command: GiveUpWait) -> None:
        """A turn's wait ran out of time: end it with ``WaitTimeout`` once it has a slot.

        If an event was already taken for it, the wait keeps that event instead.
        """
        future, seconds = command.future, command.seconds
        me = self._sender(command.sender)
        assert me is not None
        waiter = self.agent_waiters.get(me.id)
        if waiter is None or waiter.future is not future:
            return  # answered already (or failed by an interrupt)
        del self.agent_waiters[me.id]
        if not future.set_running_or_notify_cancel():
            return
        child = self.tree.agents.get(waiter.child_id)
        what = waiter.child_id if child is None else child.path
        timeout = WaitTimeout(f"no event from {what} within {seconds:g}s; it keeps running")
        self._request_slot(SlotRequest(me.id, future, lambda: timeout))
