"""A model call attempt's deadline keeps ``asyncio.timeout``'s rule (retinue.llm.model._deadline).

Past its seconds the block raises ``TimeoutError``; a cancellation of the
task's own (an interrupt) stays a ``CancelledError``, also when it lands
after the deadline passed; a block that ends in time is forgotten at once (its loop's
one timer is not its own), and the deadlines of one loop share that timer, each
keeping its own time.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from retinue.llm.model._deadline import Deadline, _deadlines_of


def test_a_block_past_its_deadline_raises_timeout_error() -> None:
    async def main() -> int:
        with pytest.raises(TimeoutError), Deadline(0.01):
            await asyncio.sleep(30)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert asyncio.run(main()) == 0  # the deadline's cancellation is taken back


def test_a_block_that_ends_in_time_is_left_alone() -> None:
    async def main() -> str:
        with Deadline(30):
            await asyncio.sleep(0)
        await asyncio.sleep(0.02)  # nothing cancels the task after the block
        return "done"

    assert asyncio.run(main()) == "done"


def test_a_cancellation_of_the_tasks_own_stays_a_cancellation() -> None:
    async def bounded(started: asyncio.Event) -> None:
        with Deadline(30):
            started.set()
            await asyncio.sleep(30)

    async def main() -> None:
        started = asyncio.Event()
        task = asyncio.create_task(bounded(started))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_a_cancellation_that_lands_after_the_deadline_passed_stays_a_cancellation() -> None:
    async def bounded() -> None:
        me = asyncio.current_task()
        assert me is not None
        with Deadline(0.01):
            asyncio.get_running_loop().call_later(0.011, me.cancel)  # an interrupt, just after
            time.sleep(0.03)  # both are due in the loop's next pass: the deadline's first
            await asyncio.sleep(30)

    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(bounded())

    asyncio.run(main())


def test_a_deadline_is_set_inside_a_task() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        made: list[BaseException] = []

        def outside() -> None:
            try:
                Deadline(1)
            except RuntimeError as exc:
                made.append(exc)

        loop.call_soon(outside)
        await asyncio.sleep(0.01)
        assert len(made) == 1

    asyncio.run(main())


def test_the_deadlines_of_one_loop_share_its_timer_and_each_keeps_its_own_time() -> None:
    from retinue.llm.model._deadline import _deadlines_of

    async def bounded(seconds: float, sleep: float) -> str:
        try:
            with Deadline(seconds):
                await asyncio.sleep(sleep)
        except TimeoutError:
            return "timed out"
        return "done"

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        long = asyncio.create_task(bounded(0.2, 30))  # noted first: the timer is set for it
        await asyncio.sleep(0)
        short = asyncio.create_task(bounded(0.01, 30))  # earlier: the timer is set again
        quick = asyncio.create_task(bounded(30, 0))  # ends in time
        late = asyncio.create_task(bounded(0.05, 30))  # between: covered by the re-set timer
        results = [await short]
        assert not long.done() and not late.done()  # the short one did not wait for them
        results += [await quick, await late, await long]
        assert _deadlines_of(loop).running == {}  # each attempt dropped or expired
        return results

    assert asyncio.run(main()) == ["timed out", "done", "timed out", "timed out"]


def test_an_attempt_that_ends_in_time_is_forgotten_at_once() -> None:
    from retinue.llm.model._deadline import _deadlines_of

    async def main() -> int:
        with Deadline(30):
            assert len(_deadlines_of(asyncio.get_running_loop()).running) == 1
            await asyncio.sleep(0)
        return len(_deadlines_of(asyncio.get_running_loop()).running)

    assert asyncio.run(main()) == 0


def test_deadlines_of_loops_used_in_turn_are_kept_apart() -> None:
    """Attempts on two loops used one after the other (A, B, A) keep their own deadlines."""

    async def bounded(seconds: float, sleep: float) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        try:
            with Deadline(seconds):
                held = len(_deadlines_of(loop).running)
                await asyncio.sleep(sleep)
        except TimeoutError:
            return "timed out", held
        return "done", held

    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        # each loop's attempts are noted on its own deadlines, whichever loop came last
        assert first.run_until_complete(bounded(30, 0)) == ("done", 1)
        assert second.run_until_complete(bounded(0.01, 30)) == ("timed out", 1)
        assert first.run_until_complete(bounded(0.01, 30)) == ("timed out", 1)
        assert _deadlines_of(first).running == {} and _deadlines_of(second).running == {}
    finally:
        first.close()
        second.close()
