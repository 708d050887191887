"""Ready: a task awaits it as an asyncio future, and resumes in the very callback that sets it."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from retinue.actors.calls._ready import Ready

_WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_the_awaiting_task_resumes_inside_the_callback_that_sets_it() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ready: Ready[int] = Ready(loop)
        seen: list[Any] = []

        async def waiter() -> None:
            _WHO.set("waiter")
            value = await ready
            seen.append((value, _WHO.get()))  # in the task's own context

        task = loop.create_task(waiter())
        await asyncio.sleep(0)  # the task now waits on ready

        def answer() -> None:
            ready.set_result(7)
            seen.append("after set_result")

        loop.call_soon(answer)
        await task
        assert seen == [(7, "waiter"), "after set_result"]  # resumed before set_result returned
        assert (ready.done(), ready.cancelled(), ready.result(), ready.exception()) == (
            True,
            False,
            7,
            None,
        )

    asyncio.run(main())


def test_an_exception_is_raised_to_the_task_and_a_second_answer_refused() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ready: Ready[int] = Ready(loop)
        task = loop.create_task(_await(ready))
        await asyncio.sleep(0)
        loop.call_soon(ready.set_exception, ValueError("boom"))
        with pytest.raises(ValueError, match="boom"):
            await task
        with pytest.raises(asyncio.InvalidStateError):
            ready.set_result(1)
        assert isinstance(ready.exception(), ValueError)

    asyncio.run(main())


async def _await(ready: Ready[int]) -> int:
    return await ready


def test_cancelling_the_task_cancels_the_future_and_raises_cancelled_error() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ready: Ready[int] = Ready(loop)
        task = loop.create_task(_await(ready))
        await asyncio.sleep(0)
        task.cancel("stop")
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ready.cancelled() and ready.done()
        assert not ready.cancel()  # done: refused
        with pytest.raises(asyncio.CancelledError):
            ready.result()
        with pytest.raises(asyncio.InvalidStateError):
            ready.set_result(1)

    asyncio.run(main())


def test_callbacks_run_in_order_and_one_added_once_done_is_scheduled() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ready: Ready[str] = Ready(loop)
        calls: list[str] = []
        ready.add_done_callback(lambda f: calls.append("first " + f.result()))
        ready.add_done_callback(lambda f: calls.append("second " + f.result()))
        dropped = ready.add_done_callback
        dropped(print)
        assert ready.remove_done_callback(print) == 1
        with pytest.raises(asyncio.InvalidStateError):
            ready.result()
        set_at: list[list[str]] = []

        def answer() -> None:  # a loop callback, as the posted answer is
            ready.set_result("x")
            set_at.append(list(calls))

        loop.call_soon(answer)
        await asyncio.sleep(0)
        assert set_at == [["first x", "second x"]]  # called as it was set, in order
        ready.add_done_callback(lambda f: calls.append("late"))
        assert calls == ["first x", "second x"]  # not at once: on the loop, soon
        await asyncio.sleep(0)
        assert calls == ["first x", "second x", "late"]
        assert asyncio.isfuture(ready) and ready.get_loop() is loop

    asyncio.run(main())


def test_a_failing_callback_is_reported_and_the_others_still_run() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: reported.append(context))
        ready: Ready[int] = Ready(loop)
        calls: list[int] = []

        def broken(_: Ready[int]) -> None:
            raise RuntimeError("broken callback")

        ready.add_done_callback(broken)
        ready.add_done_callback(lambda f: calls.append(f.result()))
        loop.call_soon(ready.set_result, 3)  # a loop callback, as the posted answer is
        await asyncio.sleep(0)
        assert calls == [3]
        assert [type(c["exception"]) for c in reported] == [RuntimeError]

    asyncio.run(main())


@pytest.mark.parametrize("how", ["result", "exception"])
def test_set_inside_another_task_resumes_the_waiter_soon_not_inside_it(how: str) -> None:
    # A task's step cannot be entered from another's (asyncio refuses it): set while a
    # task runs, a Ready schedules its waiter's wake-up as an asyncio future does.
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ready: Ready[int] = Ready(loop)
        seen: list[Any] = []

        async def waiter() -> None:
            try:
                seen.append(await ready)
            except ValueError as exc:
                seen.append(str(exc))

        task = loop.create_task(waiter())
        await asyncio.sleep(0)
        if how == "result":
            ready.set_result(3)  # inside main's task
        else:
            ready.set_exception(ValueError("no"))
        seen.append("after set")
        await asyncio.wait_for(task, 5)
        assert seen == ["after set", 3 if how == "result" else "no"]

    asyncio.run(main())


def test_resume_from_a_loop_callback_resumes_the_task_inside_it_and_refuses_a_done_one() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ready: Ready[int] = Ready(loop)
        seen: list[Any] = []

        async def waiter() -> None:
            _WHO.set("waiter")
            seen.append((await ready, _WHO.get()))

        task = loop.create_task(waiter())
        await asyncio.sleep(0)
        resumed: list[bool] = []

        def answer() -> None:  # a loop callback, as the posted answer is
            resumed.append(ready.resume(5))
            seen.append("after resume")
            resumed.append(ready.resume(6))  # done: nothing changes

        loop.call_soon(answer)
        await task
        assert seen == [(5, "waiter"), "after resume"]
        assert resumed == [True, False]
        assert ready.result() == 5

    asyncio.run(main())


def test_resume_runs_every_callback_in_order_and_reports_a_failing_one() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: reported.append(context))
        ready: Ready[int] = Ready(loop)
        calls: list[str] = []

        def broken(_: Ready[int]) -> None:
            raise RuntimeError("broken callback")

        ready.add_done_callback(lambda f: calls.append(f"first {f.result()}"))
        ready.add_done_callback(broken)
        ready.add_done_callback(lambda f: calls.append(f"third {f.result()}"))
        loop.call_soon(ready.resume, 4)
        await asyncio.sleep(0)
        assert calls == ["first 4", "third 4"]
        assert [type(c["exception"]) for c in reported] == [RuntimeError]
        lone: Ready[int] = Ready(loop)
        lone.add_done_callback(broken)  # a lone callback that fails is reported too
        loop.call_soon(lone.resume, 1)
        await asyncio.sleep(0)
        assert [type(c["exception"]) for c in reported] == [RuntimeError, RuntimeError]

    asyncio.run(main())
