"""The turn context a runner receives: its task, its messages, and the coordinator operations.

Every operation is one command to the supervisor through the runtime's
:class:`~retinue.actors.engine.Engine` (the host's calls use the same one),
so a runner never blocks the supervisor and never asks an ancestor anything:
replies travel as futures, never as asks up the tree. Each operation has a
blocking face for sync runners and an ``*_async`` twin for async runners; both
are one line over the same command, and the engine owns the rules of waits
(giving up in time, giving back what a cancelled await was handed).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from retinue.actors.commands import (
    Children,
    Close,
    CloseTree,
    Command,
    GiveBack,
    Interrupt,
    InterruptTree,
    RunMany,
    Send,
    Spawn,
    SpawnRequest,
    TurnRef,
    Wait,
)
from retinue.actors.engine import Engine, WaitCommand, handed_events
from retinue.actors.handover import Handover
from retinue.actors.observer import QUIET, TurnWatch
from retinue.actors.waiting import resolve_timeout
from retinue.errors import (
    BlockingCallInAsyncRunner,
    InvalidArgument,
    RetinueError,
    TurnInterrupted,
)
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message

if TYPE_CHECKING:
    from retinue.actors.profile import Profile

__all__ = ["BatchRequest", "Runner", "Turn", "TurnReceipt"]

R = TypeVar("R")
Event = Message | Completion

BatchRequest = tuple[str, str] | tuple[str, str, str | None]
"""One child of ``run_many``: ``(profile, task)``, or ``(profile, task, name)``."""

Runner = Callable[["Turn"], str | Awaitable[str]]
"""Anything that takes a turn context and returns the turn's output text.

