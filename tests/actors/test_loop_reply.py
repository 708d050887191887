"""LoopReply: a request's answer reaches its awaiting loop once, whatever races it.

:class:`retinue.actors.calls.LoopReply` is the reply of every awaited request
(``Engine.ask_async``): answered on another thread (the store's writer), it
settles the loop future its task awaits through the loop's batched poster.
What that must keep: every answer reaches its own await exactly once, from
any thread; an exception is raised in the awaiting task; an await cancelled
before its answer drops the answer quietly (the reply still holds it, and
takes no second one); a cancelled reply ends its await; a closed loop is
posted nothing; and a real runtime's awaited requests, from its own loop and
from a host's, cancelled or not, are each answered once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
from typing import Any

import pytest
from support import OpenRuntime

from retinue import Profile, Turn
from retinue.actors.calls import LoopReply
from retinue.actors.calls._ready import Ready
from retinue.actors.calls._waiting import poster

WATCHDOG_S = 30.0


def _reply(loop: asyncio.AbstractEventLoop) -> tuple[asyncio.Future[Any], LoopReply[Any]]:
    ready: asyncio.Future[Any] = loop.create_future()
    return ready, LoopReply(ready, poster(loop))


def test_answers_from_many_threads_each_reach_their_own_await_once() -> None:
    count = 400

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        pairs = [_reply(loop) for _ in range(count)]

        def answer(part: list[tuple[int, LoopReply[Any]]]) -> None:
            for i, reply in part:
                if i % 5 == 0:
                    reply.set_exception(ValueError(f"no {i}"))
                else:
                    reply.set_result(i)

        indexed = [(i, reply) for i, (_, reply) in enumerate(pairs)]
        threads = [threading.Thread(target=answer, args=(indexed[k::4],)) for k in range(4)]
        for thread in threads:
            thread.start()
        got = await asyncio.wait_for(
            asyncio.gather(*(ready for ready, _ in pairs), return_exceptions=True), WATCHDOG_S
        )
        for thread in threads:
            thread.join(WATCHDOG_S)
        return got

    got = asyncio.run(main())
    for i, value in enumerate(got):
        if i % 5 == 0:
            assert isinstance(value, ValueError) and str(value) == f"no {i}"
        else:
            assert value == i


def test_an_await_cancelled_first_drops_the_late_answer_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> LoopReply[Any]:
        ready, reply = _reply(asyncio.get_running_loop())
        task = asyncio.ensure_future(ready)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        answering = threading.Thread(target=reply.set_exception, args=(KeyError("late"),))
        answering.start()
        answering.join(WATCHDOG_S)
        for _ in range(3):  # the posted settle runs, and finds the await gone
            await asyncio.sleep(0.01)
        assert ready.cancelled()
        return reply

    with caplog.at_level(logging.ERROR):
        reply = asyncio.run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert isinstance(reply.exception(), KeyError)  # the reply keeps it
    with pytest.raises(concurrent.futures.InvalidStateError):
        reply.set_result("again")  # answered once


def test_a_hosts_ready_gets_each_answer_once_and_a_cancelled_one_drops_a_late_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A host's await is a Ready: a result is posted to it as it is (resumed on the loop),
    an exception through the settle; a Ready whose task was cancelled takes neither."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        post = poster(loop)
        pairs: list[tuple[Ready[Any], LoopReply[Any]]] = []
        for _ in range(40):
            ready: Ready[Any] = Ready(loop)
            pairs.append((ready, LoopReply(ready, post)))

        async def awaiting(ready: Ready[Any]) -> Any:
            return await ready

        tasks = [asyncio.ensure_future(awaiting(ready)) for ready, _ in pairs]
        await asyncio.sleep(0)
        tasks[0].cancel()  # its answer comes late: dropped quietly
        with pytest.raises(asyncio.CancelledError):
            await tasks[0]

        def answer() -> None:
            for i, (_, reply) in enumerate(pairs):
                if i % 3 == 1:
                    reply.set_exception(ValueError(f"no {i}"))
                else:
                    reply.set_result(i)

        answering = threading.Thread(target=answer)
        answering.start()
        answering.join(WATCHDOG_S)
        got = await asyncio.wait_for(asyncio.gather(*tasks[1:], return_exceptions=True), WATCHDOG_S)
        for i, value in enumerate(got, start=1):
            if i % 3 == 1:
                assert isinstance(value, ValueError) and str(value) == f"no {i}"
            else:
                assert value == i
        await asyncio.sleep(0.01)  # the late answer's post has run
        assert pairs[0][0].cancelled() and pairs[0][1].result() == 0

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_cancelled_reply_ends_its_await() -> None:
    async def main() -> None:
        ready, reply = _reply(asyncio.get_running_loop())
        threading.Thread(target=reply.cancel).start()
        with pytest.raises(concurrent.futures.CancelledError):
            await asyncio.wait_for(ready, WATCHDOG_S)
        assert reply.cancel()  # cancelled already: still True, nothing else happens
        with pytest.raises(concurrent.futures.InvalidStateError):
            reply.set_result(1)

    asyncio.run(main())


def test_a_reply_whose_loop_closed_is_answered_without_posting() -> None:
    loop = asyncio.new_event_loop()
    ready, reply = _reply(loop)
    loop.close()
    seen: list[Any] = []
    reply.add_done_callback(seen.append)
    reply.set_result("nobody awaits")  # no error: the closed loop is posted nothing
    assert reply.result() == "nobody awaits" and seen == [reply]
    assert not ready.done()


def test_cancels_racing_answers_end_each_await_exactly_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    count = 300
    rng = random.Random(27)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        pairs = [_reply(loop) for _ in range(count)]
        tasks = [asyncio.ensure_future(ready) for ready, _ in pairs]
        await asyncio.sleep(0)
        go = threading.Event()

        def answer() -> None:
            go.wait(WATCHDOG_S)
            for i, (_, reply) in enumerate(pairs):
                reply.set_result(i)

        thread = threading.Thread(target=answer)
        thread.start()
        go.set()
        cancelled = set()
        for i in rng.sample(range(count), count // 2):  # racing the answers
            if tasks[i].cancel():
                cancelled.add(i)
            await asyncio.sleep(0)
        thread.join(WATCHDOG_S)
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for i, outcome in enumerate(outcomes):
            if isinstance(outcome, asyncio.CancelledError):
                assert i in cancelled
            else:
                assert outcome == i
        for i, (_, reply) in enumerate(pairs):
            assert reply.result() == i  # every reply answered once, cancelled await or not

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_runtimes_awaited_requests_are_each_answered_once(open_runtime: OpenRuntime) -> None:
    """Requests awaited on the runtime's loop (a turn's) and on a host's, some cancelled."""
    asked = 40

    async def runner(turn: Turn) -> str:
        infos = await asyncio.gather(*(turn.children_async() for _ in range(asked)))
        tasks = [asyncio.ensure_future(turn.children_async()) for _ in range(asked)]
        await asyncio.sleep(0)
        for task in tasks[::2]:
            task.cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        answered = [d for d in done if not isinstance(d, BaseException)]
        assert all(d == [] for d in answered) and len(answered) >= asked // 2
        return f"{len(infos)}"

    rt = open_runtime([Profile("worker", runner=runner)])

    async def host() -> list[Any]:
        tasks = [asyncio.ensure_future(rt.spawn_async("worker", f"t{i}")) for i in range(20)]
        await asyncio.sleep(0)
        for task in tasks[1::3]:
            task.cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    outcomes = asyncio.run(host())
    spawned = [o for o in outcomes if not isinstance(o, BaseException)]
    assert spawned
    for info in spawned:
        done = rt.wait(info.id, timeout=WATCHDOG_S)
        assert (done.status, done.output) == ("completed", str(asked))
    # A cancelled spawn may still have been served: its agent runs to its end too.
    rt.wait_idle(timeout=WATCHDOG_S)
    assert len(rt.agents()) >= len(spawned)
