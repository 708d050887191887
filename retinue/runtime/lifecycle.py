"""The host's lifecycle calls: spawn an agent, give it more work, interrupt it, close it.

:class:`LifecycleCalls` holds ``spawn``, ``follow_up``, ``resume``,
``interrupt``, ``interrupt_tree``, ``close`` and ``close_tree``, each with its
``*_async`` twin; each is one line over the same command.
"""

from __future__ import annotations

from typing import Any

from retinue.actors.commands import (
    HOST,
    Close,
    CloseTree,
    FollowUp,
    Interrupt,
    InterruptTree,
    Resume,
    Spawn,
)
from retinue.errors import ArgumentTypeError
from retinue.protocol.messages import AgentInfo
from retinue.runtime.calls import Calls

__all__ = ["LifecycleCalls"]

_NO_REF: Any = object()  # close() called without an agent reference


class LifecycleCalls(Calls):
    """An agent's life from the host: spawn, follow-up, resume, interrupt, close."""

    def spawn(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
    ) -> AgentInfo:
        """Record a new agent under ``parent`` and queue its first turn; return it.

        ``idempotency_key`` makes a retried spawn safe: a spawn under the same
        parent with the same key returns the agent the first one made (as it
        is now, even closed) instead of a second one, also after a reopen, for
        as long as that agent is stored. Keys are bounded like dedup keys.

        Raises:
            UnknownProfile, NotPermitted, DuplicateAgentPath, DepthLimitExceeded,
            FanoutLimitExceeded, AgentLimitExceeded, InvalidAgentPath, UnknownAgent,
            DedupKeyTooLong; InvalidArgument: a blank task, or the key was used
            for another profile.
        """
        return self._ask(Spawn(HOST, profile, task, name, parent, idempotency_key))

    async def spawn_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
    ) -> AgentInfo:
        """Like :meth:`spawn`, without blocking the event loop."""
        return await self._ask_async(Spawn(HOST, profile, task, name, parent, idempotency_key))

    def follow_up(self, ref: str, task: str) -> AgentInfo:
        """Queue a new turn for an idle agent.

        Raises:
            AgentBusy: a turn is queued or running. AgentClosed: it is closed.
            CompletionBacklogFull: too many of its completions are unreceived.
        """
        return self._ask(FollowUp(HOST, ref, task))

    async def follow_up_async(self, ref: str, task: str) -> AgentInfo:
        """Like :meth:`follow_up`, without blocking the event loop."""
        return await self._ask_async(FollowUp(HOST, ref, task))

    def resume(self, ref: str) -> AgentInfo:
        """Re-run an interrupted agent's task as a new turn.

        Raises:
            AgentStateError: the agent is not interrupted.
        """
        return self._ask(Resume(HOST, ref))

    async def resume_async(self, ref: str) -> AgentInfo:
        """Like :meth:`resume`, without blocking the event loop."""
        return await self._ask_async(Resume(HOST, ref))

    def interrupt(self, ref: str) -> AgentInfo:
        """Cancel an agent's queued or running turn; it settles ``interrupted`` at once."""
        return self._ask(Interrupt(HOST, ref))

    async def interrupt_async(self, ref: str) -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        return await self._ask_async(Interrupt(HOST, ref))

    def interrupt_tree(self, ref: str) -> list[AgentInfo]:
        """Interrupt the queued and running turns of an agent's live subtree, leaves first.

        Returns every live agent of the subtree in that order (idle ones as
        they were). None of them is woken by another's interrupted completion.

        Raises:
            AgentClosed: the agent is closed. UnknownAgent: no such agent.
        """
        return self._ask(InterruptTree(HOST, ref))

    async def interrupt_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`interrupt_tree`, without blocking the event loop."""
        return await self._ask_async(InterruptTree(HOST, ref))

    def close(self, ref: str = _NO_REF) -> AgentInfo:
        """Close agent ``ref``: interrupt its turn first, then free its name.

        To close the runtime itself use :meth:`shutdown` (or a ``with`` block).

        Raises:
            ArgumentTypeError: no agent reference (or None) was given.
            ActiveDescendants: the agent still has live children.
            AgentClosed: it is already closed.
        """
        return self._ask(Close(HOST, _agent_ref(ref, "close")))

    async def close_async(self, ref: str = _NO_REF) -> AgentInfo:
        """Like :meth:`close` of an agent, without blocking the event loop."""
        return await self._ask_async(Close(HOST, _agent_ref(ref, "close_async")))

    def close_tree(self, ref: str) -> list[AgentInfo]:
        """Close an agent and its whole live subtree, children first; return them in order."""
        return self._ask(CloseTree(HOST, ref))

    async def close_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        return await self._ask_async(CloseTree(HOST, ref))


def _agent_ref(ref: Any, method: str) -> str:
    """Return ``ref`` if one was given.

    Raises:
        ArgumentTypeError: it is missing or None (closing the runtime is ``shutdown()``).
    """
    if ref is _NO_REF or ref is None:
        given = "no argument" if ref is _NO_REF else "None"
        raise ArgumentTypeError(
            f"{method}() closes one agent and needs its id or path, got {given}; "
            "to close the runtime use shutdown() or a with block"
        )
    checked: str = ref  # its type is checked by the supervisor (ArgumentTypeError)
    return checked