A plain function runs on a pooled worker thread; an ``async def`` runner (or an
object whose ``__call__`` is ``async def``) runs as a task on the runtime's
event loop and should use the turn's ``*_async`` operations.
"""


class TurnReceipt:
    """A turn's receipt: the supervisor hands a wait's events to the turn's ledger, and an
    interrupt takes back what the runner has not received (see :class:`Turn.handover`)."""

    __slots__ = ("turn", "went_back")

    def __init__(self, turn: Turn, went_back: str) -> None:
        """Receive for ``turn``; ``went_back`` ends the error of a wait an interrupt emptied."""
        self.turn = turn
        self.went_back = went_back

    def expect(self, future: concurrent.futures.Future[Any]) -> None:
        """Nothing to do: the supervisor records what it hands, as it hands it."""

    def abandon(self, future: concurrent.futures.Future[Any]) -> bool:
        """Always: the ledger decides at give-back time what is still unseen."""
        return True

    def give_back(self, future: concurrent.futures.Future[Any]) -> None:
        """The task never saw what this wait took: the events go back to the agent."""
        events = [e for held in self.turn.handover.take_back(future) for e in held]
        if events:
            self.turn.engine.tell(GiveBack(self.turn.agent.id, tuple(events)))

    def accept(self, future: concurrent.futures.Future[Any], value: Any, in_task: bool) -> Any:
        """Return the wait's ``value`` unless the turn's interrupt took its events back.

        Raises:
            asyncio.CancelledError: (an async turn) they went back: the task is cancelled.
            TurnInterrupted: (a sync turn) they went back.
        """
        keep = self.turn.keeps_receipts
        if not handed_events(value) or self.turn.handover.receive(future, keep=keep):
            return value
        if in_task:
            raise asyncio.CancelledError
        raise TurnInterrupted(f"{self.turn.agent.path} was interrupted; {self.went_back}")


class Turn:
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
        cancelled: set when the turn is interrupted; a runner should stop.
        reason: why the turn runs: ``spawn``, ``follow_up``, ``wake``, ``resume``,
            ``restart`` (a restart policy runs a failed or lost turn again) or
            ``approval`` (a model turn carries on after its approvals were
            answered in a new process).
        attempt: the run of this task: 1, or n for the (n-1)th restart.
        instructions: the profile's instructions.
        profile: the agent's :class:`~retinue.actors.profile.Profile`.
        limits: the runtime's limits.
        ref: this turn as a command sender (its agent id and generation).
        engine: the runtime's call engine (what :meth:`request` and every operation use).
        handover: events the supervisor took for this turn's waits that its
            runner has not received yet (an interrupt takes them back).
        watch: where the turn reports its model and tool calls as they happen
            (:mod:`retinue.actors.observer`); set as its runner starts.
        trace: the agent's stored trace context (W3C ``traceparent``), the
            parent of this turn's span; ``cause``: the span that caused this
            turn (a link); ``root_id``: its top-level agent's id (the trace's
            conversation). Set when the runtime traces.
    """

    def __init__(
        self,
        *,
        engine: Engine,
        agent: AgentInfo,
        task: str,
        messages: Sequence[Message],
        reason: str,
        limits: Limits,
        profile: Profile,
        keeps_receipts: bool = False,
    ) -> None:
        """Create the context (the supervisor does this).

        ``keeps_receipts``: the runner stores what its waits receive (a model
        runner's transcript); until it did, an interrupt gives it back.
        """
        self.agent = agent
        self.task = task
        self.messages = list(messages)
        self.reason = reason
        self.profile = profile
        self.instructions = profile.instructions
        self.cancelled = threading.Event()
        self.limits = limits
        self.engine = engine
        self.ref = TurnRef(agent.id, agent.generation)
        self.handover: Handover[list[Event]] = Handover()
        self.keeps_receipts = keeps_receipts
        self.runner_returned = False  # set by the executor once the runner is done
        self.runner_started = False  # set by the executor as the runner starts
        self.loop_thread: int | None = None  # an async turn's event-loop thread
        self.watch: TurnWatch = QUIET
        self.trace: str | None = None
        self.cause: str | None = None
        self.root_id = agent.id
        self._cancel_lock = threading.Lock()
        self._on_cancel: list[Callable[[], None]] = []

    @property
    def attempt(self) -> int:
        """The run of this turn's task: 1 for a first run, n for its (n-1)th restart."""
        return self.agent.attempt

    # -- cancellation (the supervisor's side) ---------------------------------------

    def cancel(self) -> bool:
        """Mark the turn cancelled and run its cancel hooks (an async turn's task is cancelled).

        Returns whether its runner had started: one that had not never will
        (:meth:`claim_start` refuses it), so the supervisor gives the turn's
        inputs back in the same transition and nothing it was handed is lost.
        """
        with self._cancel_lock:
            self.cancelled.set()
            started = self.runner_started
            hooks, self._on_cancel = self._on_cancel, []
        for hook in hooks:
            hook()
        return started

    def claim_start(self) -> bool:
        """Claim the turn for its runner (the executor calls this just before running it).

        Returns False if the turn was cancelled first: the runner must not
        run, its inputs already went back. Atomic with :meth:`cancel`.
        """
        with self._cancel_lock:
            if self.cancelled.is_set():
                return False
            self.runner_started = True
            return True

    def while_running(self, action: Callable[[], None]) -> bool:
        """Run ``action()`` unless the turn is cancelled; return whether it ran.

        Atomic with :meth:`cancel`: what runs here (a live event published)
        happens before an interrupt's transition, or not at all.
        """
        with self._cancel_lock:
            if self.cancelled.is_set():
                return False
            action()
            return True

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` when the turn is cancelled (at once if it already is)."""
        with self._cancel_lock:
            if not self.cancelled.is_set():
                self._on_cancel.append(hook)
                return
        hook()

    # -- the two faces ------------------------------------------------------------------

    def _blocking(self) -> None:
        """Refuse a blocking operation on the runtime's event loop.

        Raises:
            BlockingCallInAsyncRunner: an async runner called a blocking form.
        """
        if self.loop_thread is not None and threading.get_ident() == self.loop_thread:
            raise BlockingCallInAsyncRunner(
                "a blocking turn operation was called from an async runner; "
                "await its *_async twin (for example `await turn.wait_async(...)`)"
            )

    def request(self, command: Command[R]) -> R:
        """Send one command of this turn to the supervisor and block for its answer.

        Raises:
            BlockingCallInAsyncRunner: called from an async runner.
            TurnInterrupted: the turn is no longer running; and whatever the command raises.
        """
        self._blocking()
        return self.engine.ask(command)

    async def request_async(self, command: Command[R]) -> R:
        """Like :meth:`request`, without blocking the event loop."""
        return await self.engine.ask_async(command)

    def _wait(self, command: WaitCommand, seconds: float, went_back: str) -> Any:
        self._blocking()
        return self.engine.wait(command, seconds, TurnReceipt(self, went_back))

    async def _wait_async(self, command: WaitCommand, seconds: float, went_back: str) -> Any:
        return await self.engine.wait_async(command, seconds, TurnReceipt(self, went_back))

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
            UnknownProfile, NotPermitted, DuplicateAgentPath, DepthLimitExceeded,
            FanoutLimitExceeded, AgentLimitExceeded, InvalidAgentPath,
            DedupKeyTooLong, InvalidArgument, TurnInterrupted: as the
            supervisor's rules say.
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

    def _run_many(self, requests: Sequence[BatchRequest], name_field: str = "name") -> RunMany:
        """The one command that spawns a batch and waits for it (answered once all are done).

        Raises:
            FanoutLimitExceeded: more requests than ``fanout_cap``.
            InvalidArgument: a request is not a ``(profile, task)`` pair or a
                ``(profile, task, name)`` triple.
        """
        items = list(requests)
        for item in items:
            if not (isinstance(item, tuple | list) and len(item) in (2, 3)):
                raise InvalidArgument(
                    "run_many takes a list of (profile, task) pairs or (profile, task, name)"
                )
        spawns = [
            SpawnRequest(item[0], item[1], item[2] if len(item) == 3 else None, name_field)
            for item in items
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
    ) -> list[Completion | RetinueError]:
        """Like :meth:`run_many`, without blocking the event loop."""
        seconds = resolve_timeout(timeout, self.limits)
        result: list[Completion | RetinueError] = await self._wait_async(
            self._run_many(requests, name_field), seconds, _BATCH
        )
        return result

    def send(
        self, ref: str, content: str, *, dedup_key: str | None = None, field: str = "ref"
    ) -> Message:
        """Send a message to this agent's parent, a child or a sibling.

        ``field`` is the name errors give ``ref`` (a tool layer passes its own
        argument's name, as every call here that takes a reference does).

        Raises:
            NotPermitted, UnknownAgent, AgentClosed, MessageTooLarge,
            DedupKeyTooLong, MailboxFull: as the mailbox rules say.
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
