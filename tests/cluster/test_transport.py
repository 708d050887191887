"""The face's transport and Ray's futures: a call the face stops awaiting never cancels Ray's.

Ray sets an object ref's ``future()`` from its own callback thread after checking that it
is not done (``ray._raylet._set_future_helper``, Ray 2.60): a cancel landing between the
check and the set makes the set raise InvalidStateError in Ray's thread. :class:`_RayRef`
sets its future the same way, holding the thread between the check and the set, so the
face's cancel lands in that window every time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from support import wait_until

from retinue.cluster import wire as w
from retinue.cluster._transport import One, Op, Tell, Transport, raw_reply


class _Failure(Exception):
    """No call here fails as Ray would."""


class _RayRef:
    """An object ref answered by a thread as Ray's callback thread does: ``done()`` is
    checked, then (once ``proceed`` is set) the result is set; what the set raised is kept
    in ``errors``."""

    def __init__(self, raw: bytes) -> None:
        self.ray_future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        self.checked = threading.Event()
        self.proceed = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._answer, args=(raw,), daemon=True)
        self.thread.start()

    def future(self) -> concurrent.futures.Future[bytes]:
        return self.ray_future

    def _answer(self, raw: bytes) -> None:
        if self.ray_future.done():
            return
        self.checked.set()
        self.proceed.wait(30)
        try:
            self.ray_future.set_result(raw)
        except BaseException as exc:  # what Ray's callback thread would log
            self.errors.append(exc)


class _Shard:
    """An actor handle: its first call's answer is held in the window, later ones are not."""

    def __init__(self) -> None:
        self.handle = SimpleNamespace(remote=self._remote)
        self.refs: list[_RayRef] = []

    def _remote(self, payload: bytes) -> Any:
        if self.refs:  # a re-send (the outbox's): answered at once
            future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
            future.set_result(w.ok_reply(True))
            return SimpleNamespace(future=lambda: future)
        self.refs.append(_RayRef(w.ok_reply(True)))
        return self.refs[0]


def _transport(call_timeout_s: float) -> tuple[Transport, _Shard]:
    exceptions = SimpleNamespace(
        RayActorError=_Failure, GetTimeoutError=_Failure, ActorDiedError=_Failure
    )
    ray = SimpleNamespace(exceptions=exceptions, cancel=lambda ref: None)
    shard = _Shard()
    transport = Transport(ray, [shard], None, retry_s=5, call_timeout_s=call_timeout_s)
    return transport, shard


def _told(step: Tell) -> Op[None]:
    """An operation of one :class:`Tell` step."""
    yield step


def test_a_cancelled_call_leaves_rays_future_to_ray() -> None:
    transport, shard = _transport(call_timeout_s=30)

    async def scenario() -> None:
        call = asyncio.ensure_future(transport.run_async(raw_reply(One(0, b"x", "send"))))
        while not shard.refs or not shard.refs[0].checked.is_set():
            await asyncio.sleep(0.001)  # Ray's thread checked the future: not done
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(scenario())
    ref = shard.refs[0]
    ref.proceed.set()
    ref.thread.join(10)
    assert ref.errors == []  # Ray's set did not meet a cancelled future
    assert ref.ray_future.result(0) == w.ok_reply(True)
    transport.close(1.0)


def test_a_release_not_answered_in_time_leaves_rays_future_to_ray() -> None:
    # The release's first send is not answered within call_timeout_s: the face hands it
    # to the outbox (which sends it again) and stops awaiting that send, without
    # cancelling Ray's future; Ray's late answer is set as usual.
    transport, shard = _transport(call_timeout_s=0.2)
    transport.run(_told(Tell((One(0, b"release", "release"),), settle=True)))
    ref = shard.refs[0]
    ref.proceed.set()
    ref.thread.join(10)
    assert ref.errors == []
    transport.close(5.0)
    assert (transport.outbox.delivered, transport.outbox.dropped) == (1, 0)


class _Hung:
    """An actor handle that never answers (a hung shard); counts its calls."""

    def __init__(self) -> None:
        self.handle = SimpleNamespace(remote=self._remote)
        self.calls = 0

    def _remote(self, payload: bytes) -> Any:
        self.calls += 1
        return SimpleNamespace(future=concurrent.futures.Future)


class _Healthy:
    """An actor handle that answers every call at once; keeps the payloads."""

    def __init__(self) -> None:
        self.handle = SimpleNamespace(remote=self._remote)
        self.payloads: list[bytes] = []

    def _remote(self, payload: bytes) -> Any:
        self.payloads.append(payload)
        future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        future.set_result(w.ok_reply(True))
        return SimpleNamespace(future=lambda: future)


def test_an_ack_to_a_healthy_shard_is_not_held_behind_a_hung_shards_round() -> None:
    # The outbox's round awaits a hung shard's owed call (for up to call_timeout_s). An ack
    # to another shard does not wait for that round: its first send goes out directly.
    exceptions = SimpleNamespace(
        RayActorError=_Failure, GetTimeoutError=_Failure, ActorDiedError=_Failure
    )
    ray = SimpleNamespace(exceptions=exceptions, cancel=lambda ref: None)
    hung, healthy = _Hung(), _Healthy()
    transport = Transport(ray, [hung, healthy], None, retry_s=5, call_timeout_s=30)
    transport.outbox.post(One(0, b"release", "release"))
    wait_until(lambda: transport.outbox._round is not None, what="the round on the hung shard")
    asyncio.run(transport.run_async(_told(Tell((One(1, b"ack", "ack"),)))))
    assert healthy.payloads == [b"ack"]  # sent at once, while the round still waits
    assert transport.outbox._round is not None and transport.outbox.owed() == {0: 1}
    transport.close(0.1)
    assert (transport.outbox.dropped, hung.calls) == (1, 1)


def test_an_ack_sent_while_the_close_flushes_is_owed_at_once() -> None:
    # close() flushes what the face owes for up to flush_s. An ack sent meanwhile (by a wait
    # that checked the face open) is owed at once, so the flush tries it and, undelivered,
    # counts it dropped, rather than leaving it watched until a bound nobody checks.
    exceptions = SimpleNamespace(
        RayActorError=_Failure, GetTimeoutError=_Failure, ActorDiedError=_Failure
    )
    ray = SimpleNamespace(exceptions=exceptions, cancel=lambda ref: None)
    hung = _Hung()
    transport = Transport(ray, [hung], None, retry_s=5, call_timeout_s=30)
    transport.outbox.post(One(0, b"release", "release"))
    closing = threading.Thread(target=transport.close, args=(1.0,), daemon=True)
    closing.start()
    wait_until(lambda: transport.outbox._closing, what="the close flushing")
    transport._mail(One(0, b"ack", "ack"), bounded=True)
    assert len(transport.outbox) == 2  # held now, not watched
    closing.join(10)
    assert transport.outbox.dropped == 2
