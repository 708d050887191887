"""The turn context a runner receives: its task, its messages, and the coordinator operations.

Every operation is one command to the supervisor through the runtime's
:class:`~retinue.actors.calls._engine.Engine` (the host's calls use the same one),
so a runner never blocks the supervisor and never asks an ancestor anything:
replies travel as futures, never as asks up the tree. Each operation has a
blocking face for sync runners and an ``*_async`` twin for async runners; both
are one line over the same command, and the engine owns the rules of waits
(giving up in time, giving back what a cancelled await was handed).

:class:`Turn` holds the operations; what they stand on (the turn's state, its
cancellation and its two faces) is :class:`~retinue.actors.turns._control.TurnControl`,
and the turn's side of a wait is :class:`~retinue.actors.turns._receipt.TurnReceipt`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from retinue.actors.calls import resolve_timeout
from retinue.actors.commands import (
    Children,
    Close,
    CloseTree,
    Interrupt,
    InterruptTree,
    RunMany,
    Send,
    Spawn,
    SpawnRequest,
    Wait,
)
from retinue.actors.turns._control import TurnControl
from retinue.errors import InvalidArgument, RetinueError
from retinue.protocol.messages import AgentInfo, Completion, Message

__all__ = ["BatchRequest", "Runner", "Turn"]

BatchRequest = tuple[str, str] | tuple[str, str, str | None]
"""One child of ``run_many``: ``(profile, task)``, or ``(profile, task, name)``."""

Runner = Callable[["Turn"], str | Awaitable[str]]
"""Anything that takes a turn context and returns the turn's output text.

