"""The turn context a runner receives: its task, its messages, and the coordinator operations.

Every operation is a request to the supervisor answered through a future, so
a runner (on its agent's thread) never blocks the supervisor, and never asks
an ancestor anything: replies travel as futures, never as asks up the tree.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from retinue.actors.commands import (
    Children,
    Close,
    CloseTree,
    Command,
    GiveUpWait,
    Interrupt,
    Send,
    Spawn,
    SpawnMany,
    SpawnRequest,
    TurnRef,
    Wait,
)
from retinue.errors import FanoutLimitExceeded, InvalidArgument, RetinueError, WaitTimeout
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message

__all__ = ["Caller", "Turn", "resolve_timeout", "wait_result"]

R = TypeVar("R")


class Caller(Protocol):
    """Submit a command to the supervisor; return the future it answers.

    ``reply`` is the future to answer (a fresh one if None).

    Raises:
        RuntimeClosed: the runtime is closed or closing.
    """

    def __call__(
        self, command: Command[Any], reply: concurrent.futures.Future[Any] | None = None
    ) -> concurrent.futures.Future[Any]:
        """Submit ``command``."""
        ...


def resolve_timeout(timeout: float | None, limits: Limits) -> float:
    """Return the wait time to use: ``wait_default_s`` for None.

    Raises:
        InvalidArgument: negative, or above ``wait_max_s``.
    """
    if timeout is None:
        return limits.wait_default_s
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidArgument(f"timeout must be a number of seconds, not {timeout!r}")
    if timeout < 0:
        raise InvalidArgument("timeout must not be negative")
    if timeout > limits.wait_max_s:
        raise InvalidArgument(
            f"timeout {timeout} exceeds wait_max_s {limits.wait_max_s}; raise the limit"
        )
    return float(timeout)


def wait_result(
    future: concurrent.futures.Future[Any], timeout: float, give_up: Callable[[], None]
) -> Any:
    """Wait for a waiter future; on timeout ask the supervisor to give the wait up.

    The supervisor settles the race on its own thread: the future ends with
    the event if one was taken in time, or with ``WaitTimeout`` (and nothing
    consumed). So a wait with ``timeout=0`` still returns an event that was
    already there.

    Raises:
        WaitTimeout: nothing arrived in time; the awaited agent keeps running.
    """
    try:
        return future.result(timeout=timeout)
    except TimeoutError:
        if not future.done():
            give_up()
        return future.result()


async def await_waiter(
    future: concurrent.futures.Future[Any], timeout: float, give_up: Callable[[], None]
) -> Any:
    """Await a waiter future from asyncio; on timeout ask the supervisor to give the wait up.

    Like :func:`wait_result`, without blocking the loop. The loop is only told
    that ``future`` is done; its value is read here, so nothing is left in an
    asyncio future if the awaiting task is cancelled (the caller decides what
    a cancelled wait gives back).

    Raises:
        WaitTimeout: nothing arrived in time; and whatever the wait ended with.
    """
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def mark_ready() -> None:
        if not ready.done():
            ready.set_result(None)

    def on_done(_: concurrent.futures.Future[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits
            loop.call_soon_threadsafe(mark_ready)

    future.add_done_callback(on_done)
    done, _ = await asyncio.wait({ready}, timeout=timeout)
    if not done:
        give_up()
        await asyncio.shield(ready)
    return future.result()


def _ignore(_: object) -> None:
    """Discard a value (the reply of a fire-and-forget request)."""


class Turn:
    """One turn of one agent, as its runner sees it.

    Attributes:
        agent: the agent as it was when the turn started.
        task: the task of this turn.
        messages: unread messages in arrival order, children's completions
            among them as ``Message(kind="completion", completion=...)``.
        cancelled: set when the turn is interrupted; a runner should stop.
        reason: why the turn runs: ``spawn``, ``follow_up``, ``wake`` or ``resume``.
        instructions: the profile's instructions.
    """

    def __init__(
        self,
        *,
        caller: Caller,
        agent: AgentInfo,
        task: str,
        messages: Sequence[Message],
        reason: str,
        instructions: str,
        limits: Limits,
    ) -> None:
        """Create the context (the supervisor does this)."""
        self.agent = agent
        self.task = task
        self.messages = list(messages)
        self.reason = reason
        self.instructions = instructions
        self.cancelled = threading.Event()
        self.limits = limits
        self._caller = caller
        self._me = TurnRef(agent.id, agent.generation)

    def _call(self, command: Command[R]) -> R:
        result: R = self._caller(command).result()
        return result

    def spawn(self, profile: str, task: str, *, name: str | None = None) -> AgentInfo:
        """Spawn a child and return at once; its completion arrives in this agent's mailbox.

        Raises:
            UnknownProfile, NotPermitted, DuplicateAgentPath, DepthLimitExceeded,
            FanoutLimitExceeded, AgentLimitExceeded, InvalidAgentPath,
            TurnInterrupted: as the supervisor's rules say.
        """
        return self._call(Spawn(self._me, profile, task, name))

    def run(
        self, profile: str, task: str, *, name: str | None = None, timeout: float | None = None
    ) -> Completion:
        """Spawn a child and wait for its completion.

        Raises:
            WaitTimeout: the child did not settle in time (it keeps running);
            and everything ``spawn`` raises.
        """
        wait_s = resolve_timeout(timeout, self.limits)
        child = self.spawn(profile, task, name=name)
        result: Completion = self._wait(child.id, "completion", wait_s)
        return result

    def run_many(
        self, requests: Sequence[tuple[str, str]], timeout: float | None = None
    ) -> list[Completion | RetinueError]:
        """Run several children at once; return their completions in request order.

        A refused spawn or a wait that ran out of time keeps its place as its
        error; the time budget is shared by the whole batch.

        Raises:
            FanoutLimitExceeded: more requests than ``fanout_cap``.
            InvalidArgument: a request is not a ``(profile, task)`` pair.
        """
        wait_s = resolve_timeout(timeout, self.limits)
        items = list(requests)
        if len(items) > self.limits.fanout_cap:
            raise FanoutLimitExceeded(
                f"run_many got {len(items)} requests; fanout_cap is {self.limits.fanout_cap}"
            )
        for item in items:
            if not (isinstance(item, tuple | list) and len(item) == 2):
                raise InvalidArgument("run_many takes a list of (profile, task) pairs")
        spawned = self._call(SpawnMany(self._me, [SpawnRequest(p, t) for p, t in items]))
        deadline = time.monotonic() + wait_s
        results: list[Completion | RetinueError] = []
        for entry in spawned:
            if isinstance(entry, RetinueError):
                results.append(entry)
                continue
            try:
                remaining = max(0.0, deadline - time.monotonic())
                results.append(self._wait(entry.id, "completion", remaining))
            except WaitTimeout as exc:
                results.append(exc)
        return results

    def send(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Send a message to this agent's parent, a child or a sibling.

        Raises:
            NotPermitted, UnknownAgent, AgentClosed, MessageTooLarge,
            DedupKeyTooLong, MailboxFull: as the mailbox rules say.
        """
        return self._call(Send(self._me, ref, content, dedup_key))

    def wait(self, ref: str, timeout: float | None = None) -> Message | Completion:
        """Return the next event from a child: a message it sent here, or its completion.

        Raises:
            WaitTimeout: nothing arrived in time; the child keeps running.
            NotPermitted: ``ref`` is not this agent's child.
        """
        result: Message | Completion = self._wait(ref, "any", resolve_timeout(timeout, self.limits))
        return result

    def _wait(self, ref: str, kind: str, timeout: float) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._caller(Wait(self._me, ref, kind), reply=future)
        return wait_result(
            future,
            timeout,
            lambda: _ignore(self._caller(GiveUpWait(self._me, future, timeout))),
        )

    def children(self) -> list[AgentInfo]:
        """Return this agent's live children."""
        return self._call(Children(self._me))

    def interrupt(self, ref: str) -> AgentInfo:
        """Interrupt a descendant's queued or running turn."""
        return self._call(Interrupt(self._me, ref))

    def close(self, ref: str) -> AgentInfo:
        """Close a descendant that has no live children.

        Raises:
            ActiveDescendants: it still has live children.
        """
        return self._call(Close(self._me, ref))

    def close_tree(self, ref: str) -> list[AgentInfo]:
        """Close a descendant and its whole live subtree, children first."""
        return self._call(CloseTree(self._me, ref))
