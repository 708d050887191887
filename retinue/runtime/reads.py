"""The host's reads: one agent, every agent, one agent in full, the store's backlog.

:class:`ReadCalls` holds ``get``, ``agents``, ``inspect`` and ``backlog``,
each with its ``*_async`` twin; a writer and a read-only runtime serve them
alike.
"""

from __future__ import annotations

from retinue.actors.commands import HOST, Agents, CountBacklog, Get, Inspect
from retinue.protocol.details import AgentDetail, Backlog
from retinue.protocol.messages import AgentInfo
from retinue.runtime.calls import Calls

__all__ = ["ReadCalls"]


class ReadCalls(Calls):
    """What the host reads of the tree, from the supervisor or a read-only store."""

    def get(self, ref: str) -> AgentInfo:
        """Return an agent by id or live path.

        Raises:
            UnknownAgent: no such agent.
        """
        return self._ask(Get(HOST, ref))

    async def get_async(self, ref: str) -> AgentInfo:
        """Like :meth:`get`, without blocking the event loop."""
        return await self._ask_async(Get(HOST, ref))

    def agents(self, *, include_closed: bool = False) -> list[AgentInfo]:
        """Return every agent, oldest first; closed ones only with ``include_closed``."""
        return self._ask(Agents(HOST, include_closed))

    async def agents_async(self, *, include_closed: bool = False) -> list[AgentInfo]:
        """Like :meth:`agents`, without blocking the event loop."""
        return await self._ask_async(Agents(HOST, include_closed))

    def inspect(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Return one agent in full: its snapshot, unread messages, pending completions
        and the last ``transcript_tail`` messages of its stored transcript.

        Served by a writer and by a read-only runtime alike, from one view of the store.

        Raises:
            UnknownAgent: no such agent. InvalidArgument: a negative ``transcript_tail``.
        """
        return self._ask(Inspect(HOST, ref, transcript_tail))

    async def inspect_async(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Like :meth:`inspect`, without blocking the event loop."""
        return await self._ask_async(Inspect(HOST, ref, transcript_tail))

    def backlog(self) -> Backlog:
        """Count what waits to be received in the whole store: unread messages and
        pending completions (the host's among them), from one view of the store.

        Served by a writer and a read-only runtime alike (for metrics: one call, not
        one ``inspect`` per agent).
        """
        return self._ask(CountBacklog(HOST))

    async def backlog_async(self) -> Backlog:
        """Like :meth:`backlog`, without blocking the event loop."""
        return await self._ask_async(CountBacklog(HOST))
