"""The one engine of every call, the host's and the turns': submit a command, drive its answer.

A host call and a turn's call are the same problem: submit one typed command
through the runtime's :class:`~retinue.actors.calls._channel.Channel` and take its
answer, blocking or from asyncio, without ever losing what a wait was handed.
:class:`Engine` writes those rules once:

- :meth:`Engine.ask` / :meth:`Engine.ask_async`: a request and its answer;
- :meth:`Engine.wait` / :meth:`Engine.wait_async`: a wait that is given up in
  time (the supervisor settles the race: see :mod:`retinue.actors.calls._waiting`);
- the cancellation rule of an async wait: a wait not answered yet is given up
  (the supervisor forgets it); one answered already gives back what it took
  (:class:`~retinue.actors.commands.GiveBack`), so the next wait or turn
  receives it. Who may still claim an answer is decided by a
  :class:`Receipt`: the host's (:class:`HostReceipt`, whose ledger the
  runtime's close empties) or a turn's (:mod:`retinue.actors.turns._receipt`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from retinue.actors.calls._channel import Channel
from retinue.actors.calls._handover import HostLedger
from retinue.actors.calls._ready import Ready
from retinue.actors.calls._reply import TOLD, LoopReply, Reply
from retinue.actors.calls._waiting import (
    EXPIRED,
    await_answer,
    deadlines_of,
    fail_pending,
    poster,
    runtime_poster,
    wait_answer,
    when_done,
)
from retinue.actors.commands import (
    Command,
    GiveBack,
    GiveUpWait,
    HostMessages,
    Idle,
    ReleaseLease,
    Run,
    RunMany,
    Sender,
    Wait,
)
from retinue.errors import RetinueError, RuntimeClosed
from retinue.protocol.messages import Completion, Message

__all__ = ["Engine", "HostReceipt", "Receipt", "WaitCommand", "handed_events"]

R = TypeVar("R")
_Future = asyncio.Future
WaitCommand = Wait | Run | RunMany | HostMessages | Idle
"""The commands whose answer may take long: a wait, given up in time."""
_Expire = Callable[[asyncio.AbstractEventLoop, Any, float], object]
"""``expire(loop, ready, seconds)``: a host loop's deadlines (``deadlines_of``)."""


def handed_events(value: object) -> list[Message | Completion]:
    """Return the events a wait's answer hands its waiter (what a give-back returns).

    An event itself, a batch's completions (its errors hold nothing), or the
    host's messages; none otherwise.
    """
    if isinstance(value, Message | Completion):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, Message | Completion)]
    return []


class Receipt(Protocol):
    """How one kind of waiter claims an async wait's answer, or gives it back."""

    def expect(self, future: concurrent.futures.Future[Any]) -> None:
        """Before the wait is submitted."""

    def abandon(self, future: concurrent.futures.Future[Any]) -> bool:
        """The awaiting task ends without the answer: True if the wait's answer is still its own."""

    def give_back(self, future: concurrent.futures.Future[Any]) -> None:
        """Once answered: give back what the wait took (its task will never see it)."""

    def accept(self, future: concurrent.futures.Future[Any], value: Any, in_task: bool) -> Any:
        """The waiter has ``value``: return it, or raise if it was taken back meanwhile."""


