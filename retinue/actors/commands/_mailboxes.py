"""The commands of mailboxes: a message to an agent, and the host's inbox taken."""

from __future__ import annotations

from dataclasses import dataclass

from retinue.actors.commands._base import Command, Host, Sender
from retinue.protocol.messages import Message

__all__ = ["HostMessages", "Send"]


@dataclass(frozen=True, slots=True)
class Send(Command[Message]):
    """Queue a message in an agent's durable mailbox."""

    sender: Sender
    ref: str
    content: str
    dedup_key: str | None = None
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class HostMessages(Command[list[Message]]):
    """Take the messages top-level agents sent to the host (``/root``), oldest first.

    With none there, the answer waits (deferred) for the first to arrive; a
    :class:`GiveUpWait` for the same future ends it with an empty list.
    """

    sender: Host
