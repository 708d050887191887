"""The face's outbox: lease calls sent again in the background until their shard answers.

A lease's acknowledgement or release must reach its shard although nobody awaits it:
:class:`Outbox` holds such a call and sends it again, with the same bytes, until the
shard answers it for good (:func:`~retinue.cluster.wire.final_reply`) or the face
closes. :class:`FirstSend` is a call's first send, made by the transport, handed to the
outbox if it is not answered for good in time.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from typing import Any, Protocol

from retinue.cluster._calls import BACKOFF_S, One, failure_text
from retinue.cluster.wire import final_reply
from retinue.errors import OutboxFull

log = logging.getLogger("retinue.cluster.transport")

__all__ = ["MAX_OUTBOX", "FirstSend", "Outbox", "Sender"]

MAX_OUTBOX = 100_000  # owed calls past which the face refuses new leased waits


class Sender(Protocol):
    """What the outbox sends through (the face's
    :class:`~retinue.cluster._transport.Transport`)."""

    call_timeout_s: float

    def _submit(self, call: One) -> Any:
        """Send ``call`` once; return Ray's object ref of its answer."""

    def _gone(self, exc: BaseException) -> bool:
        """True for a failure no retry cures."""


def _settle(done: Future[bool], delivered: bool) -> None:
    """Set ``done`` (a call's fate) unless it is set or cancelled already."""
    with contextlib.suppress(InvalidStateError):
        done.set_result(delivered)


class FirstSend:
    """A call's first send, made by the transport (``Transport._mail``): handed to the
    outbox if it is not answered for good, or (:meth:`hand_over`) once its bound passed
    unanswered."""

    def __init__(self, outbox: Outbox, call: One, done: Future[bool], future: Future[bytes]):
        self.outbox = outbox
        self.call = call
        self.done = done
        self.future = future
        self._lock = threading.Lock()
        self._handed = False  # the outbox holds the call (with this send pending)
        self._claimed = False  # the answer came: :meth:`settled` decides its fate
        self._resolved = False  # ... and has decided it
        self.counted = False  # counted in the outbox's owed first sends (under its lock)

    @property
    def owing(self) -> bool:
        """True while the call is neither answered for good nor held by the outbox."""
        return not (self._handed or self._resolved)

    def hand_over(self) -> None:
        """Post the call to the outbox, its send still pending, unless its answer came."""
        with self._lock:
            if self._handed or self._claimed:
                return
            self._handed = True
        self.outbox.post(self.call, self.done, pending=self.future)
        self.outbox._uncount(self)

    def settled(self, answer: Future[bytes]) -> None:
        """The send's answer came: done, or to the outbox (unless it holds the call)."""
        with self._lock:
            if self._handed:
                return  # the outbox holds the call: its round reads this answer
            self._claimed = True
        if answer.cancelled() or answer.exception() is not None or not final_reply(answer.result()):
            self.outbox.post(self.call, self.done)
        else:
            _settle(self.done, True)
        self._resolved = True
        self.outbox._uncount(self)


