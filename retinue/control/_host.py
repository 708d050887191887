"""``retinue.Host``: the host calls every face of a runtime has, so host code is written once.

``Runtime`` (the writer in this process), ``RemoteRuntime`` (a writer in
another process, over its control socket: :func:`retinue.connect`) and
``retinue.cluster.Cluster`` (trees sharded over Ray) all satisfy
:class:`Host`, structurally: a function typed ``def serve(host: Host)`` runs
on any of them. :class:`Events` and :class:`AsyncEvents` are what their
``stream`` and ``stream_async`` return.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Protocol, Self

from retinue.protocol.details import AgentDetail
from retinue.protocol.messages import AgentInfo, Completion, Event, Message
from retinue.protocol.supervision import ApprovalRequest

__all__ = ["HOST_CALLS", "AsyncEvents", "Events", "Host"]


class Events(Iterator[Event], Protocol):
    """A live stream of events (``stream``): iterate, then ``close()`` or leave the ``with``."""

    def close(self) -> None:
        """Stop listening; the iteration ends."""
        ...

    def __enter__(self) -> Self:
        """Return the stream; leaving the block closes it."""
        ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the stream."""
        ...


class AsyncEvents(Protocol):
    """A live stream of events for asyncio (``stream_async``)."""

    def __aiter__(self) -> Self:
        """Return the stream itself."""
        ...

    async def __anext__(self) -> Event:
        """Return the next event, awaiting it."""
        ...

    def close(self) -> None:
        """Stop listening; the iteration ends."""
        ...

    async def aclose(self) -> None:
        """Stop listening; the iteration ends."""
        ...

    async def __aenter__(self) -> Self:
        """Return the stream; leaving the block closes it."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the stream."""
        ...


class Host(Protocol):
    """The host calls of a runtime, sync and ``*_async``: see ``Runtime`` for each."""

    def spawn(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
    ) -> AgentInfo:
        """Record a new agent under ``parent`` and queue its first turn; return it."""
        ...

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
        ...

    def run(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Completion:
        """Spawn an agent and wait for its first completion; return it.

        :meth:`spawn` then :meth:`wait` on the new agent, in one call; the
        agent keeps running if the wait times out (``WaitTimeout``, its
        ``path`` naming the agent). A retried run with ``idempotency_key``
        waits on the agent the first made.
        """
        ...

    async def run_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Completion:
        """Like :meth:`run`, without blocking the event loop; a cancel loses nothing."""
        ...

    def wait(self, ref: str, timeout: float | None = None) -> Completion:
        """Return the completion of the agent's oldest turn the host has not received."""
        ...

    async def wait_async(self, ref: str, timeout: float | None = None) -> Completion:
        """Like :meth:`wait`, without blocking the event loop."""
        ...

    def send(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Put a message in an agent's durable mailbox."""
        ...

    async def send_async(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        ...

    def messages(self, timeout: float | None = None) -> list[Message]:
        """Return the messages top-level agents sent to the host, oldest first."""
        ...

    async def messages_async(self, timeout: float | None = None) -> list[Message]:
        """Like :meth:`messages`, without blocking the event loop."""
        ...

    def follow_up(self, ref: str, task: str) -> AgentInfo:
        """Queue a new turn for an idle agent."""
        ...

    async def follow_up_async(self, ref: str, task: str) -> AgentInfo:
        """Like :meth:`follow_up`, without blocking the event loop."""
        ...

    def resume(self, ref: str) -> AgentInfo:
        """Re-run an interrupted agent's task as a new turn."""
        ...

    async def resume_async(self, ref: str) -> AgentInfo:
        """Like :meth:`resume`, without blocking the event loop."""
        ...

    def interrupt(self, ref: str) -> AgentInfo:
        """Cancel an agent's queued or running turn."""
        ...

    async def interrupt_async(self, ref: str) -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        ...

    def interrupt_tree(self, ref: str) -> list[AgentInfo]:
        """Interrupt the queued and running turns of an agent's live subtree, leaves first."""
        ...

    async def interrupt_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`interrupt_tree`, without blocking the event loop."""
        ...

    def close(self, ref: str) -> AgentInfo:
        """Close agent ``ref`` (never the runtime itself)."""
        ...

    async def close_async(self, ref: str) -> AgentInfo:
        """Like :meth:`close`, without blocking the event loop."""
        ...

    def close_tree(self, ref: str) -> list[AgentInfo]:
        """Close an agent and its whole live subtree, children first."""
        ...

    async def close_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        ...

    def get(self, ref: str) -> AgentInfo:
        """Return an agent by id or live path."""
        ...

    async def get_async(self, ref: str) -> AgentInfo:
        """Like :meth:`get`, without blocking the event loop."""
        ...

    def agents(
        self, *, include_closed: bool = False, limit: int | None = None, after: str | None = None
    ) -> list[AgentInfo]:
        """Return every agent, oldest first; with ``limit`` or ``after``, one page by path."""
        ...

    async def agents_async(
        self, *, include_closed: bool = False, limit: int | None = None, after: str | None = None
    ) -> list[AgentInfo]:
        """Like :meth:`agents`, without blocking the event loop."""
        ...

    def inspect(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Return one agent in full."""
        ...

    async def inspect_async(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Like :meth:`inspect`, without blocking the event loop."""
        ...

    def approvals(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Return the pending approval requests, oldest first."""
        ...

    async def approvals_async(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Like :meth:`approvals`, without blocking the event loop."""
        ...

    def approve(self, request_id: str, *, note: str | None = None) -> None:
        """Approve a pending request: the call runs and the model gets its result."""
        ...

    async def approve_async(self, request_id: str, *, note: str | None = None) -> None:
        """Like :meth:`approve`, without blocking the event loop."""
        ...

    def deny(self, request_id: str, *, reason: str) -> None:
        """Deny a pending request: the model gets the reason as an error."""
        ...

    async def deny_async(self, request_id: str, *, reason: str) -> None:
        """Like :meth:`deny`, without blocking the event loop."""
        ...

    def stream(self, ref: str | None = None) -> Events:
        """Iterate over the events of ``ref``'s subtree as they happen (None: every agent)."""
        ...

    def stream_async(self, ref: str | None = None) -> AsyncEvents:
        """Like :meth:`stream`, as an async iterator."""
        ...


HOST_CALLS: tuple[str, ...] = tuple(
    sorted(name for name in vars(Host) if not name.startswith("_") and callable(vars(Host)[name]))
)
"""The names of :class:`Host`'s calls (for a check at run time: ``hasattr`` each)."""
