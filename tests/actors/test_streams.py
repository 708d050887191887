"""rt.stream and rt.stream_async: a subtree's live events, bounded, ended by leaving or shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from support import PROMPT_S, OpenRuntime, tag, wait_until

from retinue import (
    AgentSpawned,
    Event,
    EventsDropped,
    InvalidAgentPath,
    Profile,
    Runtime,
    RuntimeClosed,
    StoreReadOnly,
    Turn,
    TurnSettled,
)
from retinue.testing import Gate, echo


def lead_of(count: int) -> Callable[[Turn], str]:
    """A lead that runs ``count`` workers and reports how many completed."""

    def lead(turn: Turn) -> str:
        results = turn.run_many([("worker", f"w{i}") for i in range(count)], timeout=PROMPT_S)
        return f"{len(results)} done"

    return lead


def team(count: int = 2) -> list[Profile]:
    return [
        Profile("lead", subagents=["worker"], runner=lead_of(count)),
        Profile("worker", runner=echo),
    ]


def collect_until_settled(stream: object, agent_id: str, into: list[Event]) -> None:
    """Take events from a sync stream until ``agent_id``'s first turn settled."""
    for event in stream:  # type: ignore[attr-defined]
        into.append(event)
        if isinstance(event, TurnSettled) and event.agent_id == agent_id:
            return


def test_a_stream_of_a_subtree_sees_only_its_agents(open_runtime: OpenRuntime) -> None:
    rt = open_runtime(team())
    mine: list[Event] = []
    everything: list[Event] = []
    with rt.stream("/root/a") as sub, rt.stream() as whole:
        a = rt.spawn("lead", "go", name="a")
        b = rt.spawn("lead", "go", name="b")
        collect_until_settled(sub, a.id, mine)
        collect_until_settled(whole, b.id, everything)
    rt.wait(b.id, timeout=PROMPT_S)
    paths = {e.path for e in mine}
    assert "/root/a" in paths and all(p == "/root/a" or p.startswith("/root/a/") for p in paths)
    assert len(paths) == 3  # the lead and its two workers
    assert {e.path for e in everything} >= {"/root/a", "/root/b"}
    spawned = [e.path for e in everything if isinstance(e, AgentSpawned)]
    assert any(p.startswith("/root/b/") for p in spawned)


def test_a_stream_by_id_follows_that_agents_subtree(open_runtime: OpenRuntime) -> None:
    rt = open_runtime(team(1))
    a = rt.spawn("lead", "go", name="a")
    rt.wait(a.id, timeout=PROMPT_S)
    seen: list[Event] = []
    with rt.stream(a.id) as stream:
        rt.spawn("lead", "other", name="b")
        rt.follow_up(a.id, "again")
        for event in stream:
            seen.append(event)
            if isinstance(event, TurnSettled) and event.agent_id == a.id:
                break
    assert seen and all(e.path == "/root/a" or e.path.startswith("/root/a/") for e in seen)
    assert [tag(e) for e in seen if e.agent_id == a.id][:2] == ["turn_queued", "turn_started"]