class Engine:
    """Submits commands through one channel and drives their answers; thread-safe."""

    def __init__(self, channel: Channel) -> None:
        """Serve calls through ``channel``; the host's async waits are kept in :attr:`host`,
        and :attr:`receipt` is the receipt of those without a lease."""
        self.channel = channel
        # The host's async waits whose task has not received the answer, with their receipt.
        self.host: HostLedger[HostReceipt] = HostLedger()
        # The receipt of every host wait without a lease: one for all (it holds only this).
        self.receipt = HostReceipt(self)
        # The last host loop called from (held weakly), its poster and its waits' deadlines
        # (deadlines_of): found again with no Python call (poster's lookup is two, and a host
        # calls from one loop nearly always).
        self._host_loop: tuple[
            Callable[[], asyncio.AbstractEventLoop | None], Callable[..., Any], _Expire
        ] = (_no_loop, _no_post, _no_post)

    def _host_poster(self, loop: asyncio.AbstractEventLoop) -> tuple[Callable[..., Any], _Expire]:
        """The poster of ``loop``, a host's (not a runtime's) loop, and its deadlines'
        ``expire``; remembered for the next call."""
        post = poster(loop)
        expire = deadlines_of(post)
        self._host_loop = (weakref.ref(loop), post, expire)
        return post, expire

    def submit(
        self, command: Command[Any], reply: concurrent.futures.Future[Any] | None = None
    ) -> concurrent.futures.Future[Any]:
        """Hand ``command`` over; return the future it is answered on.

        Raises:
            RuntimeClosed, StoreReadOnly: as :meth:`Channel.submit` raises.
        """
        return self.channel.submit(command, reply)

    def tell(self, command: Command[Any]) -> None:
        """Hand ``command`` over without waiting; nothing happens if the runtime is closed.

        Its answer is dropped: it is answered on :data:`~retinue.actors.calls._reply.TOLD`,
        with no reply built for it.
        """
        try:  # noqa: SIM105  # not contextlib.suppress: three Python calls per command
            self.channel.submit(command, TOLD)
        except RetinueError:
            pass

    def ask(self, command: Command[R]) -> R:
        """Submit ``command`` and block until it is answered (committed).

        Raises:
            RuntimeClosed: the runtime is closed; and whatever the command raises.
        """
        result: R = self.submit(command).result()
        return result

    async def ask_async(self, command: Command[R]) -> R:
        """Submit ``command`` and await its answer without blocking the event loop.

        Its reply is a :class:`LoopReply`: answered, it settles the loop future
        this awaits through the loop's batched poster (no done callback, no
        closure, no second read of the reply). On a runtime's own loop (every
        turn's request) the poster is found and the future built in C, with no
        Python call for either.

        Raises:
            RuntimeClosed: the runtime is closed; and whatever the command raises.
        """
        loop = asyncio.get_running_loop()
        post = runtime_poster(loop)
        ready: asyncio.Future[R] | Ready[R]
        if post is None:  # a host's loop: a Ready (its task resumes as it is answered)
            last, post, _ = self._host_loop
            if last() is not loop:
                post, _ = self._host_poster(loop)
            ready = Ready(loop)
        else:  # a runtime's loop (asyncio's, LoopThread's): its create_future, inline
            ready = _Future(loop=loop)
        self.channel.submit(command, LoopReply(ready, post))
        return await ready

    def give_up(
        self, sender: Sender, future: concurrent.futures.Future[Any], seconds: float
    ) -> None:
        """Ask the supervisor to end the wait answered on ``future`` (its time ran out).

        If the runtime no longer serves even that, nobody will answer the wait:
        it ends with the refusal.
        """
        try:
            self.submit(GiveUpWait(sender, future, seconds))
        except RetinueError as exc:
            fail_pending(future, exc)

    def wait(self, command: WaitCommand, seconds: float, receipt: Receipt | None = None) -> Any:
        """Submit a wait and block for its answer, giving it up after ``seconds``.

        Raises:
            WaitTimeout: nothing arrived in time; and whatever the wait ended
                with, or ``receipt`` raises.
        """
        future: concurrent.futures.Future[Any] = Reply()
        self.submit(command, future)
        value = wait_answer(future, seconds, lambda: self.give_up(command.sender, future, seconds))
        return value if receipt is None else receipt.accept(future, value, False)

    async def wait_async(self, command: WaitCommand, seconds: float, receipt: Receipt) -> Any:
        """Submit a wait and await its answer; a cancelled await loses nothing.

        A host's wait (on a loop that is not a runtime's) is a :class:`LoopReply`
        that settles the loop future its task awaits, under its loop's deadlines
        (:func:`~retinue.actors.calls._waiting.expire_after`: no timer of its own);
        a turn's is a :class:`Reply` awaited through :func:`await_answer`.

        If the awaiting task is cancelled before the wait was answered, the
        wait is given up; after, what it took is given back (``receipt``), and
        the wait is given up as well (an answer claimed by a command that then
        failed is undone: the give-up ends the wait instead of leaving the
        give-back to wait for an answer that will not come).

        Raises:
            WaitTimeout: nothing arrived in time; and whatever the wait ended
                with, or ``receipt`` raises.
        """
        loop = asyncio.get_running_loop()
        future: concurrent.futures.Future[Any]
        ready: Ready[Any] | None = None
        if runtime_poster(loop) is None:  # a host's loop (see _expired)
            last, post, expire = self._host_loop
            if last() is not loop:
                post, expire = self._host_poster(loop)
            ready = Ready(loop)  # its task resumes as it is answered (see Ready)
            future = LoopReply(ready, post)
        else:  # a runtime's loop: a turn's wait
            future = Reply()
        receipt.expect(future)
        sender = command.sender
        try:
            self.channel.submit(command, future)
            if ready is not None:
                expire(loop, ready, seconds)  # expire_after, its deadlines found already
                value = await ready
                if value is EXPIRED:
                    value = await self._expired(loop, sender, future, seconds)
            else:
                # A partial, not a lambda: a closure made self, sender, future and seconds
                # cells for every call of this coroutine (four objects the collector tracks
                # kept per host wait in flight, and a slower read of each).
                value = await await_answer(
                    future, seconds, functools.partial(self.give_up, sender, future, seconds)
                )
        except asyncio.CancelledError:
            if receipt.abandon(future):
                if future.cancel():  # not answered: the supervisor skips it; forget it
                    self.give_up(sender, future, seconds)
                else:  # answered (or being answered): give what it took back, in order
                    # Given up too: a command that claimed the answer and then failed
                    # put the wait back unanswered (its rollback); the give-up ends it
                    # at once. An answered wait is no longer there: it does nothing.
                    self.give_up(sender, future, seconds)
                    await _give_back_in_order(future, receipt)
            raise
        except BaseException:
            receipt.abandon(future)
            raise
        return receipt.accept(future, value, True)

    async def _expired(
        self,
        loop: asyncio.AbstractEventLoop,
        sender: Sender,
        future: concurrent.futures.Future[Any],
        seconds: float,
    ) -> Any:
        """A host's async wait ran out of time: give it up; return what it ends with.

        (A host's wait is a :class:`LoopReply` that settles the loop future its task
        awaits, under a deadline of its loop's (:func:`expire_after`): no timer, done
        callback or second loop future per wait. Past the deadline, the race is the
        supervisor's, as for every wait: the answer is read from the reply.)

        Raises:
            WaitTimeout: nothing arrived in time; and whatever the wait ended with.
        """
        if not future.done():
            self.give_up(sender, future, seconds)
        await when_done(loop, future, None)
        return future.result()

    def give_back_host_waits(self) -> None:
        """At close: give back what async host waits were handed but their tasks never received.

        A task whose loop is busy (or blocked in this very close) cannot resume
        before the supervisor stops, so its give-back could not be served
        later; the close serves it now, and the task's wait ends with
        ``RuntimeClosed``.
        """
        for future, receipt in self.host.take_back_pairs():
            future.add_done_callback(receipt.give_back)  # at once if answered already


