"""The router: messages into mailboxes, completions to their recipients, wakes.

Every settled turn makes exactly one completion, routed to the nearest live
ancestor (or the host) and pending until received. A message or completion a
waiting turn waits for is handed to its wait (see
:mod:`retinue.actors.waiters`); an idle recipient with pending completions is
woken with a follow-up turn; a turn that starts takes its unread messages and
pending completions as its inbox.
"""

from __future__ import annotations

import time

from retinue.actors.commands import GiveBack, Send
from retinue.actors.core import World
from retinue.actors.host_waits import HostWaits
from retinue.actors.scheduler import Scheduler
from retinue.actors.transition import Transition
from retinue.actors.tree import HOST
from retinue.actors.waiters import Waiters
from retinue.errors import AgentClosed, DedupKeyTooLong, MailboxFull, NotPermitted
from retinue.protocol import paths
from retinue.protocol.checks import check_key, check_text
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

__all__ = ["Router"]


class Router:
    """Messages, completions and wakes."""

    def __init__(
        self, world: World, scheduler: Scheduler, waiters: Waiters, hosts: HostWaits
    ) -> None:
        """Route in ``world``; wakes queue turns on ``scheduler``; waits are in the two others."""
        self.world = world
        self.scheduler = scheduler
        self.waiters = waiters
        self.hosts = hosts
        self.held_wakes: set[str] = set()

    # -- messages -------------------------------------------------------------------

    def send(self, tx: Transition, command: Send) -> Message:
        """Queue a message in the recipient's durable mailbox.

        Raises:
            NotPermitted: a turn may message only its parent, children and siblings.
            DedupKeyTooLong, AgentClosed, MessageTooLarge, MailboxFull, UnknownAgent.
        """
        world = self.world
        tree = world.tree
        me = world.sender(command.sender)
        content = check_text(command.content, "content")
        to_host = self._host_sender(me, command.ref)
        if to_host is not None:
            return self._send_to_host(tx, to_host, content, command.dedup_key)
        target = world.find(me, command.ref, command.field)
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
            dedup_key = self._check_dedup(dedup_key)
            original = tree.dedup.get((sender_id, dedup_key))
            if original is not None:
                return original  # a retry of an acknowledged send, even if it closed since
        if target.state is AgentState.CLOSED:
            raise AgentClosed(f"{target.path} is closed")
        world.check_size(content, "the message")
        unread = len(tree.mailbox.get(target.id, {}))
        if unread >= world.limits.mailbox_capacity:
            raise MailboxFull(
                f"{target.path} has {unread} unread messages; "
                f"mailbox_capacity is {world.limits.mailbox_capacity}",
                limit=world.limits.mailbox_capacity,
                value=unread,
                path=target.path,
            )
        now = time.time()
        seq = tree.next_seq()
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
        tree.add_message(record)
        tx.emit(
            MessageQueued(
                agent_id=target.id,
                path=target.path,
                at=now,
                message_id=message.id,
                sender=message.sender,
            )
        )
        waiter = self.waiters.waiting(target.id)
        if waiter is not None and waiter.child_id == sender_id and waiter.kind == "any":
            self.waiters.answer(tx, target.id, lambda _: world.take_message(record))
        return message

    def _host_sender(self, me: AgentRecord | None, ref: object) -> AgentRecord | None:
        """Return the sender if ``ref`` is the host (``/root``) and it may message it, else None.

        Raises:
            NotPermitted: the host messages itself, or a non-top-level agent
                messages the host.
        """
        if not isinstance(ref, str) or ref != paths.ROOT:
            return None
        if me is None:
            raise NotPermitted("the host cannot message itself; /root is the host")
        if me.parent_id is not None:
            raise NotPermitted(
                f"{me.path} may message only its parent, children and siblings; only "
                "top-level agents may message the host (/root)"
            )
        return me

    def _send_to_host(
        self, tx: Transition, me: AgentRecord, content: str, dedup_key: str | None
    ) -> Message:
        """Put a top-level agent's message in the host's inbox (read with ``rt.messages``).

        Raises:
            DedupKeyTooLong, MessageTooLarge, MailboxFull: as for any mailbox.
        """
        world = self.world
        tree = world.tree
        if dedup_key is not None:
            dedup_key = self._check_dedup(dedup_key)
            original = tree.dedup.get((me.id, dedup_key))
            if original is not None:
                return original
        world.check_size(content, "the message")
        unread = len(tree.mailbox.get(HOST, {}))
        cap = world.limits.mailbox_capacity
        if unread >= cap:
            raise MailboxFull(
                f"the host's inbox has {unread} unread messages; mailbox_capacity is {cap}; "
                "the host reads them with rt.messages()",
                limit=cap,
                value=unread,
                path=paths.ROOT,
            )
        now = time.time()
        seq = tree.next_seq()
        message = Message(
            id=f"{paths.ROOT}:{seq}",
            kind="message",
            sender=me.path,
            sender_id=me.id,
            recipient=paths.ROOT,
            recipient_id=HOST,
            content=content,
            dedup_key=dedup_key,
            created_at=now,
        )
        tree.add_message(MessageRecord(message=message, seq=seq))
        tx.emit(
            MessageQueued(
                agent_id=HOST, path=paths.ROOT, at=now, message_id=message.id, sender=me.path
            )
        )
        self.hosts.serve_inbox(tx)
        return message

    def _check_dedup(self, dedup_key: object) -> str:
        """Return a usable ``dedup_key``.

        Raises:
            ArgumentTypeError, InvalidArgument: not a non-empty storable str.
            DedupKeyTooLong: longer than ``dedup_key_max_length``.
        """
        key = check_key(dedup_key, "dedup_key")
        cap = self.world.limits.dedup_key_max_length
        if len(key) > cap:
            raise DedupKeyTooLong(
                f"dedup_key has {len(key)} characters; max is {cap}", limit=cap, value=len(key)
            )
        return key

    def inbox(self, tx: Transition, record: AgentRecord) -> list[Message]:
        """Take the unread messages and pending completions of a starting turn, in order."""
        world = self.world
        tree = world.tree
        now = record.updated_at
        inbox: list[tuple[int, Message]] = []
        for message in tree.unread(record.id):
            tree.mark_read(message, now)
            inbox.append((message.seq, message.message))
        for pending in tree.pending_for(record.id):
            world.deliver(tx, pending)
            inbox.append((pending.seq, self._completion_message(pending, record)))
        inbox.sort(key=lambda item: item[0])
        return [m for _, m in inbox]

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

    # -- wakes ------------------------------------------------------------------------

    def maybe_wake(self, tx: Transition, agent_id: str) -> None:
        """Give an idle agent with pending completions its wake turn.

        A wake refused only because the agent's own completions fill its
        backlog is remembered and retried once the backlog drains.
        """
        world = self.world
        record = world.tree.agents[agent_id]
        if (
            record.state not in (AgentState.COMPLETED, AgentState.FAILED)
            or not world.tree.pending_for(agent_id)
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

    def wake_drained(self, tx: Transition) -> None:
        """Wake agents held back by a full backlog once their completions are received."""
        while tx.drained:
            agent_id = tx.drained.pop()
            if agent_id in self.held_wakes:
                self.maybe_wake(tx, agent_id)

    # -- completions ----------------------------------------------------------------

    def emit_completion(
        self, tx: Transition, record: AgentRecord, status: CompletionStatus
    ) -> None:
        """Make the one completion of ``record``'s current turn and route it."""
        tree = self.world.tree
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
        tx.emit(
            TurnSettled(
                agent_id=record.id,
                path=record.path,
                at=now,
                generation=record.generation,
                status=status,
            )
        )
        self._emit_routed(tx, completion, recipient, now)
        self.hosts.serve_host(tx, record.id)
        if recipient is not None:
            self.offer(tx, recipient, pending)

    def offer(self, tx: Transition, recipient_id: str, pending: CompletionRecord) -> None:
        """Hand a routed completion to a waiting turn, or wake an idle recipient."""
        waiter = self.waiters.waiting(recipient_id)
        if waiter is not None and waiter.child_id == pending.completion.agent_id:
            world = self.world
            self.waiters.answer(tx, recipient_id, lambda t: world.take_completion(t, pending))
            return
        self.maybe_wake(tx, recipient_id)

    def give_back(self, tx: Transition, command: GiveBack) -> None:
        """Put an event a turn's cancelled wait had taken back in its recipient's queue.

        A completion is pending again for that agent (or, if the agent closed
        since, for its nearest live ancestor or the host) and offered as a new
        arrival: a waiting turn takes it, an idle agent may be woken. A
        message is unread again (unless compaction removed it meanwhile).
        """
        tree = self.world.tree
        event = command.event
        if isinstance(event, Message):
            tree.unread_again(event, int(event.id.rsplit(":", 1)[1]))
            return
        done = tree.completions.get(event.agent_id, {}).get(event.generation)
        if done is None or not done.delivered or done.recipient_id != command.agent_id:
            return  # compacted, or not this agent's: nothing to give back
        back = tree.undeliver(done)
        recipient = tree.agents.get(command.agent_id)
        if recipient is None or recipient.state is AgentState.CLOSED:
            origin = tree.agents[event.agent_id]
            self.reroute(tx, back, tree.nearest_live_ancestor(origin))
        else:
            self.offer(tx, command.agent_id, back)

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
