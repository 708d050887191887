"""How an answer reaches a host's event loop: one wake-up per batch, in order, nothing lost.

:func:`retinue.actors.calls._waiting.poster` gives a loop that is not a
runtime's (a host's) a batched poster: the calls made before the loop gets to
them share one ``call_soon_threadsafe``. What that must keep: every call runs
once, in the order it was made; a closed loop refuses; a failing call does not
starve the others; and a host's burst of async spawns and waits, cancels
included, gets every completion exactly once.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Iterator

import pytest
from support import CountingLoop, OpenRuntime

from retinue import NothingToWaitFor, Profile, Turn
from retinue.actors.calls._waiting import _POSTERS, _RUNTIME_POSTERS, poster

CALLS = 1_000
WATCHDOG_S = 30.0


@pytest.fixture
def loop() -> Iterator[CountingLoop]:
    """A counting loop running on a thread of its own, closed at teardown."""
    loop = CountingLoop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(WATCHDOG_S)
    loop.close()


def _block(loop: asyncio.AbstractEventLoop) -> threading.Event:
    """Hold ``loop`` in a callback until the returned event is set."""
    release, held = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait(WATCHDOG_S)

    loop.call_soon_threadsafe(hold)
    assert held.wait(WATCHDOG_S)
    return release


def test_calls_made_while_the_loop_is_busy_run_in_order_after_one_wake(
    loop: CountingLoop,
) -> None:
    release = _block(loop)
    wakes = loop.wakes
    seen: list[int] = []
    done = threading.Event()
    post = poster(loop)
    for i in range(CALLS):
        post(seen.append, i)
    post(done.set)
    release.set()
    assert done.wait(WATCHDOG_S)
    assert seen == list(range(CALLS))
    assert loop.wakes - wakes == 1  # one write to the self-pipe for the whole batch


def test_calls_from_many_threads_each_run_once_in_each_threads_order(
    loop: CountingLoop,
) -> None:
    seen: list[tuple[int, int]] = []
    threads = [
        threading.Thread(target=lambda t=t: [poster(loop)(seen.append, (t, i)) for i in range(200)])
        for t in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WATCHDOG_S)
    done = threading.Event()
    poster(loop)(done.set)
    assert done.wait(WATCHDOG_S)
    assert sorted(seen) == [(t, i) for t in range(4) for i in range(200)]
    for t in range(4):
        assert [i for u, i in seen if u == t] == list(range(200))


def test_a_failing_call_does_not_starve_the_next(loop: CountingLoop) -> None:
    release = _block(loop)
    seen: list[str] = []
    done = threading.Event()

    def fail() -> None:
        raise ValueError("broken")

    post = poster(loop)
    post(fail)
    post(seen.append, "after")
    post(done.set)
    release.set()
    assert done.wait(WATCHDOG_S)
    assert seen == ["after"]


def test_a_closed_loop_refuses() -> None:
    loop = asyncio.new_event_loop()
    post = poster(loop)
    loop.close()
    with pytest.raises(RuntimeError):
        post(print, "never")


def test_a_loop_posted_to_is_not_kept_alive() -> None:
    loop = asyncio.new_event_loop()
    poster(loop)  # the loop's poster is cached for it, weakly
    gone = weakref.ref(loop)
    loop.close()
    del loop
    gc.collect()
    assert gone() is None


def test_a_closed_runtime_leaves_no_poster_behind(open_runtime: OpenRuntime) -> None:
    async def runner(turn: Turn) -> str:
        return "done"

    rt = open_runtime([Profile("worker", runner=runner)])
    rt.wait(rt.spawn("worker", "t").id, timeout=30)  # its loop ran a turn
    runtime_loops = [  # registered by a runtime's LoopThread (its batched call_soon)
        weakref.ref(loop)
        for loop, post in list(_RUNTIME_POSTERS.items())
        if getattr(post, "__name__", "") == "call_soon"
    ]
    assert runtime_loops
    rt.shutdown()
    left = [loop for loop in (ref() for ref in runtime_loops) if loop is not None]
    # No table holds the loop any more (nor a host's poster made for it by mistake).
    assert not any(loop in _RUNTIME_POSTERS or loop in _POSTERS for loop in left)


def test_a_burst_of_async_spawns_and_waits_gets_each_completion_once(
    open_runtime: OpenRuntime,
) -> None:
    rt = open_runtime([Profile("worker", runner=lambda turn: f"done:{turn.task}")])
    agents = 200

    async def scenario() -> None:
        infos = await asyncio.gather(*(rt.spawn_async("worker", f"t{i}") for i in range(agents)))
        waits = [asyncio.create_task(rt.wait_async(i.id, timeout=30)) for i in infos]
        await asyncio.sleep(0)
        for task in waits[::2]:  # cancelled at any point: before or after their answer
            task.cancel()
        outcomes = await asyncio.gather(*waits, return_exceptions=True)
        got = {}
        for info, outcome in zip(infos, outcomes, strict=True):
            if isinstance(outcome, asyncio.CancelledError):  # given back: the next wait has it
                outcome = await rt.wait_async(info.id, timeout=30)
            assert not isinstance(outcome, BaseException), outcome
            got[info.id] = outcome
        assert {c.output for c in got.values()} == {f"done:t{i}" for i in range(agents)}
        for info in infos:  # each completion was handed once: nothing is left to wait for
            with pytest.raises(NothingToWaitFor):
                await rt.wait_async(info.id, timeout=0)

    asyncio.run(scenario())
