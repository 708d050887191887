"""The face's side of the wire: Ray calls to shards and the directory, retried, sync or async.

A host call is written once, as a generator (:mod:`retinue.cluster._router`)
that yields *steps* — a call to one shard, calls to several at once, a
directory call, a pause — and receives their results. :class:`Transport`
runs such a generator from a thread (:meth:`Transport.run`, blocking on
``ray.get``) or from an event loop (:meth:`Transport.run_async`, awaiting
the object refs), so every sync host call and its ``*_async`` twin share
one body.

A call Ray reports as failed (the shard's process died, the actor is
restarting or unreachable, the answer did not come within its bound) is
sent again with the same bytes, so with the same request id, until
``retry_s`` has passed; then :class:`~retinue.errors.ShardUnavailable` is
thrown into the generator. A step with ``retry=False`` gets that error at
the first failure (a wait retries itself, with its remaining time).

A call that must reach its shard although nobody awaits it (a lease's
acknowledgement, the release a cancelled wait sends) goes to the
:class:`Outbox` when it fails: the outbox sends it again in the background,
with the same bytes, until the shard answers it for good
(:func:`~retinue.cluster.wire.final_reply`) or the face closes. Such calls are
idempotent on the shard, so one that did arrive and is sent again is harmless.

:class:`Faults` injects lost replies for tests: the call runs on the shard,
its answer is dropped on the way back, as Ray reports a call that ran.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from retinue.cluster._calls import BACKOFF_S, One, answer_of, failure_text
from retinue.cluster._outbox import MAX_OUTBOX, FirstSend, Outbox
from retinue.cluster.wire import decode_reply, final_reply
from retinue.errors import OutboxFull, RuntimeClosed, ShardUnavailable

__all__ = [
    "BACKOFF_S",
    "MAX_OUTBOX",
    "Check",
    "Dir",
    "Faults",
    "Flush",
    "Many",
    "One",
    "Op",
    "Outbox",
    "OutboxFull",
    "Pause",
    "Race",
    "Tell",
    "Transport",
    "failure_text",
    "raw_reply",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Many:
    """Call several shards at once; the result is their replies, in order."""

    calls: tuple[One, ...]


@dataclass(frozen=True)
class Race:
    """Blocking calls on several shards: once one answers and ``done(reply)``, stop the rest.

    ``stops[i]`` is sent to the shard of ``calls[i]`` to end it early; the
    result is every call's reply, in order (so nothing one of them took is
    dropped). ``fallback[i]`` replaces a call that failed (same request id).
    """

    calls: tuple[One, ...]
    stops: tuple[One, ...]
    fallback: tuple[One, ...]
    done: Callable[[bytes], bool]


@dataclass(frozen=True)
class Dir:
    """Call the directory's ``method`` with ``args``; the result is its return value."""

    method: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Pause:
    """Sleep ``seconds`` (a backoff inside a step that retries itself).

    ``on_cancel`` is sent if an async caller is cancelled during the sleep, as a
    :class:`One`'s is (a wait backing off still holds its lease).
    """

    seconds: float
    on_cancel: One | None = None


@dataclass(frozen=True)
class Tell:
    """Send ``calls`` and go on; each that is not answered for good goes to the
    :class:`Outbox`, which sends it again until it is. On an event loop the calls are sent
    without awaiting their answers (so no cancel can land between the step before and the
    one after); from a thread each is made in turn, retried as a :class:`One` is. The
    result is None.

    With ``settle`` each call is sent once and its answer awaited, up to
    ``call_timeout_s``, whichever path (this send or the outbox's) delivers it; a
    release a wait that gives up owes its shard goes so.

    Without ``settle``, on a closed face: a step started after the close sends no call,
    each call's ``on_cancel`` instead, and raises :class:`~retinue.errors.RuntimeClosed`.
    A call the close overtook (the face closed during its retries, or as it was sent, so
    the outbox took it too late to send it again) is settled by sending its
    ``on_cancel`` once, after its own sends, and reading the answer: a plain False (nothing
    left to undo: the call had landed, as a release finds its lease acknowledged) lets
    the step stand; anything else (the undo took, or no answer) raises RuntimeClosed.
    """

    calls: tuple[One, ...]
    settle: bool = False


@dataclass(frozen=True)
class Flush:
    """Send now the releases the outbox owes ``shard`` and wait up to ``call_timeout_s``
    for them to be answered for good (a wait does so before its own call, so a release a
    wait that gave up or was cancelled left owed lands before it). The result is None."""

    shard: int


