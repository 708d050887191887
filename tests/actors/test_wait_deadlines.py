"""A host loop's wait deadlines: one timer for all its waits, each wait still ends on time.

:func:`retinue.actors.calls._waiting.expire_after` ends a host's loop future
with ``EXPIRED`` once its time ran out, under one timer per loop instead of a
timer per wait. What that must keep: every wait whose time ran out ends (a
shorter one behind a longer one too, in deadline order), a wait answered first
is never touched, the done waits are not kept, and the loop is not kept alive.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from support import OpenRuntime

from retinue import ArgumentTypeError, InvalidArgument, Limits, Profile, WaitTimeout
from retinue.actors.calls._waiting import (
    EXPIRED,
    _Batched,
    deadlines_of,
    expire_after,
    poster,
    resolve_timeout,
)
from retinue.testing import Gate

WATCHDOG_S = 30.0


def _deadlines(post: Any) -> Any:
    assert type(post) is _Batched
    return post._deadlines


def test_a_shorter_wait_behind_a_longer_one_expires_and_the_longer_one_is_left_alone() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        post = poster(loop)
        long, short, now = loop.create_future(), loop.create_future(), loop.create_future()
        ended: list[str] = []

        def note(name: str) -> Callable[[object], None]:
            return lambda _: ended.append(name)

        for name, ready in (("long", long), ("short", short), ("now", now)):
            ready.add_done_callback(note(name))
        expire_after(post, loop, long, WATCHDOG_S)
        expire_after(post, loop, short, 0.02)
        expire_after(post, loop, now, 0.0)
        assert await asyncio.wait_for(short, WATCHDOG_S) is EXPIRED
        assert await now is EXPIRED
        assert ended == ["now", "short"]
        assert not long.done()
        long.set_result("answered")  # answered in time: the deadline never touches it
        assert await long == "answered"

    asyncio.run(scenario())


def test_a_wait_answered_in_time_is_not_expired() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        post = poster(loop)
        ready = loop.create_future()
        expire_after(post, loop, ready, 0.01)
        ready.set_result(7)
        await asyncio.sleep(0.05)  # past the deadline: its timer fired and swept
        assert ready.result() == 7
        assert not _deadlines(post)._entries

    asyncio.run(scenario())


def test_deadlines_of_a_host_poster_share_its_loops_deadlines_and_refuse_another_poster() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        post = poster(loop)
        expire = deadlines_of(post)
        assert expire == deadlines_of(post)  # the loop's one queue of deadlines
        late, soon = loop.create_future(), loop.create_future()
        expire_after(post, loop, late, WATCHDOG_S)
        expire(loop, soon, 0.0)
        assert await asyncio.wait_for(soon, WATCHDOG_S) is EXPIRED
        assert not late.done()
        late.set_result(None)
        with pytest.raises(TypeError):
            deadlines_of(print)  # not a host loop's poster

    asyncio.run(scenario())


def test_done_waits_are_not_kept_even_behind_a_long_pending_one() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        post = poster(loop)
        pending = loop.create_future()
        expire_after(post, loop, pending, WATCHDOG_S)
        for i in range(10_000):
            ready = loop.create_future()
            expire_after(post, loop, ready, WATCHDOG_S)
            ready.set_result(i)
        assert len(_deadlines(post)._entries) <= 2 * _deadlines(post)._BOUND
        pending.set_result(None)
        for i in range(1_000):  # one after another: the queue keeps only the last
            ready = loop.create_future()
            expire_after(post, loop, ready, WATCHDOG_S)
            ready.set_result(i)
        assert len(_deadlines(post)._entries) == 1

    asyncio.run(scenario())


def test_a_loop_with_pending_deadlines_is_not_kept_alive() -> None:
    loop = asyncio.new_event_loop()

    async def scenario() -> None:
        running = asyncio.get_running_loop()
        expire_after(poster(running), running, running.create_future(), WATCHDOG_S)

    loop.run_until_complete(scenario())
    gone = weakref.ref(loop)
    loop.close()
    del loop
    gc.collect()
    assert gone() is None


def test_a_short_host_wait_times_out_while_a_longer_one_still_gets_its_completion(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])

    async def scenario() -> None:
        a = await rt.spawn_async("worker", "a")
        b = await rt.spawn_async("worker", "b")
        longer = asyncio.create_task(rt.wait_async(a.id, timeout=WATCHDOG_S))
        await asyncio.sleep(0)  # the longer wait's deadline is set first
        with pytest.raises(WaitTimeout):
            await rt.wait_async(b.id, timeout=0.05)
        assert not longer.done()
        gate.release()
        done = await asyncio.wait_for(longer, WATCHDOG_S)
        assert done.output == "released:a"
        assert (await rt.wait_async(b.id, timeout=WATCHDOG_S)).output == "released:b"

    asyncio.run(scenario())


@pytest.mark.parametrize("given", [0, 0.0, 1, 2.5, 600, 3600.0])
def test_a_plain_timeout_in_range_is_taken_as_seconds(given: float) -> None:
    seconds = resolve_timeout(given, Limits(wait_max_s=3600.0))
    assert seconds == given and type(seconds) is float


@pytest.mark.parametrize(
    ("given", "error"),
    [
        (float("nan"), InvalidArgument),
        (float("inf"), InvalidArgument),
        (-1, InvalidArgument),
        (-0.5, InvalidArgument),
        (3600.5, InvalidArgument),
        (True, ArgumentTypeError),
        ("5", ArgumentTypeError),
    ],
)
def test_a_timeout_out_of_range_or_not_a_number_is_refused(given: Any, error: type) -> None:
    with pytest.raises(error):
        resolve_timeout(given, Limits(wait_max_s=3600.0))
    assert resolve_timeout(None, Limits(wait_default_s=7.0)) == 7.0


def test_an_async_wait_keeps_no_closure_cells_while_it_waits() -> None:
    """Every host wait in flight keeps its ``wait_async`` coroutine: a closure in it (the
    turn's give-up) would make cells of its locals for every call, objects the collector
    tracks and scans as long as the wait waits. The give-up is a partial instead."""
    from retinue.actors.calls._engine import Engine

    assert Engine.wait_async.__code__.co_cellvars == ()
