"""The face's outbox: acks and releases sent again until their shard answers them for good."""

from __future__ import annotations

import concurrent.futures
import time
from types import SimpleNamespace
from typing import Any

import pytest
from support import wait_until

from retinue.cluster import wire as w
from retinue.cluster._outbox import Outbox
from retinue.cluster._transport import One, OutboxFull
from retinue.errors import ClusterError, InvalidArgument, RuntimeClosed


class _Gone(Exception):
    """The shard's process died (as Ray reports it); ``gone``: for good (no retry cures it)."""

    def __init__(self, message: str, *, gone: bool = False) -> None:
        super().__init__(message)
        self.gone = gone


class _Ref:
    def __init__(self, answer: bytes | BaseException | None) -> None:
        self._future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        if answer is None:  # a hung shard: never answered
            pass
        elif isinstance(answer, bytes):
            self._future.set_result(answer)
        else:
            self._future.set_exception(answer)

    def future(self) -> concurrent.futures.Future[bytes]:
        return self._future


class _Transport:
    """Answers each call with the next of ``answers`` (then True)."""

    def __init__(self, answers: list[bytes | BaseException]) -> None:
        self.answers = answers
        self.sent: list[bytes] = []
        self.call_timeout_s = 5.0
        self.hung = False

    def _submit(self, call: One) -> _Ref:
        self.sent.append(call.payload)
        if self.hung:
            return _Ref(None)
        return _Ref(self.answers.pop(0) if self.answers else w.ok_reply(True))

    def _gone(self, exc: BaseException) -> bool:
        return isinstance(exc, _Gone) and exc.gone


def _outbox(answers: list[bytes | BaseException], max_calls: int = 100) -> tuple[Outbox, Any]:
    transport = _Transport(answers)
    return Outbox(transport, max_calls), transport


def test_a_call_is_sent_until_its_shard_answers_it_for_good() -> None:
    closing = w.error_reply(RuntimeClosed("closing"))
    outbox, transport = _outbox([_Gone("died"), closing])
    outbox.post(One(0, b"ack"))
    wait_until(lambda: outbox.delivered == 1, what="delivered")
    assert transport.sent == [b"ack"] * 3  # died, refused for the shard's trouble, answered
    assert len(outbox) == 0 and outbox.dropped == 0
    outbox.close(1.0)


def test_a_final_refusal_is_an_answer() -> None:
    outbox, transport = _outbox([w.error_reply(InvalidArgument("no such lease"))])
    outbox.post(One(0, b"release"))
    wait_until(lambda: outbox.delivered == 1, what="delivered")
    assert transport.sent == [b"release"]
    outbox.close(1.0)


def test_close_tries_to_deliver_then_drops_the_rest_and_later_posts() -> None:
    outbox, transport = _outbox([_Gone("died")] * 1_000_000)
    outbox.post(One(0, b"ack"))
    outbox.close(0.2)
    assert outbox.dropped == 1 and outbox.delivered == 0
    outbox.post(One(0, b"late"))
    assert outbox.dropped == 2 and b"late" not in transport.sent


def test_past_its_bound_nothing_is_dropped_and_new_waits_are_refused() -> None:
    outbox = Outbox(SimpleNamespace(call_timeout_s=5.0), max_calls=2)
    outbox._closed = False
    outbox._thread = SimpleNamespace()  # type: ignore[assignment]  # nothing sends
    outbox.post(One(1, b"a"))
    outbox.check()  # one owed: below the bound
    for payload in (b"b", b"c"):
        outbox.post(One(2 if payload == b"c" else 1, payload))
    assert [call.payload for call, _ in outbox._due] == [b"a", b"b", b"c"]
    assert outbox.dropped == 0
    with pytest.raises(OutboxFull, match=r"owes 3 .*shard 1: 2, shard 2: 1.*max_owed_calls is 2"):
        outbox.check()
    try:
        outbox.check()
    except OutboxFull as exc:
        assert (exc.limit, exc.owed) == (2, {1: 2, 2: 1})
        assert isinstance(exc, ClusterError)
    outbox._due.popleft()
    outbox._due.popleft()
    outbox.check()  # delivered below the bound: waits start again


def test_a_posts_future_says_whether_the_call_was_delivered() -> None:
    outbox, _ = _outbox([_Gone("died")])
    delivered = outbox.post(One(0, b"ack"))
    assert delivered.result(10) is True
    outbox.close(1.0)
    assert outbox.post(One(0, b"late")).result(0) is False


def test_close_counts_a_round_in_flight_to_a_hung_shard_as_dropped() -> None:
    # A round waits on a shard that never answers; the close stops it: the call is counted
    # as dropped (and its future says so), not put back where nothing sends it.
    outbox, transport = _outbox([])
    transport.hung = True
    owed = outbox.post(One(0, b"ack"))
    wait_until(lambda: transport.sent == [b"ack"], what="the round in flight")
    outbox.close(0.1)
    assert outbox._thread is not None and not outbox._thread.is_alive()
    assert (outbox.dropped, outbox.delivered, len(outbox)) == (1, 0, 0)
    assert owed.result(0) is False


def test_a_call_to_a_shard_gone_for_good_is_dropped_and_counted() -> None:
    outbox, transport = _outbox([_Gone("constructor failed", gone=True)])
    owed = outbox.post(One(3, b"ack"))
    assert owed.result(10) is False
    assert transport.sent == [b"ack"]  # not sent again
    assert (outbox.gone, outbox.delivered, len(outbox)) == (1, 0, 0)
    outbox.close(1.0)


def test_a_call_to_a_hung_shard_is_not_sent_again_while_its_send_is_pending() -> None:
    # Each round awaits the send still in flight rather than sending the call once more:
    # one owed call to a hung shard stays one outstanding call, whatever the rounds.
    outbox, transport = _outbox([])
    transport.call_timeout_s = 0.05
    transport.hung = True
    owed = outbox.post(One(0, b"ack"))
    wait_until(lambda: transport.sent == [b"ack"], what="the first round")
    time.sleep(0.5)  # several rounds of 0.05 s
    assert transport.sent == [b"ack"] and len(outbox) == 1
    outbox.close(0.1)
    assert (outbox.dropped, owed.result(0)) == (1, False)


def test_a_wait_leasing_again_counts_its_own_slot_as_free() -> None:
    # A wait in flight holds one slot (reserve); leasing again it needs no slot besides it:
    # refused only once the face owes the bound besides that slot.
    outbox = Outbox(SimpleNamespace(call_timeout_s=5.0), max_calls=1)
    outbox._thread = SimpleNamespace()  # type: ignore[assignment]  # nothing sends
    outbox.reserve()
    with pytest.raises(OutboxFull, match=r"owes 0 .* 1 waits in flight may"):
        outbox.check()  # a new wait: no slot free
    outbox.check(held=1)  # the wait itself: its own slot
    outbox.post(One(1, b"its last ack"))
    with pytest.raises(OutboxFull, match=r"owes 1 .* 0 waits in flight besides this one"):
        outbox.check(held=1)
    outbox.unreserve()