def test_a_relative_path_and_a_path_not_live_yet_are_followed(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    seen: list[Event] = []
    with rt.stream("later") as stream:  # /root/later, spawned after the stream opened
        info = rt.spawn("worker", "t", name="later")
        collect_until_settled(stream, info.id, seen)
    assert [tag(e) for e in seen][:3] == ["agent_spawned", "turn_queued", "turn_started"]


def test_a_full_stream_drops_its_oldest_events_and_says_how_many(
    open_runtime: OpenRuntime,
) -> None:
    rt = open_runtime([Profile("worker", runner=echo)], event_queue_capacity=4)
    stream = rt.stream()
    first = rt.spawn("worker", "t0", name="w0")
    rt.wait(first.id, timeout=PROMPT_S)
    for i in range(1, 4):  # nobody takes events meanwhile: the queue overflows
        info = rt.spawn("worker", f"t{i}", name=f"w{i}")
        rt.wait(info.id, timeout=PROMPT_S)
    notice = next(stream)
    assert isinstance(notice, EventsDropped) and notice.dropped > 0
    kept = [next(stream) for _ in range(4)]
    assert all(not isinstance(e, EventsDropped) for e in kept)
    assert kept[-1].path == "/root/w3"  # the newest events stayed
    stream.close()


def test_a_stream_ends_at_shutdown_after_what_was_queued(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    seen: list[Event] = []
    ended = threading.Event()
    stream = rt.stream()

    def consume() -> None:
        for event in stream:
            seen.append(event)
        ended.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    info = rt.spawn("worker", "t", name="w")
    rt.wait(info.id, timeout=PROMPT_S)
    rt.shutdown()
    assert ended.wait(PROMPT_S)
    assert any(isinstance(e, TurnSettled) and e.agent_id == info.id for e in seen)


def test_leaving_the_loop_stops_listening(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    bus = rt._system.bus  # type: ignore[union-attr]
    assert not bus.active
    stream = rt.stream()
    assert bus.active
    rt.spawn("worker", "t", name="w")
    assert isinstance(next(stream), AgentSpawned)
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)
    wait_until(lambda: not bus.active, what="the closed stream detached")


def test_a_stream_left_with_break_is_detached(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    bus = rt._system.bus  # type: ignore[union-attr]
    info = rt.spawn("worker", "t", name="w")
    rt.wait(info.id, timeout=PROMPT_S)

    def first_event() -> Event:
        for event in rt.stream():
            return event  # leaving the loop drops the stream
        raise AssertionError("the stream ended")

    thread_result: list[Event] = []
    thread = threading.Thread(target=lambda: thread_result.append(first_event()), daemon=True)
    thread.start()
    wait_until(lambda: bus.active, what="the stream attached")
    rt.follow_up(info.id, "again")
    thread.join(PROMPT_S)
    assert thread_result and thread_result[0].agent_id == info.id
    wait_until(lambda: not bus.active, what="the stream left with return detached")


def test_an_async_stream_never_blocks_its_loop(open_runtime: OpenRuntime) -> None:
    rt = open_runtime(team(1))

    async def main() -> list[Event]:
        seen: list[Event] = []
        ticks = 0
        stream = rt.stream_async("/root/a")
        nxt = asyncio.ensure_future(stream.__anext__())
        for _ in range(5):  # the loop runs on while the stream waits for its first event
            await asyncio.sleep(0)
            ticks += 1
        assert ticks == 5 and not nxt.done()
        info = await rt.spawn_async("lead", "go", name="a")
        seen.append(await asyncio.wait_for(nxt, PROMPT_S))
        async for event in stream:
            seen.append(event)
            if isinstance(event, TurnSettled) and event.agent_id == info.id:
                break
        await stream.aclose()
        return seen

    seen = asyncio.run(asyncio.wait_for(main(), 2 * PROMPT_S))
    assert isinstance(seen[0], AgentSpawned) and seen[0].path == "/root/a"
    paths = {e.path for e in seen}
    assert len(paths) == 2 and all(p == "/root/a" or p.startswith("/root/a/") for p in paths)


def test_an_async_stream_ends_at_shutdown(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])

    async def main() -> int:
        count = 0
        async with rt.stream_async() as stream:
            info = await rt.spawn_async("worker", "t", name="w")
            await rt.wait_async(info.id, timeout=PROMPT_S)
            loop = asyncio.get_running_loop()
            loop.call_soon(lambda: threading.Thread(target=rt.shutdown, daemon=True).start())
            async for _ in stream:
                count += 1
        return count

    assert asyncio.run(asyncio.wait_for(main(), 2 * PROMPT_S)) >= 4


def test_stream_refuses_bad_refs_and_closed_or_read_only_runtimes(
    open_runtime: OpenRuntime,
) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    with pytest.raises(InvalidAgentPath):
        rt.stream("/elsewhere/x")
    with pytest.raises(InvalidAgentPath):
        rt.stream_async("../up")
    info = rt.spawn("worker", "t", name="w")
    rt.wait(info.id, timeout=PROMPT_S)
    rt.shutdown()
    with pytest.raises(RuntimeClosed):
        rt.stream()
    with pytest.raises(RuntimeClosed):
        rt.stream_async()
    reader = Runtime.open(rt.path, readonly=True)  # a reader has no events to stream
    try:
        with pytest.raises(StoreReadOnly):
            reader.stream()
    finally:
        reader.shutdown()


def test_a_stream_opened_on_a_busy_runtime_keeps_per_turn_order(
    open_runtime: OpenRuntime, make_gate: Callable[..., Gate]
) -> None:
    gate = make_gate()
    rt = open_runtime([Profile("worker", runner=gate)])
    workers = [rt.spawn("worker", f"t{i}", name=f"w{i}") for i in range(3)]
    gate.wait_started(3)
    seen: list[Event] = []
    with rt.stream() as stream:
        gate.release()
        for event in stream:
            seen.append(event)
            if sum(isinstance(e, TurnSettled) for e in seen) == 3:
                break
    assert {e.agent_id for e in seen if isinstance(e, TurnSettled)} == {w.id for w in workers}
