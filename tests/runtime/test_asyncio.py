"""The asyncio faces: they never block the event loop, even with 1,000 waits pending."""

from __future__ import annotations

import asyncio
import threading

import pytest
from support import OpenRuntime, Script

from retinue import (
    AgentClosed,
    AgentInfo,
    AgentState,
    Completion,
    CompletionStatus,
    Profile,
    UnknownAgent,
    WaitTimeout,
)
from retinue.testing import Gate

PENDING_WAITS = 1_000
TICKS = 40
TICK_S = 0.005
WATCHDOG_S = 30.0


def test_loop_stays_responsive_while_1000_waits_are_pending(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)], wait_default_s=60.0)
    # If a wait blocked the loop, the loop could never release the gate: a
    # watchdog thread does it instead, so the test fails rather than hangs.
    released_by_watchdog = threading.Event()

    def watchdog() -> None:
        released_by_watchdog.set()
        gate.release()

    timer = threading.Timer(WATCHDOG_S, watchdog)
    timer.start()

    async def scenario() -> tuple[int, list[tuple[AgentInfo, Completion]]]:
        infos = await asyncio.gather(
            *(rt.spawn_async("worker", f"t{i}", name=f"w{i}") for i in range(PENDING_WAITS))
        )
        waits = [asyncio.create_task(rt.wait_async(i.id, timeout=60)) for i in infos]
        # Two loop iterations: every wait task has made its call and now awaits its result.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        ticks = 0
        for _ in range(TICKS):  # the loop keeps serving other tasks while 1,000 waits pend
            await asyncio.sleep(TICK_S)
            ticks += 1
        assert not any(w.done() for w in waits)
        gate.release()  # now every turn settles and every wait resolves
        done = await asyncio.gather(*waits)
        return ticks, list(zip(infos, done, strict=True))

    try:
        ticks, pairs = asyncio.run(scenario())
    finally:
        timer.cancel()
    assert ticks == TICKS
    assert not released_by_watchdog.is_set(), "the loop was blocked while the waits pended"
    assert len(pairs) == PENDING_WAITS
    for info, done in pairs:
        assert done.agent_id == info.id
        assert (done.status, done.output) == (CompletionStatus.COMPLETED, f"released:{info.task}")
    assert len({done.id for _, done in pairs}) == PENDING_WAITS


def test_wait_async_timeout_leaves_the_agent_running(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])

    async def scenario() -> None:
        a = await rt.spawn_async("worker", "slow")
        with pytest.raises(WaitTimeout) as caught:
            await rt.wait_async(a.id, timeout=0.05)
        assert isinstance(caught.value, TimeoutError)
        info = await rt.get_async(a.id)
        assert info.state in (AgentState.STARTING, AgentState.RUNNING)
        gate.release()
        done = await rt.wait_async(a.id, timeout=5)
        assert (done.generation, done.output) == (1, "released:slow")

    asyncio.run(scenario())


def test_a_cancelled_wait_async_does_not_swallow_the_completion(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])

    async def scenario() -> None:
        a = await rt.spawn_async("worker", "t")
        waiting = asyncio.create_task(rt.wait_async(a.id, timeout=30))
        await asyncio.sleep(TICK_S)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        gate.release()
        done = await rt.wait_async(a.id, timeout=5)
        assert (done.generation, done.output) == (1, "released:t")

    asyncio.run(scenario())


def test_async_faces_mirror_the_sync_api(open_runtime: OpenRuntime, script: Script) -> None:
    rt = open_runtime([Profile("worker", runner=script)])

    async def scenario() -> None:
        a = await rt.spawn_async("worker", "start", name="a")
        first = await rt.wait_async(a.id, timeout=5)
        assert first.output == "ok:start"
        message = await rt.send_async(a.id, "hello", dedup_key="k")
        assert await rt.send_async(a.id, "hello", dedup_key="k") == message
        follow = await rt.follow_up_async("/root/a", "read")
        assert follow.generation == 2
        second = await rt.wait_async(a.id, timeout=5)
        assert second.output == "ok:read"
        assert [m.content for m in script.turns_of(a.id)[-1].messages] == ["hello"]
        assert (await rt.close_async(a.id)).state is AgentState.CLOSED
        with pytest.raises(AgentClosed):
            await rt.close_async(a.id)
        with pytest.raises(UnknownAgent):
            await rt.get_async("/root/nobody")
        with pytest.raises(UnknownAgent):
            await rt.wait_async("/root/nobody", timeout=1)

    asyncio.run(scenario())


def test_every_host_call_has_an_async_face(open_runtime: OpenRuntime) -> None:
    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lambda turn: "lead"),
            Profile("worker", runner=lambda turn: "worker"),
        ]
    )

    async def scenario() -> None:
        a = await rt.spawn_async("lead", "go", name="a")
        b = await rt.spawn_async("worker", "w", name="b", parent=a.id)
        await rt.wait_async(b.id, timeout=5)
        assert {i.id for i in await rt.agents_async()} == {a.id, b.id}
        closed = await rt.close_tree_async(a.id)
        assert [i.id for i in closed] == [b.id, a.id]
        assert await rt.agents_async() == []
        assert len(await rt.agents_async(include_closed=True)) == 2

    asyncio.run(scenario())
