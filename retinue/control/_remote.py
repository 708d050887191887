"""``RemoteRuntime``: the host calls of a ``Runtime`` whose writer runs in another process.

:func:`retinue.connect` returns one. Each call is one line over the same
typed command ``Runtime`` submits (:mod:`retinue.actors.commands`), sent over
the store's control socket (:mod:`retinue.control._link`); the writer serves
it as the host and its answer, or its error as the same
:class:`~retinue.errors.RetinueError` class, comes back. Each sync call sits
next to its ``*_async`` twin, which never blocks the event loop.

A ``wait`` (and ``run``, ``messages``) loses nothing to a dropped connection: what it
took stays given back until this client confirms it has the answer, and a
cancelled ``*_async`` call gives it back as in process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from retinue.actors.commands import (
    HOST,
    AckLease,
    Agents,
    Approvals,
    Approve,
    Close,
    CloseTree,
    Command,
    CountAgents,
    CountBacklog,
    Deny,
    FollowUp,
    Get,
    HostMessages,
    Idle,
    Inspect,
    Interrupt,
    InterruptTree,
    Leases,
    ReleaseLease,
    Resume,
    Run,
    Send,
    Spawn,
    Wait,
)
from retinue.control import _wire as w
from retinue.control._link import Link, Reply
from retinue.control._streams import AsyncRemoteStream, RemoteStream
from retinue.errors import ArgumentTypeError, ControlError
from retinue.protocol.details import AgentCounts, AgentDetail, Backlog
from retinue.protocol.messages import AgentInfo, Completion, Message
from retinue.protocol.paging import AGENTS_PAGE_DEFAULT, aiter_pages, iter_pages
from retinue.protocol.supervision import ApprovalRequest

__all__ = ["RemoteRuntime"]

R = TypeVar("R")
_NO_REF: Any = object()
_UNCONFIRMED = (
    "the connection to the writer closed before this answer was confirmed (disconnect() "
    "raced it): the writer gives back what it took (under your own lease= it keeps it for "
    "that lease), so a wait or messages call lost nothing and may be called again on a new "
    "connection; repeat a run only with its idempotency_key, or it spawns again"
)


def _agent_ref(ref: Any, method: str) -> str:
    """Return ``ref`` if one was given.

    Raises:
        ArgumentTypeError: it is missing or None (leaving the writer is ``disconnect()``).
    """
    if ref is _NO_REF or ref is None:
        given = "no argument" if ref is _NO_REF else "None"
        raise ArgumentTypeError(
            f"{method}() closes one agent and needs its id or path, got {given}; "
            "to leave the writer use disconnect() or a with block"
        )
    checked: str = ref
    return checked


def _abandon(link: Link, future: concurrent.futures.Future[Reply]) -> None:
    """The caller will not take ``future``'s answer: cancel it, or give back what it took."""

    def give_back(done: concurrent.futures.Future[Reply]) -> None:
        if not done.cancelled() and done.exception() is None:
            link.give_back(done.result())

    future.add_done_callback(give_back)
    future.cancel()


