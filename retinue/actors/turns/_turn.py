"""The turn context a runner receives: its task, its messages, and the coordinator operations.

Every operation is one command to the supervisor through the runtime's
:class:`~retinue.actors.calls._engine.Engine` (the host's calls use the same one),
so a runner never blocks the supervisor and never asks an ancestor anything:
replies travel as futures, never as asks up the tree. Each operation has a
blocking face for sync runners and an ``*_async`` twin for async runners; both
are one line over the same command, and the engine owns the rules of waits
(giving up in time, giving back what a cancelled await was handed).

:class:`Turn` is what the runner may use; it is composed with a private
:class:`~retinue.actors.turns._control.TurnControl` that holds the rest (the
turn's cancellation and the executor's flags, its two faces onto the engine,
its watch and trace, and the operations with the tool layer's field names),
which the supervisor, the executor and the LLM layer reach through
:func:`control_of`. The turn's side of a wait is
:class:`~retinue.actors.turns._receipt.TurnReceipt`. Only the runtime makes a
:class:`Turn` (:class:`~retinue.actors.turns._constructor.NoPublicConstructor`).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from retinue.actors.commands import Command, TurnRef
from retinue.actors.turns._constructor import NoPublicConstructor
from retinue.actors.turns._control import BatchRequest, TurnControl
from retinue.errors import RetinueError
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message

if TYPE_CHECKING:
    from retinue.actors import Profile

__all__ = ["BatchRequest", "Runner", "Turn", "control_of"]

R = TypeVar("R")

Runner = Callable[["Turn"], str | Awaitable[str]]
"""Anything that takes a turn context and returns the turn's output text.

