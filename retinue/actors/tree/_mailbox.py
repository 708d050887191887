"""The tree's mailboxes: unread messages per recipient, dedup keys, the log of read messages.

:class:`MailboxIndex` is one family of :class:`~retinue.actors.tree.Tree`'s
indexes (the tree is made of it), never used alone: only the tree's methods
edit these indexes, and every edit records its store write in the tree's
``writes``.
"""

from __future__ import annotations

from collections import deque

import msgspec

from retinue.actors.tree._journal import JDeque, JDict, Journal
from retinue.actors.tree._keys import ReadEntry
from retinue.persistence.store import Write
from retinue.protocol.messages import Message
from retinue.protocol.records import AgentRecord, MessageRecord, message_key

__all__ = ["MailboxIndex"]

_encode = msgspec.msgpack.Encoder().encode


class MailboxIndex:
    """Messages indexed for the mailbox rules (a part of :class:`~retinue.actors.tree.Tree`).

    The host's own mailbox (messages top-level agents send to ``/root``) is
    ``mailbox[HOST_KEY]``.
    """

    agents: dict[str, AgentRecord]  # the tree's agents
    writes: list[Write]  # the tree's gathered writes
    _journal: Journal

    def __init__(self) -> None:
        """Start with no message."""
        journal = self._journal
        # Unread messages per recipient, in arrival (seq) order.
        self.mailbox: dict[str, dict[int, MessageRecord]] = JDict(journal)
        self.dedup: dict[tuple[str, str], Message] = JDict(journal)
        # Read messages still stored, oldest read first.
        self.read_log: deque[ReadEntry] = JDeque(journal)

    def _box(self, recipient: str) -> dict[int, MessageRecord]:
        """Return the unread mailbox of ``recipient``, made if it has none."""
        box = self.mailbox.get(recipient)
        if box is None:
            box = self.mailbox[recipient] = JDict(self._journal, ordered=True)
        return box

    def add_message(self, record: MessageRecord, *, persist: bool = True) -> None:
        """Store a message; unread ones join the recipient's mailbox."""
        if record.message.seq != record.seq:  # stored before messages carried their seq
            message = msgspec.structs.replace(record.message, seq=record.seq)
            record = msgspec.structs.replace(record, message=message)
        message = record.message
        if not record.read:
            self._box(message.recipient_id)[record.seq] = record
        else:
            self._log_read(record, record.read_at or message.created_at)
        if message.dedup_key is not None:
            self.dedup[(message.sender_id, message.dedup_key)] = message
        if persist:
            self.writes.append(
                ("messages", message_key(message.recipient_id, record.seq), _encode(record))
            )

    def mark_read(self, record: MessageRecord, at: float) -> None:
        """Mark one unread message read and drop it from the mailbox (the host's too)."""
        recipient = record.message.recipient_id
        self.mailbox.get(recipient, {}).pop(record.seq, None)
        agent = self.agents.get(recipient)
        generation = 0 if agent is None else agent.generation
        done = msgspec.structs.replace(record, read=True, read_at=at, read_generation=generation)
        self._log_read(done, at)
        self.writes.append(("messages", message_key(recipient, record.seq), _encode(done)))

    def _log_read(self, record: MessageRecord, at: float) -> None:
        message = record.message
        dedup = None if message.dedup_key is None else (message.sender_id, message.dedup_key)
        self.read_log.append(
            ReadEntry(at, message.recipient_id, record.seq, dedup, record.read_generation)
        )

    def unread_again(self, message: Message) -> bool:
        """Make a read message unread again (its reader lost it); return False if it is gone.

        A message compaction removed meanwhile stays removed.
        """
        recipient, seq = message.recipient_id, message.seq
        kept = [e for e in self.read_log if (e.recipient_id, e.seq) == (recipient, seq)]
        if not kept:
            return False
        self.read_log.remove(kept[0])
        record = MessageRecord(message=message, seq=seq)
        box = self._box(recipient)
        box[seq] = record
        ordered: dict[int, MessageRecord] = JDict(self._journal, sorted(box.items()), ordered=True)
        self.mailbox[recipient] = ordered  # arrival order
        self.writes.append(("messages", message_key(recipient, seq), _encode(record)))
        return True

    def unread(self, agent_id: str) -> list[MessageRecord]:
        """Return the agent's unread messages in arrival order."""
        return list(self.mailbox.get(agent_id, {}).values())

    def oldest_read(self) -> ReadEntry | None:
        """Return the read message read longest ago that is still stored, if any."""
        return self.read_log[0] if self.read_log else None

    def remove_oldest_read(self) -> None:
        """Delete the oldest read message; its dedup key goes with it."""
        entry = self.read_log.popleft()
        self.writes.append(("messages", message_key(entry.recipient_id, entry.seq), None))
        self._forget_dedup(entry.dedup, entry.recipient_id)

    def _forget_dedup(self, dedup: tuple[str, str] | None, recipient_id: str) -> None:
        """Free a dedup key once the message it names is removed."""
        if dedup is not None:
            held = self.dedup.get(dedup)
            if held is not None and held.recipient_id == recipient_id:
                del self.dedup[dedup]

    def _untag_read(self, recipient_id: str, message: Message, generation: int) -> None:
        """Drop the reading turn's tag from a read message (searched from the newest read)."""
        for index in range(len(self.read_log) - 1, -1, -1):
            entry = self.read_log[index]
            if (entry.recipient_id, entry.seq) != (recipient_id, message.seq):
                continue
            if entry.generation == generation:
                self.read_log[index] = entry._replace(generation=0)
                record = MessageRecord(
                    message=message, seq=message.seq, read=True, read_at=entry.read_at
                )
                self.writes.append(
                    ("messages", message_key(recipient_id, message.seq), _encode(record))
                )
            return
