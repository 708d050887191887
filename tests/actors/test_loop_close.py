"""What a runtime's loop runs as it closes (retinue.actors.turns._loop_close): a closer
registered again is awaited once, also when its registration is found without the lock,
and a loop that has closed, or is not a runtime's, registers nothing."""

from __future__ import annotations

import asyncio

from retinue.actors.turns._loop_close import (
    at_close,
    at_loop_close,
    run_after_tasks,
    run_closers,
    runs_closers,
)


def test_a_closer_registered_on_every_turn_is_awaited_once() -> None:
    loop = asyncio.new_event_loop()
    awaited: list[str] = []

    async def closer() -> None:
        awaited.append("closer")

    async def other() -> None:
        awaited.append("other")

    try:
        runs_closers(loop)
        assert all(at_close(loop, closer) for _ in range(3))
        assert at_close(loop, other)
        assert at_close(loop, closer)  # the last loop's, found again
        run_closers(loop)
        assert awaited == ["closer", "other"]
        assert at_loop_close(loop, lambda: awaited.append("after"))
        run_after_tasks(loop)
        assert awaited == ["closer", "other", "after"]
        assert not at_close(loop, closer)  # closed: nothing registered any more
    finally:
        loop.close()


def test_a_loop_that_is_not_a_runtimes_registers_nothing() -> None:
    mine, theirs = asyncio.new_event_loop(), asyncio.new_event_loop()

    async def closer() -> None:
        pass

    try:
        runs_closers(mine)
        assert at_close(mine, closer)
        assert not at_close(theirs, closer)  # another loop than the last one asked about
        assert at_close(mine, closer)
    finally:
        run_after_tasks(mine)
        mine.close()
        theirs.close()
