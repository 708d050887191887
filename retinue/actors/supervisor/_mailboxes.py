"""Mailboxes: messages into durable mailboxes, and the inbox a starting turn takes.

A message goes to an agent's parent, a child or a sibling (the host sends to
any agent; a top-level agent sends to the host's inbox, ``/root``), bounded
by ``mailbox_capacity`` and deduplicated by its ``dedup_key``. A waiting turn
that waits for a message from its sender is handed it at once (see
:mod:`retinue.actors.supervisor._waiters`); otherwise the recipient's next turn reads it.
"""

from __future__ import annotations

import time

from retinue.actors import Journaled
from retinue.actors.commands import Send
from retinue.actors.supervisor._host_waits import HostWaits
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._waiters import ChildWait, Waiters
from retinue.actors.supervisor._world import World
from retinue.actors.tree import HOST_KEY
from retinue.errors import AgentClosed, DedupKeyTooLong, MailboxFull, NotPermitted
from retinue.protocol import paths
from retinue.protocol.checks import check_key, check_text
from retinue.protocol.messages import AgentState, Message, MessageQueued
from retinue.protocol.records import AgentRecord, CompletionRecord, MessageRecord

__all__ = ["Mailboxes"]


class Mailboxes(Journaled):
    """Sends, and the inbox of a starting turn."""

    def __init__(self, world: World, waiters: Waiters, hosts: HostWaits) -> None:
        """Deliver in ``world``; waiting turns are ``waiters``, the host's inbox is ``hosts``."""
        self._journal = world.journal
        self.world = world
        self.waiters = waiters
        self.hosts = hosts

    def send(self, tx: Transition, me: AgentRecord | None, command: Send) -> Message:
        """Queue a message in the recipient's durable mailbox.

        Raises:
            NotPermitted: a turn may message only its parent, children and siblings.
            DedupKeyTooLong, AgentClosed, MessageTooLarge, MailboxFull, UnknownAgent.
        """
        world = self.world
        tree = world.tree
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
            raise AgentClosed(f"{target.path} is closed", path=target.path)
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
            seq=seq,
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
        if isinstance(waiter, ChildWait) and waiter.child_id == sender_id and waiter.kind == "any":
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
        unread = len(tree.mailbox.get(HOST_KEY, {}))
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
            recipient_id=HOST_KEY,
            content=content,
            dedup_key=dedup_key,
            created_at=now,
            seq=seq,
        )
        tree.add_message(MessageRecord(message=message, seq=seq))
        tx.emit(
            MessageQueued(
                agent_id=HOST_KEY, path=paths.ROOT, at=now, message_id=message.id, sender=me.path
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
            seq=pending.seq,
        )
