"""The cluster's provider limits without Ray: the lease book, a shard's leased capacity, and
two runtimes sharing one account through them (as two shards do through the lease actor).

The book is pure (time passed in). The capacity tests run real asyncio tasks
against a :class:`~retinue.cluster.limits.LocalBroker`; the runtime test
opens two real runtimes whose model agents call a real stub on 127.0.0.1
through litellm, each runtime's gate sharing one book. Waits are for states
(a handler held until the test lets it go), never for time.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from retinue import InvalidArgument, Limits, Profile, ProviderLimit, Runtime
from retinue.actors.admission import ProviderGate
from retinue.cluster.leasebook import LeaseBook, leased
from retinue.cluster.limits import LeasedCapacity, LocalBroker
from retinue.llm import LiteLLMRunner
from retinue.llm.model import load_litellm
from retinue.testing import OpenAIStub, StubReply, StubRequest

URL = "http://127.0.0.1:9/v1"
HANG_S = 60.0  # hang guard only


def test_a_leased_limit_has_a_static_dimension() -> None:
    assert leased(ProviderLimit("openai", max_in_flight=4))
    assert leased(ProviderLimit("openai", requests_per_minute=10))
    assert not leased(ProviderLimit("openai"))
    book = LeaseBook([ProviderLimit("openai"), ProviderLimit("anthropic", max_in_flight=1)])
    assert book.matches == ("anthropic",)


def test_the_book_refuses_bad_arguments() -> None:
    with pytest.raises(InvalidArgument, match="lease_s"):
        LeaseBook([], lease_s=0)
    with pytest.raises(InvalidArgument, match="named twice"):
        LeaseBook([ProviderLimit("a", max_in_flight=1), ProviderLimit("a", max_in_flight=2)])
    book = LeaseBook([ProviderLimit("a", max_in_flight=1)])
    with pytest.raises(InvalidArgument, match="no leased provider limit 'b'"):
        book.take("s0", "b", 1, 0, 0.0)


def test_holders_share_the_slots_and_the_windows() -> None:
    limit = ProviderLimit("openai", max_in_flight=3, requests_per_minute=5, tokens_per_minute=1000)
    book = LeaseBook([limit], window_s=60.0, lease_s=10.0)
    assert book.take("s0", "openai", 2, 100, 0.0) == 2
    assert book.take("s1", "openai", 4, 100, 0.0) == 1  # the third slot
    assert book.take("s1", "openai", 1, 100, 0.0) == 0
    book.end("s0", "openai", 1, 50, 1.0)  # a slot back; the request stays in the window
    book.give_back("s1", "openai", 1, 1.0)  # never made: no trace
    (snap,) = book.snapshot(1.0)
    assert snap.held == {"s0": 1} and snap.requests == 2 and snap.tokens == 150
    assert book.take("s1", "openai", 5, 100, 1.0) == 2  # in flight 3 of 3
    book.end("s0", "openai", 1, 100, 2.0)
    book.end("s1", "openai", 2, 200, 2.0)
    # Four requests in the window (1 + 1 + 2 ended; the one given back never counted):
    # one more fits, then none until the first one's window has passed.
    assert book.take("s0", "openai", 3, 100, 3.0) == 1
    assert book.take("s0", "openai", 1, 100, 3.0) == 0
    assert book.take("s0", "openai", 1, 100, 61.5) == 1  # the one ended at 1.0 left it


def test_tokens_bound_the_calls_granted() -> None:
    book = LeaseBook([ProviderLimit("m/x", tokens_per_minute=1000)])
    assert book.take("s0", "m/x", 10, 300, 0.0) == 3
    book.end("s0", "m/x", 3, 90, 1.0)  # usage replaced the estimates
    assert book.take("s1", "m/x", 10, 300, 1.0) == 3


def test_a_silent_holder_loses_its_lease_and_its_calls_stay_in_the_window() -> None:
    book = LeaseBook([ProviderLimit("openai", max_in_flight=2, requests_per_minute=3)], lease_s=5)
    assert book.take("dead", "openai", 2, 10, 0.0) == 2
    assert book.take("alive", "openai", 1, 10, 0.0) == 0
    book.renew("alive", 4.0)
    assert book.expire(4.0) == ()
    assert book.take("alive", "openai", 1, 10, 5.5) == 1  # "dead" expired at 5.5: slots free
    (snap,) = book.snapshot(5.5)
    assert snap.held == {"alive": 1} and snap.expired == 1
    assert snap.requests == 3  # the dead holder's two calls may have reached the provider
    book.end("dead", "openai", 2, 20, 6.0)  # a late end of an expired lease changes nothing
    (snap,) = book.snapshot(6.0)
    assert snap.held == {"alive": 1} and snap.requests == 3


def _capacity(book: LeaseBook, holder: str, **options: Any) -> LeasedCapacity:
    """A shard's capacity over ``book``, its clock stopped at 0 (no lease expires)."""
    broker = LocalBroker(book, clock=lambda: 0.0)
    return LeasedCapacity(broker, holder, book.matches, lease_s=5.0, **options)