A plain function runs on a pooled worker thread; an ``async def`` runner (or an
object whose ``__call__`` is ``async def``) runs as a task on the runtime's
event loop and should use the turn's ``*_async`` operations.
"""


class Turn(TurnControl):
    """One turn of one agent, as its runner sees it.

    Every coordinator operation has a blocking form for sync runners
    (``turn.wait(...)``) and an awaitable twin for async runners
    (``await turn.wait_async(...)``) that never blocks the event loop; both
    run the same logic. A blocking form called from an async runner (on the
    runtime's event loop) raises :class:`~retinue.errors.BlockingCallInAsyncRunner`.

    Attributes:
        agent: the agent as it was when the turn started.
        task: the task of this turn.
        messages: unread messages in arrival order, children's completions
            among them as ``Message(kind="completion", completion=...)``.
            They, and what the turn's waits receive, stay the turn's until it
            completes: a turn that fails, is interrupted, restarted or lost
            in a crash hands them to the next attempt or the next turn.
        cancelled: set when the turn is interrupted; a runner should stop.
        reason: why the turn runs: ``spawn``, ``follow_up``, ``wake``, ``resume``,
            ``restart`` (a restart policy runs a failed or lost turn again) or
            ``approval`` (a model turn carries on after its approvals were
            answered in a new process).
        origin: what the task's first attempt was for: ``spawn``,
            ``follow_up``, ``wake`` or ``resume`` (for a first attempt, its
            ``reason``; for a restarted or carried-on one, the first's).
        attempt: the run of this task: 1, or n for the (n-1)th restart.
        instructions: the profile's instructions.
        profile: the agent's :class:`~retinue.actors._profile.Profile`.
        limits: the runtime's limits.
        ref: this turn as a command sender (its agent id and generation).
        engine: the runtime's call engine (what :meth:`request` and every operation use).
        handover: events the supervisor took for this turn's waits that its
            runner has not received yet (an interrupt takes them back).
        watch: where the turn reports its model and tool calls as they happen
            (:mod:`retinue.actors.events._observer`); set as its runner starts.
        trace: the agent's stored trace context (W3C ``traceparent``), the
            parent of this turn's span; ``cause``: the span that caused this
            turn (a link); ``root_id``: its top-level agent's id (the trace's
            conversation). Set when the runtime traces.
    """

    # -- operations ---------------------------------------------------------------------

    def spawn(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
        name_field: str = "name",
    ) -> AgentInfo:
        """Spawn a child and return at once; its completion arrives in this agent's mailbox.

        A spawn with an ``idempotency_key`` this agent already used returns
        the child that spawn made instead of a second one (keys are scoped to
        the parent and survive a reopen; see ``Runtime.spawn``). ``name_field``
        is the name errors give ``name`` (a tool layer passes its own argument's).

        Raises:
            UnknownProfile, NotPermitted, DuplicateAgentPath: as the supervisor's
                rules say, and so do DepthLimitExceeded, FanoutLimitExceeded,
                AgentLimitExceeded, InvalidAgentPath, DedupKeyTooLong,
                InvalidArgument and TurnInterrupted.
        """
        return self.request(
            Spawn(
                self.ref,
                profile,
                task,
                name,
                idempotency_key=idempotency_key,
                name_field=name_field,
            )
        )

    async def spawn_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
        name_field: str = "name",
    ) -> AgentInfo:
        """Like :meth:`spawn`, without blocking the event loop."""
        return await self.request_async(
            Spawn(
                self.ref,
                profile,
                task,
                name,
                idempotency_key=idempotency_key,
                name_field=name_field,
            )
        )

    def run(
        self, profile: str, task: str, *, name: str | None = None, timeout: float | None = None
    ) -> Completion:
        """Spawn a child and wait for its completion.

        Raises:
            WaitTimeout: the child did not settle in time (it keeps running);
                and everything ``spawn`` raises.
        """
        seconds = resolve_timeout(timeout, self.limits)
        child = self.spawn(profile, task, name=name)
        result: Completion = self._wait(self._wait_for(child.id, "completion"), seconds, _EVENT)
        return result

    async def run_async(
        self, profile: str, task: str, *, name: str | None = None, timeout: float | None = None
    ) -> Completion:
        """Like :meth:`run`, without blocking the event loop."""
        seconds = resolve_timeout(timeout, self.limits)
        child = await self.spawn_async(profile, task, name=name)
        command = self._wait_for(child.id, "completion")
        result: Completion = await self._wait_async(command, seconds, _EVENT)
        return result

    def _run_many(
        self,
        requests: Sequence[BatchRequest],
        name_field: str = "name",
        keys: Sequence[str | None] | None = None,
    ) -> RunMany:
        """The one command that spawns a batch and waits for it (answered once all are done).

        ``keys`` gives each request's spawn an idempotency key (see :meth:`spawn`).

        Raises:
            FanoutLimitExceeded: more requests than ``fanout_cap``.
            InvalidArgument: a request is not a ``(profile, task)`` pair or a
                ``(profile, task, name)`` triple, or ``keys`` is not one per request.
        """
        items = list(requests)
        for item in items:
            if not (isinstance(item, tuple | list) and len(item) in (2, 3)):
                raise InvalidArgument(
                    "run_many takes a list of (profile, task) pairs or (profile, task, name)"
                )
        given = [None] * len(items) if keys is None else list(keys)
        if len(given) != len(items):
            raise InvalidArgument(f"run_many takes one key per request, not {len(given)}")
        spawns = [
            SpawnRequest(
                item[0],
                item[1],
                item[2] if len(item) == 3 else None,
                name_field,
                idempotency_key=key,
            )
            for item, key in zip(items, given, strict=True)
        ]
        return RunMany(self.ref, spawns)

    def run_many(
        self,
        requests: Sequence[BatchRequest],
        timeout: float | None = None,
        *,
        name_field: str = "name",
    ) -> list[Completion | RetinueError]:
        """Run several children at once; return their completions in request order.

        A request is ``(profile, task)``, or ``(profile, task, name)`` to name the child.

        A refused spawn, a child still running when the time budget (shared
        by the whole batch) runs out, or a child closed with no completion
        keeps its place as its error. The batch is one wait: it returns once
        every child is done, with their completions taken together; if the
        turn is interrupted first, nothing of the batch is taken (its next
        turn receives the completions).

        Raises:
            FanoutLimitExceeded: more requests than ``fanout_cap``.
            InvalidArgument: a request is not a ``(profile, task)`` pair.
        """
        seconds = resolve_timeout(timeout, self.limits)
        result: list[Completion | RetinueError] = self._wait(
            self._run_many(requests, name_field), seconds, _BATCH
        )
        return result

    async def run_many_async(
        self,
        requests: Sequence[BatchRequest],
        timeout: float | None = None,
        *,
        name_field: str = "name",
        keys: Sequence[str | None] | None = None,
    ) -> list[Completion | RetinueError]:
        """Like :meth:`run_many`, without blocking the event loop; ``keys`` gives each
        request's spawn an idempotency key (see :meth:`spawn`)."""
        seconds = resolve_timeout(timeout, self.limits)
        result: list[Completion | RetinueError] = await self._wait_async(
            self._run_many(requests, name_field, keys), seconds, _BATCH
        )
        return result

    async def run_one_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        name_field: str = "name",
    ) -> tuple[Completion | RetinueError, list[Message]]:
        """Spawn one child and wait for it in one command (a one-child ``run_many``).

        Returns its completion, or the error in its place (a refused spawn, a
        child closed with none, ``WaitTimeout`` when it still runs), with the
        messages it sent this agent meanwhile, oldest first (taken with it).
        ``idempotency_key`` and ``name_field``: see :meth:`spawn`.
        """
        seconds = resolve_timeout(timeout, self.limits)
        spawn = SpawnRequest(profile, task, name, name_field, idempotency_key=idempotency_key)
        command = RunMany(self.ref, [spawn], messages=True)
        answer: list[Any] = await self._wait_async(command, seconds, _BATCH)
        return answer[0], answer[1:]

    def send(
        self, ref: str, content: str, *, dedup_key: str | None = None, field: str = "ref"
    ) -> Message:
        """Send a message to this agent's parent, a child or a sibling.

        ``field`` is the name errors give ``ref`` (a tool layer passes its own
        argument's name, as every call here that takes a reference does).

        Raises:
            NotPermitted, UnknownAgent, AgentClosed: as the mailbox rules say,
                and so do MessageTooLarge, DedupKeyTooLong and MailboxFull.
        """
        return self.request(Send(self.ref, ref, content, dedup_key, field))

    async def send_async(
        self, ref: str, content: str, *, dedup_key: str | None = None, field: str = "ref"
    ) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        return await self.request_async(Send(self.ref, ref, content, dedup_key, field))

    def _wait_for(self, ref: str, kind: Any, field: str = "ref") -> Wait:
        return Wait(self.ref, ref, kind, field)

    def wait(
        self, ref: str, timeout: float | None = None, *, field: str = "ref"
    ) -> Message | Completion:
        """Return the next event from a child: a message it sent here, or its completion.

        Raises:
            WaitTimeout: nothing arrived in time; the child keeps running.
            NotPermitted: ``ref`` is not this agent's child.
        """
        seconds = resolve_timeout(timeout, self.limits)
        result: Message | Completion = self._wait(
            self._wait_for(ref, "any", field), seconds, _EVENT
        )
        return result

    async def wait_async(
        self, ref: str, timeout: float | None = None, *, field: str = "ref"
    ) -> Message | Completion:
        """Like :meth:`wait`, without blocking the event loop."""
        seconds = resolve_timeout(timeout, self.limits)
        command = self._wait_for(ref, "any", field)
        result: Message | Completion = await self._wait_async(command, seconds, _EVENT)
        return result

    def children(self) -> list[AgentInfo]:
        """Return this agent's live children."""
        return self.request(Children(self.ref))

    async def children_async(self) -> list[AgentInfo]:
        """Like :meth:`children`, without blocking the event loop."""
        return await self.request_async(Children(self.ref))

    def interrupt(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Interrupt a descendant's queued or running turn."""
        return self.request(Interrupt(self.ref, ref, field))

    async def interrupt_async(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        return await self.request_async(Interrupt(self.ref, ref, field))

    def interrupt_tree(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """Interrupt the queued and running turns of a descendant's subtree, leaves first."""
        return self.request(InterruptTree(self.ref, ref, field))

    async def interrupt_tree_async(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """Like :meth:`interrupt_tree`, without blocking the event loop."""
        return await self.request_async(InterruptTree(self.ref, ref, field))

    def close(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Close a descendant that has no live children.

        Raises:
            ActiveDescendants: it still has live children.
        """
        return self.request(Close(self.ref, ref, field))

    async def close_async(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Like :meth:`close`, without blocking the event loop."""
        return await self.request_async(Close(self.ref, ref, field))

    def close_tree(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """Close a descendant and its whole live subtree, children first."""
        return self.request(CloseTree(self.ref, ref, field))

    async def close_tree_async(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        return await self.request_async(CloseTree(self.ref, ref, field))


_EVENT = "its wait's event went back"
_BATCH = "its batch went back"
