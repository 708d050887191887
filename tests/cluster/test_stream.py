"""Event streams through the cluster face: a tree's events, every shard's, closed when left."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support import wait_until

from retinue import AgentInfo, AgentSpawned, Event, TurnSettled, TurnStarted
from retinue.cluster.ids import split_id

pytestmark = pytest.mark.ray


def shard_of(agent_id: str) -> int:
    split = split_id(agent_id)
    assert split is not None, agent_id
    return split[0]


def own_kinds(events: list[Event], agent_id: str) -> list[type[Any]]:
    """The kinds of ``agent_id``'s spawn, turn start and settle events, in stream order."""
    wanted = (AgentSpawned, TurnStarted, TurnSettled)
    return [type(e) for e in events if e.agent_id == agent_id and isinstance(e, wanted)]


def open_streams(cluster: Any) -> list[int]:
    return [pong.streams for pong in cluster.ping()]


def test_a_stream_of_a_tree_sees_its_spawn_turns_and_settle_in_order(shared_cluster: Any) -> None:
    cluster = shared_cluster
    events: list[Event] = []
    # Opened before the name is placed: it listens on every shard, and sees the spawn.
    with cluster.stream("/root/streamed") as stream:
        lead = cluster.spawn("lead", "S", name="streamed")
        for event in stream:
            events.append(event)
            if isinstance(event, TurnSettled) and event.agent_id == lead.id:
                break
    assert own_kinds(events, lead.id) == [AgentSpawned, TurnStarted, TurnSettled]
    assert all(e.path.startswith("/root/streamed") for e in events)
    spawned = [e for e in events if isinstance(e, AgentSpawned)]
    assert len(spawned) == 7  # the lead, two mids, four leaves: ids are cluster ids
    assert {shard_of(e.agent_id) for e in spawned} == {shard_of(lead.id)}
    for e in spawned:
        settled = [s for s in events if isinstance(s, TurnSettled) and s.agent_id == e.agent_id]
        assert len(settled) == 1, e.path
        assert own_kinds(events, e.agent_id) == [AgentSpawned, TurnStarted, TurnSettled]
    assert open_streams(cluster) == [0, 0]  # leaving the with block closed them on the shards


def test_a_stream_of_every_shard_sees_trees_on_two_shards(shared_cluster: Any) -> None:
    cluster = shared_cluster
    with cluster.stream() as stream:
        assert open_streams(cluster) == [1, 1]
        agents: list[AgentInfo] = []
        while len({shard_of(a.id) for a in agents}) < 2:  # least-loaded: both shards soon
            assert len(agents) < 6, "new names never reached the second shard"
            agents.append(cluster.spawn("worker", "x", name=f"every{len(agents)}"))
        ids = {a.id for a in agents}
        events: list[Event] = []
        for event in stream:
            events.append(event)
            settled = {e.agent_id for e in events if isinstance(e, TurnSettled)}
            if ids <= settled:
                break
    for agent in agents:
        assert own_kinds(events, agent.id) == [AgentSpawned, TurnStarted, TurnSettled]
    assert open_streams(cluster) == [0, 0]


def test_a_stream_left_early_is_closed_on_its_shards(shared_cluster: Any) -> None:
    cluster = shared_cluster
    lead = cluster.spawn("worker", "x", name="early")
    stream = cluster.stream(lead.id)  # an id: its own shard only
    expected = [0, 0]
    expected[shard_of(lead.id)] = 1
    assert open_streams(cluster) == expected
    cluster.follow_up(lead.id, "again")
    for event in stream:
        assert event.agent_id == lead.id
        break
    stream.close()
    assert open_streams(cluster) == [0, 0]
    assert list(stream) == []  # a closed stream ends
    # Dropped without close(): its pumps close it on the shards after their takes.
    dropped = cluster.stream()
    cluster.follow_up(lead.id, "third")
    assert next(dropped).agent_id == lead.id
    del dropped
    wait_until(lambda: open_streams(cluster) == [0, 0], timeout=30, what="streams closed")


def test_stream_async_sees_a_tree_and_closes_when_left(shared_cluster: Any) -> None:
    cluster = shared_cluster

    async def scenario() -> list[Event]:
        events: list[Event] = []
        async with cluster.stream_async("/root/astream") as stream:
            lead = await cluster.spawn_async("worker", "x", name="astream")
            async for event in stream:
                events.append(event)
                if isinstance(event, TurnSettled) and event.agent_id == lead.id:
                    break
        assert own_kinds(events, lead.id) == [AgentSpawned, TurnStarted, TurnSettled]
        return events

    assert asyncio.run(scenario())
    assert open_streams(cluster) == [0, 0]