class RemoteRuntime:
    """The host calls of the runtime whose writer serves a store's control socket.

    Made by :func:`retinue.connect`; thread-safe; ``disconnect()`` (or a
    ``with`` block) closes its connections, never the writer.
    """

    def __init__(self, link: Link, hello: w.Hello) -> None:
        """Use :func:`retinue.connect`."""
        self._link = link
        self.path = Path(hello.store)
        """The store's folder, as the writer names it."""
        self.pid = hello.pid
        """The writer's process id (when this client connected)."""

    # -- the connection ----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`disconnect` ran."""
        return self._link.closed

    def disconnect(self) -> None:
        """Close this client's connections (the writer goes on); idempotent.

        A wait in flight ends with ``ControlError``; what it took is given back.
        """
        self._link.close()

    def __enter__(self) -> RemoteRuntime:
        """Return the client itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Disconnect (see :meth:`disconnect`)."""
        self.disconnect()

    def _ask(self, command: Command[R], timeout: float | None = None) -> R:
        """Send ``command`` and block for its answer (or its error, raised)."""
        future = self._link.submit(command, timeout)
        try:
            reply = future.result()
        except BaseException:
            _abandon(self._link, future)
            raise
        return self._accept(command, reply)

    async def _ask_async(self, command: Command[R], timeout: float | None = None) -> R:
        """Send ``command`` and await its answer without blocking the event loop."""
        future = self._link.submit(command, timeout)
        try:
            reply = await asyncio.wrap_future(future)
        except BaseException:
            _abandon(self._link, future)
            raise
        return self._accept(command, reply)

    def _accept(self, command: Command[R], reply: Reply) -> R:
        """The value of ``reply`` (confirmed to the writer), or its error raised."""
        answer = reply.answer
        if answer.error is not None:
            raise w.error_of(answer.error)
        try:
            value: R = w.decode_value(answer.value, w.answer_type(type(command)))
        except BaseException:
            self._link.give_back(reply)
            raise
        if not self._link.received(reply):
            raise ControlError(_UNCONFIRMED)
        return value

    # -- an agent's lifecycle ---------------------------------------------------------------

    def spawn(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
    ) -> AgentInfo:
        """Like ``Runtime.spawn``: record a new agent under ``parent`` and queue its turn."""
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

    def run(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
        timeout: float | None = None,
        lease: str | None = None,
    ) -> Completion:
        """Like ``Runtime.run``: spawn an agent and wait for its first completion, in one command.

        The writer serves it as a :meth:`wait`: ``timeout=None`` is the
        writer's ``wait_default_s``; without ``lease`` the writer takes the
        completion under a lease of its own, kept once this client has it and
        given back (to the next :meth:`wait` on the agent) if the connection
        drops first; with ``lease`` it is the caller's to acknowledge (a
        cancelled :meth:`run_async` releases it, as in process). With
        ``idempotency_key`` a retried run waits on the agent the first made
        (if the first run received its completion, the retry raises
        ``NothingToWaitFor``).

        Raises:
            UnknownProfile, NotPermitted, DuplicateAgentPath: as ``Runtime.run``
                raises them, and InvalidArgument, ArgumentTypeError (nothing was spawned).
            WaitTimeout: the agent did not settle in time; it keeps running and
                the error's ``path`` names it (:meth:`wait` on it later).
            AgentClosed, NothingToWaitFor, RuntimeClosed: as ``Runtime.run``.
            ControlError: the connection to the writer failed.
        """
        command = Run(HOST, profile, task, name, parent, idempotency_key, lease)
        completion: Completion = self._ask(command, timeout)
        return completion

    async def run_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
        timeout: float | None = None,
        lease: str | None = None,
    ) -> Completion:
        """Like :meth:`run`, without blocking the event loop.

        A cancelled await loses nothing: the agent, once spawned, keeps
        running, and a completion already handed to this call is given back
        to the next :meth:`wait` on it. Use ``name`` or ``idempotency_key``
        to find the agent again after a cancel.
        """
        command = Run(HOST, profile, task, name, parent, idempotency_key, lease)
        completion: Completion = await self._ask_async(command, timeout)
        return completion

    def follow_up(self, ref: str, task: str) -> AgentInfo:
        """Like ``Runtime.follow_up``: queue a new turn for an idle agent."""
        return self._ask(FollowUp(HOST, ref, task))

    async def follow_up_async(self, ref: str, task: str) -> AgentInfo:
        """Like :meth:`follow_up`, without blocking the event loop."""
        return await self._ask_async(FollowUp(HOST, ref, task))

    def resume(self, ref: str) -> AgentInfo:
        """Like ``Runtime.resume``: re-run an interrupted agent's task."""
        return self._ask(Resume(HOST, ref))

    async def resume_async(self, ref: str) -> AgentInfo:
        """Like :meth:`resume`, without blocking the event loop."""
        return await self._ask_async(Resume(HOST, ref))

    def interrupt(self, ref: str) -> AgentInfo:
        """Like ``Runtime.interrupt``: cancel an agent's queued or running turn."""
        return self._ask(Interrupt(HOST, ref))

    async def interrupt_async(self, ref: str) -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        return await self._ask_async(Interrupt(HOST, ref))

    def interrupt_tree(self, ref: str) -> list[AgentInfo]:
        """Like ``Runtime.interrupt_tree``: interrupt an agent's live subtree, leaves first."""
        return self._ask(InterruptTree(HOST, ref))

    async def interrupt_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`interrupt_tree`, without blocking the event loop."""
        return await self._ask_async(InterruptTree(HOST, ref))

    def close(self, ref: str = _NO_REF) -> AgentInfo:
        """Like ``Runtime.close`` of one agent (this client itself: :meth:`disconnect`)."""
        return self._ask(Close(HOST, _agent_ref(ref, "close")))

    async def close_async(self, ref: str = _NO_REF) -> AgentInfo:
        """Like :meth:`close`, without blocking the event loop."""
        return await self._ask_async(Close(HOST, _agent_ref(ref, "close_async")))

    def close_tree(self, ref: str) -> list[AgentInfo]:
        """Like ``Runtime.close_tree``: close an agent's live subtree, children first."""
        return self._ask(CloseTree(HOST, ref))

    async def close_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        return await self._ask_async(CloseTree(HOST, ref))

    # -- waits, leases and quiescence -----------------------------------------------------

    def wait(
        self, ref: str, timeout: float | None = None, *, lease: str | None = None
    ) -> Completion:
        """Like ``Runtime.wait``: the agent's oldest completion the host has not received.

        ``timeout=None`` is the writer's ``wait_default_s``. Without ``lease``
        the writer takes the completion under a lease of its own, kept once
        this client has it and given back if the connection drops first; with
        ``lease`` it is the caller's to acknowledge (:meth:`ack_lease`), as in
        process (a dropped connection keeps it; a cancelled :meth:`wait_async`
        releases it). ``dedup_key_max_length`` bounds ``lease``, not the
        writer's own lease.
        """
        waiting: Command[Any] = Wait(HOST, ref, lease=lease)  # a host's: answered a Completion
        completion: Completion = self._ask(waiting, timeout)
        return completion

    async def wait_async(
        self, ref: str, timeout: float | None = None, *, lease: str | None = None
    ) -> Completion:
        """Like :meth:`wait`; a cancelled await gives back what the wait took."""
        waiting: Command[Any] = Wait(HOST, ref, lease=lease)  # a host's: answered a Completion
        completion: Completion = await self._ask_async(waiting, timeout)
        return completion

    def ack_lease(self, lease: str) -> bool:
        """Like ``Runtime.ack_lease``: forget ``lease``, the host has its completion."""
        return self._ask(AckLease(lease))

    async def ack_lease_async(self, lease: str) -> bool:
        """Like :meth:`ack_lease`, without blocking the event loop."""
        return await self._ask_async(AckLease(lease))

    def release_lease(self, lease: str) -> bool:
        """Like ``Runtime.release_lease``: give back the completion ``lease`` holds."""
        return self._ask(ReleaseLease(lease))

    async def release_lease_async(self, lease: str) -> bool:
        """Like :meth:`release_lease`, without blocking the event loop."""
        return await self._ask_async(ReleaseLease(lease))

    def leases(self) -> dict[str, Completion]:
        """Like ``Runtime.leases``: every lease not acknowledged or released yet."""
        return self._ask(Leases())

    async def leases_async(self) -> dict[str, Completion]:
        """Like :meth:`leases`, without blocking the event loop."""
        return await self._ask_async(Leases())

    def wait_idle(self, timeout: float | None = None) -> None:
        """Like ``Runtime.wait_idle``: block until the writer's runtime is quiescent."""
        self._ask(Idle(HOST), timeout)

    async def wait_idle_async(self, timeout: float | None = None) -> None:
        """Like :meth:`wait_idle`, without blocking the event loop."""
        await self._ask_async(Idle(HOST), timeout)

    # -- mailboxes --------------------------------------------------------------------------

    def send(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like ``Runtime.send``: put a message in an agent's durable mailbox."""
        return self._ask(Send(HOST, ref, content, dedup_key))

    async def send_async(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        return await self._ask_async(Send(HOST, ref, content, dedup_key))

    def messages(self, timeout: float | None = None) -> list[Message]:
        """Like ``Runtime.messages``: the host's unread messages, waiting up to ``timeout``."""
        return self._ask(HostMessages(HOST), timeout)

    async def messages_async(self, timeout: float | None = None) -> list[Message]:
        """Like :meth:`messages`; a cancelled await gives the messages back, unread."""
        return await self._ask_async(HostMessages(HOST), timeout)

    # -- reads ------------------------------------------------------------------------------

    def get(self, ref: str) -> AgentInfo:
        """Like ``Runtime.get``: an agent by id or live path."""
        return self._ask(Get(HOST, ref))

    async def get_async(self, ref: str) -> AgentInfo:
        """Like :meth:`get`, without blocking the event loop."""
        return await self._ask_async(Get(HOST, ref))

    def agents(
        self, *, include_closed: bool = False, limit: int | None = None, after: str | None = None
    ) -> list[AgentInfo]:
        """Like ``Runtime.agents``: every agent, oldest first, or one page by path."""
        return self._ask(Agents(HOST, include_closed, limit, after))

    async def agents_async(
        self, *, include_closed: bool = False, limit: int | None = None, after: str | None = None
    ) -> list[AgentInfo]:
        """Like :meth:`agents`, without blocking the event loop."""
        return await self._ask_async(Agents(HOST, include_closed, limit, after))

    def iter_agents(
        self,
        *,
        include_closed: bool = False,
        page_size: int = AGENTS_PAGE_DEFAULT,
        after: str | None = None,
    ) -> Iterator[AgentInfo]:
        """Like ``Runtime.iter_agents``: every agent by path, one page per call."""
        return iter_pages(
            lambda limit, cursor: self.agents(
                include_closed=include_closed, limit=limit, after=cursor
            ),
            page_size,
            after,
        )

    def iter_agents_async(
        self,
        *,
        include_closed: bool = False,
        page_size: int = AGENTS_PAGE_DEFAULT,
        after: str | None = None,
    ) -> AsyncIterator[AgentInfo]:
        """Like :meth:`iter_agents`, as an async iterator (``async for``)."""
        return aiter_pages(
            lambda limit, cursor: self.agents_async(
                include_closed=include_closed, limit=limit, after=cursor
            ),
            page_size,
            after,
        )

    def inspect(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Like ``Runtime.inspect``: one agent in full."""
        return self._ask(Inspect(HOST, ref, transcript_tail))

    async def inspect_async(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Like :meth:`inspect`, without blocking the event loop."""
        return await self._ask_async(Inspect(HOST, ref, transcript_tail))

    def agent_counts(self) -> AgentCounts:
        """Like ``Runtime.agent_counts``: agents by state, live ones by profile."""
        return self._ask(CountAgents(HOST))

    async def agent_counts_async(self) -> AgentCounts:
        """Like :meth:`agent_counts`, without blocking the event loop."""
        return await self._ask_async(CountAgents(HOST))

    def backlog(self) -> Backlog:
        """Like ``Runtime.backlog``: what waits to be received in the whole store."""
        return self._ask(CountBacklog(HOST))

    async def backlog_async(self) -> Backlog:
        """Like :meth:`backlog`, without blocking the event loop."""
        return await self._ask_async(CountBacklog(HOST))

    # -- events -----------------------------------------------------------------------------

    def stream(self, ref: str | None = None) -> RemoteStream:
        """Like ``Runtime.stream``: iterate over the events of ``ref``'s subtree as they
        happen (None: every agent), over a connection of its own.

        Raises:
            RuntimeClosed: the writer is closing. InvalidAgentPath: a bad ``ref``.
            NoWriter: no writer serves the store any more.
        """
        link = self._link
        return RemoteStream(link, link.run(link.open_stream(ref)))

    def stream_async(self, ref: str | None = None) -> AsyncRemoteStream:
        """Like :meth:`stream`, as an async iterator that never blocks the event loop while
        it waits (opening it waits for the writer's answer: one local round trip)."""
        link = self._link
        return AsyncRemoteStream(link, link.run(link.open_stream(ref)))

    # -- approvals --------------------------------------------------------------------------

    def approvals(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Like ``Runtime.approvals``: the pending approval requests, oldest first."""
        return self._ask(Approvals(HOST, ref))

    async def approvals_async(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Like :meth:`approvals`, without blocking the event loop."""
        return await self._ask_async(Approvals(HOST, ref))

    def approve(self, request_id: str, *, note: str | None = None) -> None:
        """Like ``Runtime.approve``: the call runs and the model gets its result."""
        self._ask(Approve(request_id, note))

    async def approve_async(self, request_id: str, *, note: str | None = None) -> None:
        """Like :meth:`approve`, without blocking the event loop."""
        await self._ask_async(Approve(request_id, note))

    def deny(self, request_id: str, *, reason: str) -> None:
        """Like ``Runtime.deny``: the model gets ``{"error": "denied: <reason>"}``."""
        self._ask(Deny(request_id, reason))

    async def deny_async(self, request_id: str, *, reason: str) -> None:
        """Like :meth:`deny`, without blocking the event loop."""
        await self._ask_async(Deny(request_id, reason))