class Outbox:
    """Calls that must reach their shard although nobody awaits them (a lease's
    acknowledgement or release): sent again in the background, oldest first, with a
    back-off, until each is answered for good or the outbox closes.

    One thread, started at the first post. Each post returns a future set to True once
    the call is answered for good, False if it is dropped: at the close (what
    :meth:`close` could not deliver within its ``flush_s``, counted in :attr:`dropped`
    and logged), or when its shard is gone for good (an actor that cannot start: no
    retry cures it; counted in :attr:`gone`). Nothing is dropped for room: past
    ``max_calls`` the face refuses new leased waits (:meth:`check` raises
    :class:`OutboxFull`) until calls are delivered.

    A round sends every held call, then waits for the answers under one bound of
    ``call_timeout_s``: a hung shard delays the other shards' calls of the next round
    by up to that bound (head-of-line blocking), never beyond it. A call whose send is
    still unanswered is not sent again: the next round awaits that same send, so a hung
    shard is owed one outstanding call per owed call, however many rounds pass. A first
    send :meth:`watch`-ed (a lease's acknowledgement) is handed over, still in flight,
    once its bound passes, so it is owed, counted and flushed at the close as the rest.
    """

    def __init__(self, transport: Sender, max_calls: int = MAX_OUTBOX) -> None:
        """Send again through ``transport``'s shards; past ``max_calls`` refuse new waits."""
        self.transport = transport
        self.max_calls = max(1, max_calls)
        self.delivered = 0  # calls the outbox got answered for good
        self.dropped = 0  # calls dropped unanswered at the close
        self.gone = 0  # calls dropped because their shard is gone for good
        self._due: deque[tuple[One, Future[bool]]] = deque()
        self._sending: list[tuple[One, Future[bool]]] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._closing = False  # close() is flushing: a first send watched now is owed at once
        self._round: threading.Event | None = None  # set when the round in flight may end
        # each held call's send still unanswered (keyed by the call's fate future): a round
        # awaits it again instead of sending the call once more (a hung shard's pile-up)
        self._pending: dict[Future[bool], Future[bytes]] = {}
        # first sends not yet answered, each with the time it is handed to the outbox
        self._watched: deque[tuple[float, FirstSend]] = deque()
        self._first: dict[int, int] = {}  # watched first sends still owing, by shard
        self._hurry = False  # a flush asked for the next round now
        self._reserved = 0  # waits in flight, each holding a slot for what it may come to owe

    def __len__(self) -> int:
        """How many calls wait to be answered (being sent included)."""
        with self._cond:
            return len(self._due) + len(self._sending)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ended: nothing is sent again any more."""
        return self._closed

    def owed(self) -> dict[int, int]:
        """How many calls each shard is owed (being sent included), by shard index."""
        with self._cond:
            counts: dict[int, int] = {}
            for call, _ in (*self._due, *self._sending):
                counts[call.shard] = counts.get(call.shard, 0) + 1
            for shard, n in self._first.items():  # first sends unanswered: owed until they are
                counts[shard] = counts.get(shard, 0) + n
            return counts

    def check(self, held: int = 0) -> None:
        """Raise :class:`OutboxFull` if the face owes ``max_calls`` calls or more, counting
        a slot for each wait in flight (:meth:`reserve`) but the ``held`` ones the caller
        reserved itself (a wait about to lease again: its own slot is what its next
        acknowledgement will fill, so it may lease again while the face owes less than the
        bound besides that slot).

        Raises:
            OutboxFull: the bound is reached; the error says what each shard is owed.
        """
        with self._cond:
            self._refuse_if_full(held)

    def reserve(self) -> None:
        """Hold a slot for a leased wait starting now (what it may come to owe); give it
        back with :meth:`unreserve` once the wait ended (its acknowledgement sent: counted
        from then on as owed until answered).

        Raises:
            OutboxFull: calls owed plus waits in flight reach ``max_calls``.
        """
        with self._cond:
            self._refuse_if_full()
            self._reserved += 1

    def unreserve(self) -> None:
        """Give back a slot :meth:`reserve` held."""
        with self._cond:
            self._reserved -= 1
            self._cond.notify_all()

    def _refuse_if_full(self, held: int = 0) -> None:
        """Raise :class:`OutboxFull` if owed calls plus reserved slots (but ``held`` of the
        caller's own) reach the bound (under the lock)."""
        owed = self.owed()
        total = sum(owed.values())
        others = max(self._reserved - held, 0)
        if total + others < self.max_calls:
            return
        shards = ", ".join(f"shard {k}: {n}" for k, n in sorted(owed.items())) or "none"
        raise OutboxFull(
            f"the face owes {total} lease acknowledgements and releases to shards "
            f"that did not answer them ({shards}) and {others} waits in flight "
            f"{'besides this one ' if held else ''}may owe one each; max_owed_calls is "
            f"{self.max_calls}: no new wait starts until "
            "they are delivered or those waits end (check those shards; wait again later)",
            self.max_calls,
            owed,
        )

    def post(
        self,
        call: One,
        done: Future[bool] | None = None,
        pending: Future[bytes] | None = None,
    ) -> Future[bool]:
        """Send ``call`` again until its shard answers it for good (dropped once closed).

        ``pending`` is a send of ``call`` still unanswered: the outbox awaits it before it
        sends the call again. Returns ``done`` (a new future if None): set to True once the
        call is answered for good, False if it is dropped.
        """
        done = Future() if done is None else done
        with self._cond:
            if self._closed:
                self.dropped += 1
                log.warning(
                    "the cluster face is closed: a lease call to shard %d is dropped "
                    "(its shard's lease_timeout_s settles it)",
                    call.shard,
                )
                _settle(done, False)
                return done
            self._due.append((call, done))
            if pending is not None:
                self._pending[done] = pending
            self._start()
        return done

    def flush(self, shard: int) -> list[Future[bool]]:
        """Send the releases owed to ``shard`` now (cutting the back-off short); return
        their futures (set once each is answered for good, or dropped)."""
        with self._cond:
            owed = [
                done
                for call, done in (*self._due, *self._sending)
                if call.shard == shard and call.tag == "release"
            ]
            if owed:
                self._hurry = True  # a sleeping back-off ends: the next round goes now
                self._cond.notify_all()
            return owed

    def watch(self, sent: FirstSend, bound_s: float) -> None:
        """Hand ``sent`` over (post it, its send pending, unless it was answered) once
        ``bound_s`` has passed, or at the close, whichever comes first; until then it counts
        as owed while unanswered."""
        with self._cond:
            if self._closed or self._closing:  # the close's flush (or its drop) takes it now
                sent.hand_over()
                return
            if sent.owing:
                sent.counted = True
                self._first[sent.call.shard] = self._first.get(sent.call.shard, 0) + 1
            self._watched.append((time.monotonic() + bound_s, sent))
            self._start()

    def _uncount(self, sent: FirstSend) -> None:
        """``sent`` owes no more (answered, or held by the outbox): stop counting it."""
        with self._cond:
            if not sent.counted:
                return
            sent.counted = False
            left = self._first[sent.call.shard] - 1
            if left:
                self._first[sent.call.shard] = left
            else:
                del self._first[sent.call.shard]

    def _start(self) -> None:
        """Start the sending thread if it is not running; wake it (under the lock)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="retinue-cluster-outbox", daemon=True
            )
            self._thread.start()
        self._cond.notify_all()

    def _expire(self, everything: bool = False) -> float | None:
        """Hand over the watched sends past their bound (all of them if ``everything``);
        return the seconds until the next bound, None if none is watched (under the lock)."""
        now = time.monotonic()
        while self._watched and (everything or self._watched[0][0] <= now):
            self._watched.popleft()[1].hand_over()
        return self._watched[0][0] - now if self._watched else None

    def close(self, flush_s: float) -> None:
        """Try for up to ``flush_s`` to deliver what is held, then stop; idempotent.

        What is not delivered by then (held, or in a round still in flight, which stops
        waiting for its answers) is dropped, counted in :attr:`dropped` and logged; its
        shard's ``lease_timeout_s`` settles those leases.
        """
        deadline = time.monotonic() + flush_s
        with self._cond:
            self._closing = True
            self._expire(everything=True)  # sends in flight are owed too: flush them
            self._hurry = True  # the flush tries now, not after a back-off
            self._cond.notify_all()
            while (self._due or self._sending) and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if not self._closed:
                self._closed = True
                self._drop(list(self._due))
                self._due.clear()
            if self._round is not None:
                self._round.set()  # the round in flight stops waiting
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)  # its round stops at once; this only bounds a stuck submit

    def _drop(self, calls: list[tuple[One, Future[bool]]]) -> None:
        """Count and log ``calls`` as dropped at the close (under the lock)."""
        if not calls:
            return
        self.dropped += len(calls)
        owed: dict[int, int] = {}
        for call, done in calls:
            self._pending.pop(done, None)
            owed[call.shard] = owed.get(call.shard, 0) + 1
            _settle(done, False)
        log.warning(
            "the cluster face closed owing %d lease calls (%s): dropped, their shards' "
            "lease_timeout_s settles them",
            len(calls),
            ", ".join(f"shard {k}: {n}" for k, n in sorted(owed.items())),
        )

    def _run(self) -> None:
        attempt = 0
        while True:
            with self._cond:
                while True:
                    next_s = self._expire()
                    if self._due or self._closed:
                        break
                    # bounds are handed over in batches, up to 20 ms late: not a wake-up each
                    self._cond.wait(None if next_s is None else max(next_s, 0.02))
                if self._closed:
                    return
                batch = list(self._due)
                self._due.clear()
                self._sending = batch
            failed = self._send(batch)
            with self._cond:
                self._sending = []
                if self._closed:
                    self._drop(failed)
                    self._cond.notify_all()
                    return
                self._due.extendleft(reversed(failed))
                self._cond.notify_all()
                if failed:
                    self._back_off(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                    attempt += 1
                else:
                    attempt = 0

    def _back_off(self, seconds: float) -> None:
        """Sleep ``seconds`` (under the lock) unless the outbox closes or a :meth:`flush`
        asks for the next round now; new posts and waits ending do not cut it short."""
        until = time.monotonic() + seconds
        while not self._closed and not self._hurry:
            left = until - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(left)
        self._hurry = False

    def _await_round(self, futures: list[Future[bytes]]) -> None:
        """Wait until every one of ``futures`` is done, ``call_timeout_s`` has passed (one
        bound for the round) or the outbox closes."""
        ended = threading.Event()
        left = len(futures)
        lock = threading.Lock()

        def one_done(_: Future[bytes]) -> None:
            nonlocal left
            with lock:
                left -= 1
                if left == 0:
                    ended.set()

        with self._cond:
            if self._closed or not futures:
                return
            self._round = ended
        for future in futures:
            future.add_done_callback(one_done)
        ended.wait(self.transport.call_timeout_s)
        with self._cond:
            self._round = None

    def _send(self, batch: list[tuple[One, Future[bool]]]) -> list[tuple[One, Future[bool]]]:
        """Send every call of ``batch`` once; settle those answered for good (or whose shard
        is gone for good) and return the others. Stops waiting once the outbox closes."""
        transport = self.transport
        futures: list[Any] = []
        for call, done in batch:
            with self._cond:
                pending = self._pending.pop(done, None)
            if pending is not None:  # a send still in flight (or answered since): await it
                futures.append(pending)  # rather than send the call once more
                continue
            try:
                futures.append(transport._submit(call).future())
            except Exception as exc:  # any failure: send it again later
                futures.append(exc)
        self._await_round([f for f in futures if isinstance(f, Future)])
        failed = []
        delivered = 0
        for (call, done), future in zip(batch, futures, strict=True):
            error: BaseException | None = future if isinstance(future, BaseException) else None
            raw: bytes | None = None
            if error is None and future.done() and not future.cancelled():
                error = future.exception()
                raw = future.result() if error is None else None
            if raw is not None and final_reply(raw):
                delivered += 1
                _settle(done, True)
            elif error is not None and transport._gone(error):
                with self._cond:
                    self.gone += 1
                log.warning(
                    "shard %d is gone for good (%s): a lease call it is owed is dropped",
                    call.shard,
                    failure_text(error),
                )
                _settle(done, False)
            else:
                failed.append((call, done))
                if isinstance(future, Future) and not future.done():
                    with self._cond:
                        self._pending[done] = future  # the next round awaits it again
        with self._cond:
            self.delivered += delivered
        return failed
