"""The turn context a runner receives: its task, its messages, and the coordinator operations.

Every operation is a request to the supervisor answered through a future, so
a runner never blocks the supervisor, and never asks an ancestor anything:
replies travel as futures, never as asks up the tree. Each operation is
written once, as a generator of requests; the blocking face waits on each
request's future, the ``*_async`` face awaits it (``asyncio.wrap_future``), so
both share one logic, the give-up-on-timeout rule of waits included.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol, TypeVar

from retinue.actors.commands import (
    Children,
    Close,
    CloseTree,
    Command,
    GiveBack,
    GiveUpWait,
    Interrupt,
    InterruptTree,
    RunMany,
    Send,
    Spawn,
    SpawnRequest,
    TurnRef,
    Wait,
)
from retinue.actors.executor import poster
from retinue.actors.profile import Profile
from retinue.actors.reply import Reply
from retinue.errors import (
    BlockingCallInAsyncRunner,
    FanoutLimitExceeded,
    InvalidArgument,
    RetinueError,
    TurnInterrupted,
)
from retinue.protocol.checks import check_seconds
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message

__all__ = [
    "Caller",
    "Turn",
    "await_waiter",
    "resolve_timeout",
    "wait_events",
    "wait_result",
    "wait_result_async",
]

_T = TypeVar("_T")


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
        ArgumentTypeError: not a number.
        InvalidArgument: NaN, infinite, negative, or above ``wait_max_s``.
    """
    if timeout is None:
        return limits.wait_default_s
    seconds = check_seconds(timeout, "timeout")
    if seconds > limits.wait_max_s:
        raise InvalidArgument(
            f"timeout {timeout} exceeds wait_max_s {limits.wait_max_s}; raise the limit"
        )
    return seconds


def _expire(future: concurrent.futures.Future[Any], give_up: Callable[[], None]) -> None:
    """The waiter's time ran out: ask the supervisor to give the wait up unless it was answered.

    The one give-up rule of both faces (:func:`wait_result`, :func:`wait_result_async`).
    """
    if not future.done():
        give_up()


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
        _expire(future, give_up)
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
    answered = await _when_done(loop, future, timeout)
    if not answered:
        _expire(future, give_up)
        await _when_done(loop, future, None)
    return future.result()


def _when_done(
    loop: asyncio.AbstractEventLoop, future: concurrent.futures.Future[Any], timeout: float | None
) -> asyncio.Future[bool]:
    """Return a loop future that turns True once ``future`` is done, False after ``timeout``."""
    ready: asyncio.Future[bool] = loop.create_future()

    def mark(answered: bool) -> None:
        if not ready.done():
            ready.set_result(answered)

    post = poster(loop)

    def on_done(_: concurrent.futures.Future[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits
            post(mark, True)

    if timeout is not None:  # the timer goes once the answer is in or the await is cancelled
        timer = loop.call_later(timeout, mark, False)
        ready.add_done_callback(lambda _: timer.cancel())
    future.add_done_callback(on_done)
    return ready


async def wait_result_async(
    future: concurrent.futures.Future[Any],
    timeout: float,
    give_up: Callable[[], None],
    give_back: Callable[[], None],
) -> Any:
    """A turn's wait from asyncio: :func:`await_waiter`; a cancelled await loses nothing.

    If nothing was handed over yet, the supervisor forgets the wait (so the
    turn may wait again); if an event was handed over, ``give_back()`` runs
    once it has arrived (the turn gives it back unless a cancel took it back
    first).

    Raises:
        WaitTimeout: nothing arrived in time; the awaited agent keeps running.
    """
    try:
        return await await_waiter(future, timeout, give_up)
    except asyncio.CancelledError:
        if future.cancel():
            give_up()
        else:
            future.add_done_callback(lambda _: give_back())
        raise


class _Ask:
    """A request already sent to the supervisor; its answer is the reply future's value."""

    __slots__ = ("future",)

    def __init__(self, future: concurrent.futures.Future[Any]) -> None:
        self.future = future

    def sync(self) -> Any:
        return self.future.result()

    async def async_(self) -> Any:
        await _when_done(asyncio.get_running_loop(), self.future, None)
        return self.future.result()


class _Wait:
    """A wait already registered with the supervisor, with its time and its give-up.

    ``receive(value)`` checks what the wait returns before the runner sees it
    (an event the turn's cancel took back is not returned); ``give_back()``
    returns the event of a cancelled async wait.
    """

    __slots__ = ("future", "give_back", "give_up", "receive", "timeout")

    def __init__(
        self,
        future: concurrent.futures.Future[Any],
        timeout: float,
        give_up: Callable[[], None],
        receive: Callable[[Any, bool], Any],
        give_back: Callable[[], None],
    ) -> None:
        self.future = future
        self.timeout = timeout
        self.give_up = give_up
        self.receive = receive
        self.give_back = give_back

    def sync(self) -> Any:
        return self.receive(wait_result(self.future, self.timeout, self.give_up), False)

    async def async_(self) -> Any:
        value = await wait_result_async(self.future, self.timeout, self.give_up, self.give_back)
        return self.receive(value, True)


# An operation's logic: a generator that sends requests and yields them; the
# sync face blocks on each, the async face awaits each. One logic, two faces.
_Steps = Generator[_Ask | _Wait, Any, _T]


def _drive(steps: _Steps[_T]) -> _T:
    try:
        request = next(steps)
        while True:
            try:
                value = request.sync()
            except Exception as exc:
                request = steps.throw(exc)
            except BaseException:
                steps.close()  # its clean-up (a give-back) runs now, not when collected
                raise
            else:
                request = steps.send(value)
    except StopIteration as stop:
        result: _T = stop.value
        return result


async def _drive_async(steps: _Steps[_T]) -> _T:
    try:
        request = next(steps)
        while True:
            try:
                value = await request.async_()
            except Exception as exc:
                request = steps.throw(exc)
            except BaseException:  # the task was cancelled
                steps.close()  # its clean-up (a give-back) runs now, not when collected
                raise
            else:
                request = steps.send(value)
    except StopIteration as stop:
        result: _T = stop.value
        return result


def wait_events(value: object) -> list[Message | Completion]:
    """Return the events a wait's answer carries (what the supervisor handed to the turn).

    An event itself, or a batch's completions (its errors hold nothing); none otherwise.
    """
    if isinstance(value, Message | Completion):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, Completion)]
    return []