def _no_loop() -> None:
    """The engine's last host loop before its first host call: none."""


def _no_post(*_: Any) -> bool:
    """The poster of no loop (never called: the first host call finds its loop's)."""
    raise RuntimeError("no loop")


_GIVE_BACK_WAIT_S = 30.0
"""How long a cancelled wait waits for its answer's commit before giving back later."""


async def _give_back_in_order(future: concurrent.futures.Future[Any], receipt: Receipt) -> None:
    """Give back what a cancelled wait's answer took, before the awaiting task ends.

    The answer is committed already or about to be: wait for it, then submit
    the give-back from this task, so any call the caller makes once the
    cancelled await returned comes after it (a later wait sees the completion
    again instead of "nothing to wait for"). Cancelled again meanwhile, the
    give-back still happens, when the answer lands.
    """
    try:
        answered = await asyncio.shield(
            when_done(asyncio.get_running_loop(), future, _GIVE_BACK_WAIT_S)
        )
    except asyncio.CancelledError:
        future.add_done_callback(receipt.give_back)
        raise
    if answered:
        receipt.give_back(future)
    else:  # the answer is late (a closing runtime): give it back when it lands
        future.add_done_callback(receipt.give_back)


class HostReceipt:
    """The host's receipt: an async host wait owns its answer until the runtime's close.

    A leased wait (``lease``) gives back by releasing its lease, which gives
    the completion back and forgets the lease in one transition.
    """

    __slots__ = ("engine", "lease")

    def __init__(self, engine: Engine, lease: str | None = None) -> None:
        """Keep the host's waits in ``engine.host``."""
        self.engine = engine
        self.lease = lease

    def expect(self, future: concurrent.futures.Future[Any]) -> None:
        """Register the wait: until its task receives the answer, a close may take it back."""
        self.engine.host.hand(future, self)  # the future is its key: no pair built per wait

    def abandon(self, future: concurrent.futures.Future[Any]) -> bool:
        """True unless the close already took the wait's answer back (and gave it back)."""
        return self.engine.host.receive(future)

    def give_back(self, future: concurrent.futures.Future[Any]) -> None:
        """Give what an answered host wait took back to the store (completion or messages)."""
        if future.cancelled() or future.exception() is not None:
            return
        if self.lease is not None:
            self.engine.tell(ReleaseLease(self.lease))
            return
        events = handed_events(future.result())
        if events:
            self.engine.tell(GiveBack(None, tuple(events)))

    def accept(self, future: concurrent.futures.Future[Any], value: Any, in_task: bool) -> Any:
        """Return ``value``, unless the runtime's close took it back first.

        Raises:
            RuntimeClosed: the close gave the answer back to the store.
        """
        if not self.engine.host.receive(future):
            raise RuntimeClosed(
                "the runtime closed before this wait's task resumed; what it was handed "
                "was given back and waits in the store"
            )
        return value
