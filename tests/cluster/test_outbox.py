"""The face's outbox: acks and releases sent again until their shard answers them for good."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

from support import wait_until

from retinue.cluster import wire as w
from retinue.cluster._transport import One, Outbox
from retinue.errors import InvalidArgument, RuntimeClosed


class _Gone(Exception):
    """The shard's process died (as Ray reports it)."""


class _Ref:
    def __init__(self, answer: bytes | BaseException) -> None:
        self._future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        if isinstance(answer, bytes):
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

    def _submit(self, call: One) -> _Ref:
        self.sent.append(call.payload)
        return _Ref(self.answers.pop(0) if self.answers else w.ok_reply(True))


def _outbox(answers: list[bytes | BaseException], max_calls: int = 100) -> tuple[Outbox, Any]:
    transport = _Transport(answers)
    return Outbox(transport, max_calls), transport  # type: ignore[arg-type]


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


def test_past_its_bound_the_oldest_call_is_dropped() -> None:
    outbox = Outbox(SimpleNamespace(call_timeout_s=5.0), max_calls=2)  # type: ignore[arg-type]
    outbox._closed = False
    outbox._thread = SimpleNamespace()  # type: ignore[assignment]  # nothing sends
    for payload in (b"a", b"b", b"c"):
        outbox.post(One(0, payload))
    assert [call.payload for call in outbox._due] == [b"b", b"c"]
    assert outbox.dropped == 1