A plain function runs on a pooled worker thread; an ``async def`` runner (or an
object whose ``__call__`` is ``async def``) runs as a task on the runtime's
event loop and should use the turn's ``*_async`` operations.
"""


class _Shown:
    """An attribute of the turn's control that its :class:`Turn` shows: read and written
    there (a runner's ``turn.limits = ...`` is what the turn's tools then see)."""

    __slots__ = ("name",)

    def __init__(self) -> None:
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, turn: Turn | None, owner: type) -> Any:
        return self if turn is None else getattr(turn._control, self.name)

    def __set__(self, turn: Turn, value: Any) -> None:
        setattr(turn._control, self.name, value)


class Turn(metaclass=NoPublicConstructor):
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
        ref: this turn as a command sender (its agent id and generation: what
            :meth:`request` sends a command as).

    Only the runtime makes a turn (calling ``Turn(...)`` raises
    :class:`TypeError`): to run a runner, give it to a
    :class:`~retinue.actors._profile.Profile` and spawn the agent in a
    :class:`~retinue.runtime._runtime.Runtime`. What the runtime does with the
    turn (its cancellation, what its waits were handed, its watch and trace)
    is held by a private control object the runner never sees.
    """

    _no_constructor = (
        "the runtime makes one for each turn and passes it to the agent's runner; to run a "
        "runner, give it to a Profile (Profile('name', runner=...)) and spawn the agent in a "
        "Runtime"
    )

    if TYPE_CHECKING:  # what the runner reads (and may write): the control's own
        agent: AgentInfo
        task: str
        messages: list[Message]
        cancelled: threading.Event
        reason: str
        origin: str
        profile: Profile
        instructions: str
        limits: Limits
        ref: TurnRef
    else:
        agent = _Shown()
        task = _Shown()
        messages = _Shown()
        cancelled = _Shown()
        reason = _Shown()
        origin = _Shown()
        profile = _Shown()
        instructions = _Shown()
        limits = _Shown()
        ref = _Shown()

    def __init__(self, control: TurnControl) -> None:
        """Show ``control``'s turn to its runner (the runtime's way: ``Turn._create(control)``)."""
        self._control = control

    @property
    def attempt(self) -> int:
        """The run of this turn's task: 1 for a first run, n for its (n-1)th restart."""
        return self._control.attempt

    def request(self, command: Command[R]) -> R:
        """Send one command of this turn to the supervisor and block for its answer.

        Raises:
            BlockingCallInAsyncRunner: called from an async runner.
            TurnInterrupted: the turn is no longer running; and whatever the command raises.
        """
        return self._control.request(command)

    async def request_async(self, command: Command[R]) -> R:
        """Like :meth:`request`, without blocking the event loop."""
        return await self._control.request_async(command)

    # -- operations ---------------------------------------------------------------------

    def spawn(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
    ) -> AgentInfo:
        """Spawn a child and return at once; its completion arrives in this agent's mailbox.

        A spawn with an ``idempotency_key`` this agent already used returns
        the child that spawn made instead of a second one (keys are scoped to
        the parent and survive a reopen; see ``Runtime.spawn``).

        Raises:
            UnknownProfile, NotPermitted, DuplicateAgentPath: as the supervisor's
                rules say, and so do DepthLimitExceeded, FanoutLimitExceeded,
                AgentLimitExceeded, InvalidAgentPath, DedupKeyTooLong,
                InvalidArgument and TurnInterrupted.
        """
        return self._control.spawn(profile, task, name=name, idempotency_key=idempotency_key)

    async def spawn_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
    ) -> AgentInfo:
        """Like :meth:`spawn`, without blocking the event loop."""
        return await self._control.spawn_async(
            profile, task, name=name, idempotency_key=idempotency_key
        )

    def run(
        self, profile: str, task: str, *, name: str | None = None, timeout: float | None = None
    ) -> Completion:
        """Spawn a child and wait for its completion.

        Raises:
            WaitTimeout: the child did not settle in time (it keeps running);
                and everything ``spawn`` raises.
        """
        return self._control.run(profile, task, name=name, timeout=timeout)

    async def run_async(
        self, profile: str, task: str, *, name: str | None = None, timeout: float | None = None
    ) -> Completion:
        """Like :meth:`run`, without blocking the event loop."""
        return await self._control.run_async(profile, task, name=name, timeout=timeout)

    def run_many(
        self, requests: Sequence[BatchRequest], timeout: float | None = None
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
        return self._control.run_many(requests, timeout)

    async def run_many_async(
        self,
        requests: Sequence[BatchRequest],
        timeout: float | None = None,
        *,
        keys: Sequence[str | None] | None = None,
    ) -> list[Completion | RetinueError]:
        """Like :meth:`run_many`, without blocking the event loop; ``keys`` gives each
        request's spawn an idempotency key (see :meth:`spawn`)."""
        return await self._control.run_many_async(requests, timeout, keys=keys)

    def send(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Send a message to this agent's parent, a child or a sibling.

        Raises:
            NotPermitted, UnknownAgent, AgentClosed: as the mailbox rules say,
                and so do MessageTooLarge, DedupKeyTooLong and MailboxFull.
        """
        return self._control.send(ref, content, dedup_key=dedup_key)

    async def send_async(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        return await self._control.send_async(ref, content, dedup_key=dedup_key)

    def wait(self, ref: str, timeout: float | None = None) -> Message | Completion:
        """Return the next event from a child: a message it sent here, or its completion.

        Raises:
            WaitTimeout: nothing arrived in time; the child keeps running.
            NotPermitted: ``ref`` is not this agent's child.
        """
        return self._control.wait(ref, timeout)

    async def wait_async(self, ref: str, timeout: float | None = None) -> Message | Completion:
        """Like :meth:`wait`, without blocking the event loop."""
        return await self._control.wait_async(ref, timeout)

    def children(self) -> list[AgentInfo]:
        """Return this agent's live children."""
        return self._control.children()

    async def children_async(self) -> list[AgentInfo]:
        """Like :meth:`children`, without blocking the event loop."""
        return await self._control.children_async()

    def interrupt(self, ref: str) -> AgentInfo:
        """Interrupt a descendant's queued or running turn."""
        return self._control.interrupt(ref)

    async def interrupt_async(self, ref: str) -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        return await self._control.interrupt_async(ref)

    def interrupt_tree(self, ref: str) -> list[AgentInfo]:
        """Interrupt the queued and running turns of a descendant's subtree, leaves first."""
        return self._control.interrupt_tree(ref)

    async def interrupt_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`interrupt_tree`, without blocking the event loop."""
        return await self._control.interrupt_tree_async(ref)

    def close(self, ref: str) -> AgentInfo:
        """Close a descendant that has no live children.

        Raises:
            ActiveDescendants: it still has live children.
        """
        return self._control.close(ref)

    async def close_async(self, ref: str) -> AgentInfo:
        """Like :meth:`close`, without blocking the event loop."""
        return await self._control.close_async(ref)

    def close_tree(self, ref: str) -> list[AgentInfo]:
        """Close a descendant and its whole live subtree, children first."""
        return self._control.close_tree(ref)

    async def close_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        return await self._control.close_tree_async(ref)


def control_of(turn: Turn) -> TurnControl:
    """Return the private control object ``turn`` is composed with (the runtime's accessor:
    the supervisor, the executor and the LLM layer use it; a runner never does)."""
    return turn._control