def test_capacities_of_two_shards_never_hold_more_than_the_limit() -> None:
    book = LeaseBook([ProviderLimit("openai", max_in_flight=3)])
    shards = [_capacity(book, "s0", batch=2, poll_s=0.001), _capacity(book, "s1", poll_s=0.001)]

    async def scenario() -> int:
        peak = 0
        running = 0

        async def call(k: int, n: int) -> None:
            nonlocal peak, running
            capacity = shards[k]
            await capacity.acquire(f"c{k}.{n}", ("openai", "not-leased"), 10)
            running += 1
            peak = max(peak, running)
            (snap,) = book.snapshot(0.0)
            assert sum(snap.held.values()) <= 3
            await asyncio.sleep(0)
            running -= 1
            capacity.end(f"c{k}.{n}", 7)

        await asyncio.wait_for(
            asyncio.gather(*(call(k, n) for k in (0, 1) for n in range(20))), HANG_S
        )
        return peak

    peak = asyncio.run(scenario())
    assert 1 <= peak <= 3
    (snap,) = book.snapshot(0.0)
    assert snap.held == {} and snap.granted >= 40  # every call ended: nothing held


def test_a_cancelled_acquire_gives_its_permits_back() -> None:
    book = LeaseBook([ProviderLimit("a", max_in_flight=1), ProviderLimit("b", max_in_flight=1)])
    capacity = _capacity(book, "s0", poll_s=0.001)
    assert book.take("other", "b", 1, 0, 0.0) == 1  # b is full: the call waits there

    async def scenario() -> None:
        task = asyncio.ensure_future(capacity.acquire("c1", ("a", "b"), 5))
        while not book.snapshot(0.0)[0].held:  # it took a's permit
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(scenario(), HANG_S))
    a, b = book.snapshot(0.0)
    assert a.held == {} and b.held == {"other": 1}
    assert capacity.held() == {"a": 0, "b": 0}


def _answer(request: StubRequest) -> StubReply:
    return StubReply(message={"role": "assistant", "content": "ok"}, usage=(20, 5))


def test_two_runtimes_sharing_a_book_keep_one_account_in_flight_limit(tmp_path: Path) -> None:
    held = threading.Event()
    lock = threading.Lock()
    active = peak = 0

    def answer(request: StubRequest) -> StubReply:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        try:
            held.wait(HANG_S)
            return _answer(request)
        finally:
            with lock:
                active -= 1

    load_litellm()
    with OpenAIStub(answer) as stub:
        limit = ProviderLimit(stub.url, max_in_flight=2, adaptive=False)
        book = LeaseBook([limit], lease_s=30.0)
        runner = LiteLLMRunner("openai/stub", api_base=stub.url, api_key="x", retry_base_s=0.01)
        rts = [
            Runtime.open(
                tmp_path / f"shard{k}",
                profiles=[Profile("asker", runner=runner)],
                limits=Limits(wait_default_s=HANG_S),
                provider_limits=[limit],
            )
            for k in (0, 1)
        ]
        try:
            for k, rt in enumerate(rts):
                gate = getattr(rt._system, "admission", None)
                assert isinstance(gate, ProviderGate)
                gate.share(_capacity(book, f"shard-{k}", poll_s=0.01).start())
            agents = [[rt.spawn("asker", f"q{n}") for n in range(3)] for rt in rts]
            _until(lambda: len(stub.requests) == 2, "two calls at the stub")
            (snap,) = book.snapshot(0.0)
            assert sum(snap.held.values()) == 2
            held.set()
            for rt, mine in zip(rts, agents, strict=True):
                for agent in mine:
                    assert rt.wait(agent.id, timeout=HANG_S).output == "ok"
            assert len(stub.requests) == 6 and peak == 2
        finally:
            held.set()
            for rt in rts:
                rt.shutdown()


def _until(check: Any, what: str) -> None:
    done = threading.Event()
    for _ in range(int(HANG_S / 0.01)):
        if check():
            return
        done.wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")
