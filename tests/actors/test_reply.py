"""Reply: the supervisor's one-shot future behaves as concurrent.futures.Future does.

Every test runs on both classes, so a difference in the rules the runtime
relies on (claim versus cancel, one answer, callbacks once, every waiter
woken, asyncio.wrap_future) fails here first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import weakref
from typing import Any

import pytest

from retinue.actors.calls import Reply

KINDS = [concurrent.futures.Future, Reply]


@pytest.fixture(params=KINDS, ids=["Future", "Reply"])
def make(request: pytest.FixtureRequest) -> Any:
    return request.param


def test_a_result_is_returned_and_an_exception_raised(make: Any) -> None:
    ok = make()
    ok.set_result(42)
    assert (ok.done(), ok.running(), ok.cancelled()) == (True, False, False)
    assert (ok.result(), ok.exception()) == (42, None)
    failed = make()
    error = ValueError("boom")
    failed.set_exception(error)
    assert failed.exception() is error
    with pytest.raises(ValueError, match="boom"):
        failed.result()


def test_a_pending_result_times_out(make: Any) -> None:
    future = make()
    for timeout in (0, 0.01):
        with pytest.raises(TimeoutError):
            future.result(timeout=timeout)
        with pytest.raises(TimeoutError):
            future.exception(timeout=timeout)
    future.set_result("late")
    assert future.result(timeout=0) == "late"


def test_cancel_wins_only_while_pending(make: Any) -> None:
    pending = make()
    assert pending.cancel() and pending.cancel()
    assert (pending.cancelled(), pending.done()) == (True, True)
    with pytest.raises(concurrent.futures.CancelledError):
        pending.result()
    with pytest.raises(concurrent.futures.CancelledError):
        pending.exception()
    with pytest.raises(concurrent.futures.InvalidStateError):
        pending.set_result(1)
    assert pending.set_running_or_notify_cancel() is False  # the cancel is reported
    assert pending.cancelled()
    answered = make()
    answered.set_result(1)
    assert answered.cancel() is False
    assert answered.result() == 1


def test_a_claimed_future_cannot_be_cancelled_and_is_claimed_once(make: Any) -> None:
    future = make()
    assert future.set_running_or_notify_cancel() is True
    assert (future.running(), future.done()) == (True, False)
    assert future.cancel() is False
    with pytest.raises(RuntimeError):
        future.set_running_or_notify_cancel()
    future.set_result("mine")
    assert future.result() == "mine"


def test_it_is_answered_once(make: Any) -> None:
    future = make()
    future.set_result(1)
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_result(2)
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_exception(ValueError())
    assert future.result() == 1


def test_callbacks_run_once_with_the_future_even_after_one_fails(make: Any) -> None:
    future = make()
    seen: list[Any] = []

    def broken(_: Any) -> None:
        raise RuntimeError("a broken callback")

    future.add_done_callback(seen.append)
    future.add_done_callback(broken)
    future.add_done_callback(lambda f: seen.append(("second", f)))
    future.set_result(7)  # the broken callback is logged, not raised to the setter
    assert seen == [future, ("second", future)]
    future.add_done_callback(seen.append)  # added once done: called at once
    assert seen == [future, ("second", future), future]
    cancelled = make()
    cancelled.add_done_callback(seen.append)
    cancelled.cancel()
    assert seen[-1] is cancelled


def test_every_waiting_thread_gets_the_answer(make: Any) -> None:
    future = make()
    results: list[Any] = []
    lock = threading.Lock()
    started = threading.Barrier(9)

    def wait() -> None:
        started.wait()
        value = future.result(timeout=10)
        with lock:
            results.append(value)

    threads = [threading.Thread(target=wait) for _ in range(8)]
    for thread in threads:
        thread.start()
    started.wait()
    future.set_result("all")
    for thread in threads:
        thread.join(timeout=10)
    assert results == ["all"] * 8


def test_callbacks_and_waiters_racing_the_answer_each_get_it_once(make: Any) -> None:
    """Callbacks added and waiters blocking while another thread answers: each callback
    runs exactly once (before or after the answer), and every waiter gets the answer."""
    for round_ in range(50):
        called, got = _race_the_answer(make(), round_)
        assert sorted(called) == list(range(20))
        assert got == [round_]


def _race_the_answer(future: Any, answer: int) -> tuple[list[int], list[Any]]:
    """Add 20 callbacks on one thread and block for the result on another while this
    thread answers ``answer``; return the callbacks' marks and what the waiter got."""
    called: list[int] = []
    got: list[Any] = []
    go = threading.Barrier(3)

    def add() -> None:
        go.wait()
        for k in range(20):
            future.add_done_callback(lambda _, k=k: called.append(k))

    def wait() -> None:
        go.wait()
        got.append(future.result(timeout=10))

    threads = [threading.Thread(target=add), threading.Thread(target=wait)]
    for thread in threads:
        thread.start()
    go.wait()
    future.set_result(answer)
    for thread in threads:
        thread.join(timeout=10)
    return called, got


def test_asyncio_awaits_it_and_a_cancelled_await_cancels_it(make: Any) -> None:
    async def main() -> tuple[Any, Any]:
        answered = make()
        threading.Timer(0.01, answered.set_result, args=("from a thread",)).start()
        got = await asyncio.wrap_future(answered)
        pending = make()
        task = asyncio.ensure_future(asyncio.wrap_future(pending))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.01)
        return got, pending

    got, pending = asyncio.run(main())
    assert got == "from a thread"
    assert pending.cancelled()


def test_an_exception_read_from_it_does_not_keep_it_alive(make: Any) -> None:
    gc.disable()
    try:
        future = make()
        future.set_exception(KeyError("x"))
        try:
            future.result()
        except KeyError as exc:
            error = exc
        alive = weakref.ref(future)
        del future
        assert alive() is None  # freed by its count: no cycle through the traceback
        assert isinstance(error, KeyError)
    finally:
        gc.enable()
