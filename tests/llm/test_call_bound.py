"""The per-model bound on calls in flight (:class:`~retinue.llm.model._bound.CallBound`):
a free place is taken at once, the others queue first come first served, a place given
back goes to the oldest waiter, and a waiter cancelled holds no place."""

from __future__ import annotations

import asyncio
import random
import types

from retinue.llm.model import CallSettings, complete
from retinue.llm.model._bound import CallBound
from retinue.llm.model._calls import _semaphore


def test_free_places_are_taken_at_once_then_callers_queue() -> None:
    async def main() -> None:
        bound = CallBound(2)
        assert bound.take() is None
        assert bound.take() is None
        assert bound.free == 0
        waiter = bound.take()
        assert waiter is not None and not waiter.done()
        bound.give()  # handed straight to the waiter: no place freed
        await bound.wait(waiter)
        assert bound.free == 0
        bound.give()
        bound.give()
        assert bound.free == 2

    asyncio.run(main())


def test_waiters_are_served_first_come_first_served() -> None:
    async def main() -> list[int]:
        bound = CallBound(1)
        assert bound.take() is None
        order: list[int] = []

        async def call(n: int) -> None:
            waiter = bound.take()
            if waiter is not None:
                await bound.wait(waiter)
            order.append(n)
            await asyncio.sleep(0)
            bound.give()

        tasks = [asyncio.create_task(call(n)) for n in range(3)]
        await asyncio.sleep(0)
        bound.give()
        await asyncio.gather(*tasks)
        assert bound.free == 1
        return order

    assert asyncio.run(main()) == [0, 1, 2]


def test_a_caller_queued_behind_a_waiter_does_not_jump_it() -> None:
    async def main() -> None:
        bound = CallBound(1)
        assert bound.take() is None
        first = bound.take()
        assert first is not None
        bound.give()  # to the waiter, not to the free places
        assert bound.free == 0
        assert bound.take() is not None  # a newcomer queues

    asyncio.run(main())


def test_a_waiter_cancelled_while_waiting_holds_no_place() -> None:
    async def main() -> None:
        bound = CallBound(1)
        assert bound.take() is None
        waiter = bound.take()
        assert waiter is not None
        task = asyncio.create_task(bound.wait(waiter))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        bound.give()
        assert bound.free == 1  # nobody waits any more: the place is free
        assert bound.take() is None

    asyncio.run(main())


def test_a_waiter_cancelled_after_it_was_handed_a_place_passes_it_on() -> None:
    async def main() -> None:
        bound = CallBound(1)
        assert bound.take() is None
        first, second = bound.take(), bound.take()
        assert first is not None and second is not None
        task = asyncio.create_task(bound.wait(first))
        await asyncio.sleep(0)
        bound.give()  # handed to the first waiter...
        task.cancel()  # ...cancelled before it resumes
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        assert second.done()  # the place went on to the next waiter
        await bound.wait(second)
        bound.give()
        assert bound.free == 1

    asyncio.run(main())


def test_a_first_attempt_that_fails_gives_its_place_back_to_its_retry() -> None:
    """complete()'s first attempt gives its place back as it fails, so its retry, under a
    bound of one place, runs; the place is free after."""
    sent: list[int] = []

    async def acompletion(**kwargs: object) -> str:
        sent.append(len(sent) + 1)
        if len(sent) == 1:
            raise ConnectionError("reset")  # no status: retried
        return "answer"

    litellm = types.ModuleType("fake_litellm")
    litellm.acompletion = acompletion  # type: ignore[attr-defined]
    settings = CallSettings(
        model="bound-test/one",
        kwargs={"model": "bound-test/one"},
        request_timeout_s=30.0,
        retries=1,
        retry_base_s=0.0,
        retry_max_s=0.0,
        rng=random.Random(0),
    )

    async def main() -> tuple[str, int]:
        call = complete(litellm, settings, [{"role": "user", "content": "hi"}], [], 1)
        answer = await asyncio.wait_for(call, 30)  # a place never given back: no hang
        return answer, _semaphore("bound-test/one", 1).free

    assert asyncio.run(main()) == ("answer", 1)
    assert sent == [1, 2]
