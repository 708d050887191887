"""A shard's event streams without Ray: open, long-poll takes, close, idle sweep, bounds.

The same encoded calls a face sends (:mod:`retinue.cluster.eventwire`), fed to
a real :class:`~retinue.cluster.shard.ShardCore` over a real store, on one
event loop (a shard actor has one).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support import wait_until

from retinue import (
    AgentInfo,
    AgentSpawned,
    EventsDropped,
    LimitExceeded,
    Limits,
    TurnSettled,
    TurnStarted,
)
from retinue.actors.commands import HOST, Spawn
from retinue.cluster import wire as w
from retinue.cluster.eventwire import CloseStream, EventBatch, OpenStream, TakeEvents
from retinue.cluster.shard import ShardCore
from retinue.protocol.messages import Event

NONE: type[Any] = type(None)


def spawn(rid: str, name: str) -> w.Run:
    """A worker's spawn as the face sends it (key made from the request id)."""
    return w.run(Spawn(HOST, "worker", "t", name, "/root", f"~{rid}"), rid=rid)


async def ask(core: ShardCore, call: w.Call, kind: type[Any] = NONE) -> Any:
    return w.decode_reply(await core.handle(w.encode_call(call)), kind)


async def take_until(core: ShardCore, sid: str, done: Any, bound: int = 200) -> list[Event]:
    """Take events of ``sid`` until ``done(events)`` holds."""
    got: list[Event] = []
    for _ in range(bound):
        batch = await ask(core, TakeEvents(sid, 100, 0.05), EventBatch)
        assert not batch.unknown and not batch.ended
        got.extend(batch.events)
        if done(got):
            return got
    raise AssertionError(f"never done; got {got}")


def test_a_stream_takes_its_subtree_with_cluster_ids(open_core: Any) -> None:
    core = open_core()

    async def scenario() -> None:
        await ask(core, OpenStream("S1", "/root/a"))
        await ask(core, OpenStream("S1", "/root/a"))  # a retried open opens nothing twice
        assert core.pong().streams == 1
        a = await ask(core, spawn("r1", "a"), AgentInfo)
        await ask(core, spawn("r2", "b"), AgentInfo)

        def settled(events: list[Event]) -> bool:
            return any(isinstance(e, TurnSettled) for e in events)

        events = await take_until(core, "S1", settled)
        assert {e.path for e in events} == {"/root/a"}  # not b's
        assert {e.agent_id for e in events} == {a.id}  # a cluster id: s1-...
        kinds = [type(e) for e in events]
        assert kinds.index(AgentSpawned) < kinds.index(TurnStarted) < kinds.index(TurnSettled)
        # Bounded take: at most max_events, waiting at most wait_s.
        empty = await ask(core, TakeEvents("S1", 1, 0.01), EventBatch)
        assert empty == EventBatch()
        await ask(core, CloseStream("S1"))
        await ask(core, CloseStream("S1"))  # idempotent
        assert core.pong().streams == 0
        assert (await ask(core, TakeEvents("S1", 10, 0.0), EventBatch)).unknown

    asyncio.run(scenario())


def test_a_take_returns_at_most_max_events_and_keeps_the_rest(open_core: Any) -> None:
    core = open_core()

    async def scenario() -> None:
        await ask(core, OpenStream("S", None))
        for i in range(3):
            await ask(core, spawn(f"r{i}", f"a{i}"), AgentInfo)
        first = await take_until(core, "S", lambda got: len(got) >= 1)
        batch = await ask(core, TakeEvents("S", 2, 1.0), EventBatch)
        assert len(batch.events) <= 2
        spawned = [e for e in [*first, *batch.events] if isinstance(e, AgentSpawned)]
        assert [e.path for e in spawned] == ["/root/a0", "/root/a1", "/root/a2"][: len(spawned)]

    asyncio.run(scenario())


def test_closing_a_stream_ends_a_take_that_waits(open_core: Any) -> None:
    core = open_core()

    async def scenario() -> None:
        await ask(core, OpenStream("S", None))
        waiting = asyncio.ensure_future(core.handle(w.encode_call(TakeEvents("S", 10, 30.0))))
        await asyncio.sleep(0.05)
        await ask(core, CloseStream("S"))
        batch = w.decode_reply(await asyncio.wait_for(waiting, 10), EventBatch)
        assert batch.ended

    asyncio.run(scenario())


def test_a_stream_nobody_polls_is_closed_by_the_shard(open_core: Any) -> None:
    core = open_core(stream_idle_s=0.2)

    async def scenario() -> None:
        await ask(core, OpenStream("S", None))
        assert core.pong().streams == 1

    asyncio.run(scenario())
    wait_until(lambda: core.pong().streams == 0, what="the idle stream closed")


def test_a_shard_keeps_at_most_max_streams(open_core: Any) -> None:
    core = open_core(max_streams=2)

    async def scenario() -> None:
        await ask(core, OpenStream("S1", None))
        await ask(core, OpenStream("S2", None))
        with pytest.raises(LimitExceeded) as caught:
            await ask(core, OpenStream("S3", None))
        assert caught.value.limit == 2
        await ask(core, CloseStream("S1"))
        await ask(core, OpenStream("S3", None))

    asyncio.run(scenario())


def test_a_stream_that_falls_behind_gets_events_dropped(open_core: Any) -> None:
    core = open_core(limits=Limits(event_queue_capacity=2))

    async def scenario() -> None:
        await ask(core, OpenStream("S", None))
        for i in range(3):
            await ask(core, spawn(f"r{i}", f"a{i}"), AgentInfo)
        wait_until(lambda: len(core.rt.agents()) == 3, what="three agents")
        await asyncio.sleep(0.3)
        batch = await ask(core, TakeEvents("S", 100, 1.0), EventBatch)
        assert isinstance(batch.events[0], EventsDropped)
        assert len(batch.events) == 3

    asyncio.run(scenario())


def test_a_shut_down_shard_ends_its_streams(open_core: Any) -> None:
    core = open_core()

    async def scenario() -> None:
        await ask(core, OpenStream("S", None))
        core.rt.shutdown()
        for _ in range(50):
            batch = await ask(core, TakeEvents("S", 100, 0.1), EventBatch)
            if batch.ended:
                return
        raise AssertionError("the stream never ended")

    asyncio.run(scenario())


# -- a face's take that finds its stream unknown ----------------------------------------


def _take_answered_unknown(closed: bool) -> tuple[str, Any]:
    """Drive a face's poll of one shard whose take answers "unknown"; return what it does
    next: ``("call", name)`` for its next call, ``("done", value)`` if it ends there."""
    from retinue.cluster._streaming import StreamBounds, poll_op
    from retinue.cluster._transport import One

    op = poll_op(0, "s1", None, StreamBounds(poll_s=1.0, batch=10), lambda: closed)
    take = next(op)
    assert isinstance(take, One) and take.tag == "take_events"
    try:
        step = op.send(w.ok_reply(EventBatch(unknown=True)))
    except StopIteration as stop:
        return "done", stop.value
    assert isinstance(step, One)
    return "call", step.tag


def test_a_take_that_finds_its_stream_unknown_reopens_it_unless_the_face_closed_it() -> None:
    # The shard lost the stream (a restart, an idle sweep): the face reopens it.
    assert _take_answered_unknown(closed=False) == ("call", "open_stream")
    # The face's close reached the shard before this take did: no events and no reopen
    # behind the close (it stayed open on its shard); the pump, seeing the stream
    # closed, sends its shard the close.
    assert _take_answered_unknown(closed=True) == ("done", ([], False))