def _ignore(_: object) -> None:
    """Discard a value (the reply of a fire-and-forget request)."""


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
        reason: why the turn runs: ``spawn``, ``follow_up``, ``wake`` or ``resume``.
        instructions: the profile's instructions.
        profile: the agent's :class:`~retinue.actors.profile.Profile`.
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
        profile: Profile | None = None,
    ) -> None:
        """Create the context (the supervisor does this)."""
        self.agent = agent
        self.task = task
        self.messages = list(messages)
        self.reason = reason
        self.instructions = instructions
        self.profile = profile if profile is not None else Profile(agent.profile)
        self.cancelled = threading.Event()
        self.limits = limits
        self.runner_returned = False  # set by the executor once the runner is done
        self.runner_started = False  # set by the executor as the runner starts
        self.loop_thread: int | None = None  # an async turn's event-loop thread
        self._caller = caller
        self._me = TurnRef(agent.id, agent.generation)
        self._cancel_lock = threading.Lock()
        self._on_cancel: list[Callable[[], None]] = []
        # Events the supervisor took for this turn's waits that its runner has
        # not received yet, by wait future (see hand/receive/reclaim).
        self._held: dict[concurrent.futures.Future[Any], list[Message | Completion]] = {}

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

    def hand(
        self, future: concurrent.futures.Future[Any], events: list[Message | Completion]
    ) -> None:
        """Record that the supervisor took ``events`` for the wait answered by ``future``.

        Until the runner receives it (:meth:`receive`), a cancel may take it
        back (:meth:`reclaim`): whichever comes first owns it.
        """
        with self._cancel_lock:
            self._held[future] = events

    def receive(self, future: concurrent.futures.Future[Any]) -> bool:
        """Claim the event of a wait's ``future`` for the runner; False if it went back.

        Atomic with :meth:`reclaim`: the runner sees an event only if the
        supervisor did not give it back, and the supervisor gives back only
        what no runner saw.
        """
        with self._cancel_lock:
            return self._held.pop(future, None) is not None

    def reclaim(
        self, future: concurrent.futures.Future[Any] | None = None
    ) -> list[Message | Completion]:
        """Take back events handed to waits that the runner has not received.

        Those of every wait, or of the wait answered by ``future`` only. The
        caller gives them back to the agent (they are pending or unread again).
        """
        with self._cancel_lock:
            if future is None:
                held, self._held = self._held, {}
                return [event for events in held.values() for event in events]
            return self._held.pop(future, [])

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` when the turn is cancelled (at once if it already is)."""
        with self._cancel_lock:
            if not self.cancelled.is_set():
                self._on_cancel.append(hook)
                return
        hook()

    # -- the two faces ------------------------------------------------------------------

    def _sync(self, steps: _Steps[_T]) -> _T:
        if self.loop_thread is not None and threading.get_ident() == self.loop_thread:
            steps.close()
            raise BlockingCallInAsyncRunner(
                "a blocking turn operation was called from an async runner; "
                "await its *_async twin (for example `await turn.wait_async(...)`)"
            )
        return _drive(steps)

    def _ask(self, command: Command[Any]) -> _Ask:
        return _Ask(self._caller(command))

    # -- operations: each is one generator, run by a sync and an async face ----------------

    def _spawn_steps(
        self, profile: str, task: str, name: str | None, idempotency_key: str | None = None
    ) -> _Steps[AgentInfo]:
        info: AgentInfo = yield self._ask(
            Spawn(self._me, profile, task, name, idempotency_key=idempotency_key)
        )
        return info

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
            UnknownProfile, NotPermitted, DuplicateAgentPath, DepthLimitExceeded,
            FanoutLimitExceeded, AgentLimitExceeded, InvalidAgentPath,
            DedupKeyTooLong, InvalidArgument, TurnInterrupted: as the
            supervisor's rules say.
        """
        return self._sync(self._spawn_steps(profile, task, name, idempotency_key))

    async def spawn_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
    ) -> AgentInfo:
        """Like :meth:`spawn`, without blocking the event loop."""
        return await _drive_async(self._spawn_steps(profile, task, name, idempotency_key))

    def _run_steps(
        self, profile: str, task: str, name: str | None, timeout: float | None
    ) -> _Steps[Completion]:
        wait_s = resolve_timeout(timeout, self.limits)
        child = yield from self._spawn_steps(profile, task, name)
        result: Completion = yield self._wait_request(child.id, "completion", wait_s)
        return result

    def run(
        self, profile: str, task: str, *, name: str | None = None, timeout: float | None = None
    ) -> Completion:
        """Spawn a child and wait for its completion.

        Raises:
            WaitTimeout: the child did not settle in time (it keeps running);
            and everything ``spawn`` raises.
        """
        return self._sync(self._run_steps(profile, task, name, timeout))

    async def run_async(
        self, profile: str, task: str, *, name: str | None = None, timeout: float | None = None
    ) -> Completion:
        """Like :meth:`run`, without blocking the event loop."""
        return await _drive_async(self._run_steps(profile, task, name, timeout))

    def _run_many_steps(
        self, requests: Sequence[tuple[str, str]], timeout: float | None
    ) -> _Steps[list[Completion | RetinueError]]:
        wait_s = resolve_timeout(timeout, self.limits)
        items = list(requests)
        if len(items) > self.limits.fanout_cap:
            raise FanoutLimitExceeded(
                f"run_many got {len(items)} requests; fanout_cap is {self.limits.fanout_cap}",
                limit=self.limits.fanout_cap,
                value=len(items),
                path=self.agent.path,
            )
        for item in items:
            if not (isinstance(item, tuple | list) and len(item) == 2):
                raise InvalidArgument("run_many takes a list of (profile, task) pairs")
        # One command spawns the batch and waits for it: answered once every
        # child is done, its completions taken (and received here) together.
        spawn = [SpawnRequest(p, t) for p, t in items]
        results: list[Completion | RetinueError] = yield self._register_wait(
            RunMany(self._me, spawn), wait_s, "its batch went back"
        )
        return results

    def run_many(
        self, requests: Sequence[tuple[str, str]], timeout: float | None = None
    ) -> list[Completion | RetinueError]:
        """Run several children at once; return their completions in request order.

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
        return self._sync(self._run_many_steps(requests, timeout))

    async def run_many_async(
        self, requests: Sequence[tuple[str, str]], timeout: float | None = None
    ) -> list[Completion | RetinueError]:
        """Like :meth:`run_many`, without blocking the event loop."""
        return await _drive_async(self._run_many_steps(requests, timeout))

    def _send_steps(
        self, ref: str, content: str, dedup_key: str | None, field: str
    ) -> _Steps[Message]:
        message: Message = yield self._ask(Send(self._me, ref, content, dedup_key, field))
        return message

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
        return self._sync(self._send_steps(ref, content, dedup_key, field))

    async def send_async(
        self, ref: str, content: str, *, dedup_key: str | None = None, field: str = "ref"
    ) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        return await _drive_async(self._send_steps(ref, content, dedup_key, field))

    def _wait_steps(
        self, ref: str, timeout: float | None, field: str
    ) -> _Steps[Message | Completion]:
        wait_s = resolve_timeout(timeout, self.limits)
        result: Message | Completion = yield self._wait_request(ref, "any", wait_s, field)
        return result

    def wait(
        self, ref: str, timeout: float | None = None, *, field: str = "ref"
    ) -> Message | Completion:
        """Return the next event from a child: a message it sent here, or its completion.

        Raises:
            WaitTimeout: nothing arrived in time; the child keeps running.
            NotPermitted: ``ref`` is not this agent's child.
        """
        return self._sync(self._wait_steps(ref, timeout, field))

    async def wait_async(
        self, ref: str, timeout: float | None = None, *, field: str = "ref"
    ) -> Message | Completion:
        """Like :meth:`wait`, without blocking the event loop."""
        return await _drive_async(self._wait_steps(ref, timeout, field))

    def _give_back(self, futures: Sequence[concurrent.futures.Future[Any]]) -> None:
        """Give back the events these waits took that no runner received (a cancel took none)."""
        for future in futures:
            for event in self.reclaim(future):
                with contextlib.suppress(RetinueError):
                    _ignore(self._caller(GiveBack(self.agent.id, event)))

    def _wait_request(self, ref: str, kind: str, timeout: float, field: str = "ref") -> _Wait:
        """Register a wait for the next event from the child ``ref``."""
        return self._register_wait(
            Wait(self._me, ref, kind, field), timeout, "its wait's event went back"
        )

    def _register_wait(self, command: Wait | RunMany, timeout: float, went_back: str) -> _Wait:
        """Send a wait command; return it with its give-up, its receipt and its give-back."""
        future: concurrent.futures.Future[Any] = Reply()
        self._caller(command, reply=future)

        def give_up() -> None:
            with contextlib.suppress(RetinueError):  # closed meanwhile: the wait is failed
                _ignore(self._caller(GiveUpWait(self._me, future, timeout)))

        def receive(value: Any, in_task: bool) -> Any:
            if not wait_events(value) or self.receive(future):
                return value
            # The turn was cancelled and the supervisor took the events back first.
            if in_task:
                raise asyncio.CancelledError
            raise TurnInterrupted(f"{self.agent.path} was interrupted; {went_back}")

        def give_back() -> None:  # a cancelled task never saw the events: they go back
            self._give_back([future])

        return _Wait(future, timeout, give_up, receive, give_back)

    def _children_steps(self) -> _Steps[list[AgentInfo]]:
        result: list[AgentInfo] = yield self._ask(Children(self._me))
        return result

    def children(self) -> list[AgentInfo]:
        """Return this agent's live children."""
        return self._sync(self._children_steps())

    async def children_async(self) -> list[AgentInfo]:
        """Like :meth:`children`, without blocking the event loop."""
        return await _drive_async(self._children_steps())

    def _one_steps(self, command: Command[_T]) -> _Steps[_T]:
        result: _T = yield self._ask(command)
        return result

    def interrupt(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Interrupt a descendant's queued or running turn."""
        info: AgentInfo = self._sync(self._one_steps(Interrupt(self._me, ref, field)))
        return info

    async def interrupt_async(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        info: AgentInfo = await _drive_async(self._one_steps(Interrupt(self._me, ref, field)))
        return info

    def interrupt_tree(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """Interrupt the queued and running turns of a descendant's subtree, leaves first."""
        infos: list[AgentInfo] = self._sync(self._one_steps(InterruptTree(self._me, ref, field)))
        return infos

    async def interrupt_tree_async(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """Like :meth:`interrupt_tree`, without blocking the event loop."""
        infos: list[AgentInfo] = await _drive_async(
            self._one_steps(InterruptTree(self._me, ref, field))
        )
        return infos

    def close(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Close a descendant that has no live children.

        Raises:
            ActiveDescendants: it still has live children.
        """
        info: AgentInfo = self._sync(self._one_steps(Close(self._me, ref, field)))
        return info

    async def close_async(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Like :meth:`close`, without blocking the event loop."""
        info: AgentInfo = await _drive_async(self._one_steps(Close(self._me, ref, field)))
        return info

    def close_tree(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """Close a descendant and its whole live subtree, children first."""
        infos: list[AgentInfo] = self._sync(self._one_steps(CloseTree(self._me, ref, field)))
        return infos

    async def close_tree_async(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        infos: list[AgentInfo] = await _drive_async(
            self._one_steps(CloseTree(self._me, ref, field))
        )
        return infos