@dataclass(frozen=True)
class Check:
    """Raise :class:`OutboxFull` unless the face owes less than its bound, its own reserved
    slot aside: a wait about to lease again (what it owes already is counted as owed; its
    slot holds the acknowledgement it may come to owe next). The result is None."""


Step = One | Many | Race | Dir | Pause | Tell | Flush | Check
Op = Generator[Step, Any, T]


@dataclass
class Faults:
    """Replies to drop, by call tag (``spawn``, ``send``, ``wait``, ...), for tests."""

    drop: dict[str, int] = field(default_factory=dict)
    dropped: int = 0

    def take(self, tag: str) -> bool:
        """Return True (and count it) if the reply of this ``tag`` call is to be dropped."""
        left = self.drop.get(tag, 0)
        if left <= 0:
            return False
        self.drop[tag] = left - 1
        self.dropped += 1
        return True


class _Lost(Exception):
    """One attempt failed (internal to the transport)."""


class Transport:
    """Ray calls to a cluster's shards and directory, with retries."""

    def __init__(
        self,
        ray: Any,
        shards: list[Any],
        directory: Any,
        *,
        retry_s: float,
        call_timeout_s: float,
    ) -> None:
        """Call ``shards`` (actor handles by index) and ``directory`` through ``ray``."""
        self.ray = ray
        self.shards = shards
        self.directory = directory
        self.provider_limits: Any = None  # the provider-limits actor, if the cluster has one
        self.retry_s = retry_s
        self.call_timeout_s = call_timeout_s
        self.faults = Faults()
        errors = ray.exceptions
        self._failures = (errors.RayActorError, errors.GetTimeoutError, errors.ActorDiedError)
        self.outbox = Outbox(self)

    def _unavailable(self, shard: int | None, why: BaseException) -> ShardUnavailable:
        what = "the directory" if shard is None else f"shard {shard}"
        return ShardUnavailable(
            f"{what} did not answer within {self.retry_s:g}s ({failure_text(why)}); "
            "the call may have run: repeating it is safe",
            shard=shard,
        )

    def _gone(self, exc: BaseException) -> bool:
        """True for a failure no retry cures (an actor whose constructor failed, or killed)."""
        return isinstance(exc, self.ray.exceptions.ActorDiedError) and bool(
            getattr(exc, "actor_init_failed", False)
        )

    # -- sync ----------------------------------------------------------------------------

    def run(self, op: Op[T]) -> T:
        """Run a host call's generator from a thread; return its value.

        Raises:
            whatever the generator raises (a shard's refusal, ShardUnavailable).
        """
        try:
            step = next(op)
            while True:
                try:
                    result = self._step(step)
                except Exception as exc:
                    step = op.throw(exc)
                else:
                    step = op.send(result)
        except StopIteration as stop:
            value: T = stop.value
            return value

    def _step(self, step: Step) -> Any:
        match step:
            case One():
                return self._one(step, None)
            case Many():
                refs = [self._submit(c) for c in step.calls]
                return [self._one(c, ref) for c, ref in zip(step.calls, refs, strict=True)]
            case Race():
                return self._race(step)
            case Dir():
                return self._dir(step)
            case Pause():
                time.sleep(step.seconds)
                return None
            case Tell() if step.settle:
                for call in step.calls:
                    self._settled(call)
                return None
            case Flush():
                owed = self.outbox.flush(step.shard)
                if owed:
                    concurrent.futures.wait(owed, timeout=self.call_timeout_s)
                return None
            case Check():
                self.outbox.check(held=1)
                return None
            case Tell():
                self._unless_closed(step)
                for call in step.calls:
                    try:
                        raw: bytes | None = self._one(call, None)
                    except ShardUnavailable:
                        raw = None
                    if raw is None or not final_reply(raw):
                        done = self.outbox.post(call)
                        if self._orphaned(done):  # closed during the call's retries
                            self._undone(call, self._undo(call))
                return None

    def _submit(self, call: One) -> Any:
        return self.shards[call.shard].handle.remote(call.payload)

    def _one(self, call: One, ref: Any) -> bytes:
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                ref = self._submit(call) if ref is None else ref
                raw: bytes = self.ray.get(ref, timeout=self._bound(call))
                if self.faults.take(call.tag):
                    raise _Lost("reply dropped (injected)")
                return raw
            except (*self._failures, _Lost) as exc:
                ref = None
                if not call.retry or self._gone(exc) or time.monotonic() - started > self.retry_s:
                    raise self._unavailable(call.shard, exc) from None
                time.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1

    def _bound(self, call: One) -> float:
        return self.call_timeout_s + (call.timeout_s or 0.0)

    def _race(self, race: Race) -> list[bytes]:
        refs = [self._submit(c) for c in race.calls]
        pending = list(refs)
        stopped = False
        while pending and not stopped:
            ready, pending = self.ray.wait(pending, num_returns=1)
            for ref in ready:
                with contextlib.suppress(*self._failures):
                    if race.done(self.ray.get(ref)):
                        stopped = True
        if stopped:
            for i, ref in enumerate(refs):
                if ref in pending:
                    self._fire(race.stops[i])
        return [self._settle(race, i, ref) for i, ref in enumerate(refs)]

    def _settle(self, race: Race, i: int, ref: Any) -> bytes:
        try:
            raw: bytes = self.ray.get(ref, timeout=self._bound(race.calls[i]))
            return raw
        except self._failures:
            return self._one(race.fallback[i], None)

    def _fire(self, call: One) -> None:
        """Send ``call`` without waiting for its answer."""
        with contextlib.suppress(*self._failures):
            self._submit(call)

    def _dir(self, step: Dir) -> Any:
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                method = getattr(self.directory, step.method)
                return self.ray.get(method.remote(*step.args), timeout=self.call_timeout_s)
            except self._failures as exc:
                if self._gone(exc) or time.monotonic() - started > self.retry_s:
                    raise self._unavailable(None, exc) from None
                time.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1

    # -- async ---------------------------------------------------------------------------

    async def run_async(self, op: Op[T]) -> T:
        """Run a host call's generator on the running event loop; return its value.

        Raises:
            whatever the generator raises (a shard's refusal, ShardUnavailable).
        """
        try:
            step = next(op)
            while True:
                try:
                    result = await self._step_async(step)
                except Exception as exc:
                    step = op.throw(exc)
                else:
                    step = op.send(result)
        except StopIteration as stop:
            value: T = stop.value
            return value

    async def _step_async(self, step: Step) -> Any:
        match step:
            case One():
                return await self._one_async(step)
            case Many():
                return list(await asyncio.gather(*(self._one_async(c) for c in step.calls)))
            case Race():
                return await asyncio.to_thread(self._race, step)
            case Dir():
                return await asyncio.to_thread(self._dir, step)
            case Pause():
                try:
                    await asyncio.sleep(step.seconds)
                except asyncio.CancelledError:
                    if step.on_cancel is not None:
                        await self._cancelled(step.on_cancel)
                    raise
                return None
            case Tell() if step.settle:
                for call in step.calls:
                    await self._cancelled(call)
                return None
            case Flush():
                owed = self.outbox.flush(step.shard)
                if owed:
                    await asyncio.wait(
                        [asyncio.wrap_future(f) for f in owed], timeout=self.call_timeout_s
                    )
                return None
            case Check():
                self.outbox.check(held=1)
                return None
            case Tell():
                self._unless_closed(step)
                for call in self._tell(step):  # the face closed as they were sent
                    self._undone(call, await self._undo_async(call))
                return None

    async def _one_async(self, call: One) -> bytes:
        started = time.monotonic()
        attempt = 0
        while True:
            ref = self._submit(call)
            try:
                raw: bytes = await asyncio.wait_for(
                    asyncio.wrap_future(answer_of(ref)), self._bound(call)
                )
                if self.faults.take(call.tag):
                    raise _Lost("reply dropped (injected)")
                return raw
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    self.ray.cancel(ref)
                if call.on_cancel is not None:
                    await self._cancelled(One(call.shard, call.on_cancel, "release"))
                raise
            except (*self._failures, _Lost, TimeoutError) as exc:
                if not call.retry or self._gone(exc) or time.monotonic() - started > self.retry_s:
                    raise self._unavailable(call.shard, exc) from None
                await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1

    def _unless_closed(self, step: Tell) -> None:
        """Refuse ``step`` if the outbox is closed (the face was closed under its caller):
        nothing would send its calls again, so none is sent; each call's ``on_cancel``
        (what undoes it: a lease's release) is sent once instead, its answer not awaited.

        Raises:
            RuntimeClosed: the outbox is closed.
        """
        if not self.outbox.closed:
            return
        for call in step.calls:
            if call.on_cancel is not None:
                with contextlib.suppress(Exception):  # Ray may be gone: the lease times out
                    self._submit(One(call.shard, call.on_cancel, "release"))
        raise RuntimeClosed(
            "the cluster face was closed while this call was in flight: its lease goes "
            "back to its shard (call again on an open face)"
        )

    def _orphaned(self, done: Future[bool]) -> bool:
        """True if the outbox is closed and the call whose fate ``done`` holds is not known
        to be delivered: it took the call too late (dropped, or in its last round), so
        nothing would send it again."""
        if not self.outbox.closed:
            return False  # held before the close: its flush tries it, as any owed call
        return not (done.done() and not done.cancelled() and done.result() is True)

    def _undo(self, call: One) -> bytes | None:
        """Send ``call``'s ``on_cancel`` once (after ``call``'s own sends, so the shard
        serves it after them) and return its answer (None: it failed)."""
        if call.on_cancel is None:
            return None
        try:
            return self._one(One(call.shard, call.on_cancel, "release", retry=False), None)
        except ShardUnavailable:
            return None

    async def _undo_async(self, call: One) -> bytes | None:
        """:meth:`_undo` on the event loop; a cancel of the caller does not stop the send."""
        if call.on_cancel is None:
            return None
        task = asyncio.ensure_future(
            self._one_async(One(call.shard, call.on_cancel, "release", retry=False))
        )
        task.add_done_callback(_retrieved)
        try:
            return await asyncio.shield(task)
        except ShardUnavailable:
            return None

    def _undone(self, call: One, answer: bytes | None) -> None:
        """Settle a :class:`Tell`'s ``call`` the closed outbox would not send again, given its
        ``on_cancel``'s answer: a plain False (nothing was left to undo: an earlier send of
        ``call`` had landed, as a release finds its lease acknowledged) lets the step stand;
        anything else refuses it.

        Raises:
            RuntimeClosed: ``call`` may not have landed (its undo took, or is unknown).
        """
        if answer is not None and final_reply(answer):
            try:
                took = decode_reply(answer, bool)
            except Exception:
                took = True
            if took is False:
                return
        raise RuntimeClosed(
            "the cluster face was closed while this call's acknowledgement was owed to "
            f"shard {call.shard}: its lease goes back to the shard (call again on an open face)"
        )

    def _tell(self, step: Tell) -> list[One]:
        """Send ``step``'s calls now; each not answered for good, when that is known, goes
        to the outbox. Return those the outbox took too late (:meth:`_orphaned`)."""
        late = []
        for call in step.calls:
            done, _ = self._mail(call, bounded=True)
            if self._orphaned(done):
                late.append(call)
        return late

    def _mail(self, call: One, *, bounded: bool = False) -> tuple[Future[bool], Any]:
        """Send ``call`` once; hand it to the outbox if it is not answered for good.

        Return a future set to True once it is answered for good, by this send or the
        outbox's (False: the outbox dropped it), and this send's answer future (None: the
        send failed); cancelling that one hands the call to the outbox. ``bounded``: a send
        not answered within ``call_timeout_s`` is handed to the outbox then, still in
        flight (so the outbox counts it as owed, awaits it, and its close flushes it).
        """
        done: Future[bool] = Future()
        try:
            ref = self._submit(call)
        except self._failures:
            return self.outbox.post(call, done), None
        sent = FirstSend(self.outbox, call, done, answer_of(ref))
        sent.future.add_done_callback(sent.settled)
        if bounded:
            self.outbox.watch(sent, self.call_timeout_s)
        return done, sent.future

    def _settled(self, call: One) -> None:
        """Send ``call`` and wait up to ``call_timeout_s`` for it to be answered for good
        (by this send or the outbox's); one still unanswered goes on in the outbox."""
        done, answer = self._mail(call)
        try:
            done.result(self.call_timeout_s)
        except Exception:  # not answered in time: the outbox sends it again
            if answer is not None:
                answer.cancel()

    async def _cancelled(self, call: One) -> None:
        """Send a cancelled call's ``on_cancel`` and wait up to ``call_timeout_s`` for the
        shard to have answered it for good, by this send or the outbox's (one not answered
        by then goes on in the outbox; cancelled again meanwhile, it stays sent)."""
        done, answer = self._mail(call)
        await asyncio.shield(self._settle_async(done, answer))

    async def _settle_async(self, done: Future[bool], answer: Any) -> None:
        finished, _ = await asyncio.wait((asyncio.wrap_future(done),), timeout=self.call_timeout_s)
        if not finished and answer is not None:
            answer.cancel()  # not answered in time: the outbox sends it again

    def close(self, flush_s: float) -> None:
        """Stop the outbox after it tried for up to ``flush_s`` to deliver what it holds."""
        self.outbox.close(flush_s)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Read a finished task's outcome (no "exception never retrieved" warning)."""
    if not task.cancelled():
        task.exception()


def raw_reply(step: One) -> Op[bytes]:
    """An operation of one step: its raw reply."""
    raw: bytes = yield step
    return raw
