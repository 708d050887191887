"""The host's mailbox calls: put a message in an agent's mailbox, read the host's own inbox.

:class:`MailboxCalls` holds ``send`` and ``messages``, each with its
``*_async`` twin. ``messages`` is a wait on the host's inbox, given back if
its task is cancelled.
"""

from __future__ import annotations

from retinue.actors.calls import HostReceipt, resolve_timeout
from retinue.actors.commands import HOST, HostMessages, Send
from retinue.protocol.messages import Message
from retinue.runtime.calls import Calls

__all__ = ["MailboxCalls"]


class MailboxCalls(Calls):
    """Messages between the host and its agents' durable mailboxes."""

    def send(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Put a message in an agent's durable mailbox (read by its next turn).

        The same ``dedup_key`` returns the original message instead of a second one.

        Raises:
            MessageTooLarge, DedupKeyTooLong, MailboxFull, AgentClosed, UnknownAgent.
        """
        return self._ask(Send(HOST, ref, content, dedup_key))

    async def send_async(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        return await self._ask_async(Send(HOST, ref, content, dedup_key))

    def messages(self, timeout: float | None = None) -> list[Message]:
        """Return the messages top-level agents sent to the host, oldest first.

        A top-level agent sends one with ``turn.send("/root", ...)``. The
        host's inbox is a durable mailbox like any other, bounded by
        ``mailbox_capacity`` (a sender gets ``MailboxFull`` while it is full).
        Every unread message is returned and marked read; with none there,
        the call waits up to ``timeout`` (None: ``wait_default_s``; 0: not at
        all) for the first, and returns ``[]`` if none came.

        Raises:
            InvalidArgument: a NaN, infinite, negative or too long timeout.
            RuntimeClosed: the runtime is (or gets) closed.
        """
        seconds = resolve_timeout(timeout, self.limits)
        result: list[Message] = self._engine.wait(HostMessages(HOST), seconds)
        return result

    async def messages_async(self, timeout: float | None = None) -> list[Message]:
        """Like :meth:`messages`, without blocking the event loop.

        Cancelling the awaiting task loses nothing: messages already handed
        to it are given back, unread, to the next ``messages`` call.
        """
        seconds = resolve_timeout(timeout, self.limits)
        engine = self._engine
        result: list[Message] = await engine.wait_async(
            HostMessages(HOST), seconds, HostReceipt(engine)
        )
        return result
