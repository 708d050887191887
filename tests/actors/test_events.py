"""Published events: every transition, in order for each agent, as msgspec structs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import msgspec
from support import EventLog, OpenRuntime, control_of, loose_turn, tag, wait_settled

from retinue import (
    AgentClosedEvent,
    AgentSpawned,
    CompletionRouted,
    Event,
    EventsDropped,
    Limits,
    MessageQueued,
    Profile,
    Turn,
    TurnQueued,
    TurnSettled,
    TurnStarted,
)
from retinue.testing import Gate, echo

ONE_TURN = ["agent_spawned", "turn_queued", "turn_started", "turn_settled", "completion_routed"]
NEXT_TURN = ["turn_queued", "turn_started", "turn_settled", "completion_routed"]


def has(kind: str, agent_id: str, count: int = 1) -> Callable[[list[Event]], bool]:
    """A check for :meth:`EventLog.wait_for`: ``count`` events of ``kind`` for the agent."""

    def check(events: list[Event]) -> bool:
        return sum(1 for e in events if e.agent_id == agent_id and tag(e) == kind) >= count

    return check


def test_one_agent_publishes_its_life_in_order(open_runtime: OpenRuntime, events: EventLog) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    rt.subscribe(events)
    a = rt.spawn("worker", "t", name="a")
    rt.wait(a.id, timeout=5)
    rt.close(a.id)
    events.wait_for(has("agent_closed", a.id))
    mine = events.of(a.id)
    assert [tag(e) for e in mine] == [*ONE_TURN, "agent_closed"]
    spawned, queued, started, settled_, routed, closed = mine
    assert isinstance(spawned, AgentSpawned)
    assert (spawned.path, spawned.profile, spawned.parent_path) == ("/root/a", "worker", "/root")
    assert isinstance(queued, TurnQueued) and queued.generation == 1
    assert isinstance(started, TurnStarted) and started.generation == 1
    assert isinstance(settled_, TurnSettled)
    assert (settled_.generation, settled_.status) == (1, "completed")
    assert isinstance(routed, CompletionRouted)
    assert (routed.completion_id, routed.recipient) == (f"{a.id}:1", "/root")
    assert isinstance(closed, AgentClosedEvent)
    assert all(e.path == "/root/a" for e in mine)
    times = [e.at for e in mine]
    assert times == sorted(times)
    assert events.threads and threading.current_thread().name not in events.threads


def test_messages_and_child_completions_are_published(
    open_runtime: OpenRuntime, events: EventLog
) -> None:
    def lead(turn: Turn) -> str:
        return str(turn.run("worker", "w", name="w", timeout=5).output)

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=echo)]
    )
    rt.subscribe(events)
    a = rt.spawn("lead", "go", name="a")
    rt.wait(a.id, timeout=5)
    message = rt.send(a.id, "hello")
    events.wait_for(has("message_queued", a.id))
    (queued,) = [e for e in events.of(a.id) if isinstance(e, MessageQueued)]
    assert (queued.message_id, queued.sender, queued.path) == (message.id, "/root", "/root/a")
    child = rt.get("/root/a/w")
    events.wait_for(has("completion_routed", child.id))
    assert [tag(e) for e in events.of(child.id)] == ONE_TURN
    (routed,) = [e for e in events.of(child.id) if isinstance(e, CompletionRouted)]
    assert routed.recipient == "/root/a"


def test_an_interrupted_turn_settles_once(
    open_runtime: OpenRuntime, events: EventLog, make_gate: Callable[..., Gate]
) -> None:
    stubborn = make_gate(honour_cancel=False)
    rt = open_runtime([Profile("worker", runner=stubborn), Profile("other", runner=echo)])
    rt.subscribe(events)
    a = rt.spawn("worker", "t", name="a")
    stubborn.wait_started(1)
    rt.interrupt(a.id)
    stubborn.release()
    stubborn.join_runner_threads()
    # A later transition: had the late result published anything, it would come first.
    b = rt.spawn("other", "later")
    events.wait_for(has("agent_spawned", b.id))
    mine = events.of(a.id)
    # The runner ignored the interrupt, so its thread is announced as abandoned.
    assert [tag(e) for e in mine] == [*ONE_TURN[:3], "runner_abandoned", *ONE_TURN[3:]]
    settled_ = [e for e in mine if isinstance(e, TurnSettled)]
    assert [(e.generation, e.status) for e in settled_] == [(1, "interrupted")]


def test_per_agent_order_holds_under_concurrency(
    open_runtime: OpenRuntime, events: EventLog
) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    rt.subscribe(events)
    barrier = threading.Barrier(8)

    def host(i: int) -> list[str]:
        barrier.wait()
        ids = []
        for j in range(4):
            agent = rt.spawn("worker", f"{i}.{j}")
            wait_settled(rt, agent.id, 1)
            rt.follow_up(agent.id, "again")
            ids.append(agent.id)
        return ids

    with ThreadPoolExecutor(8) as pool:
        ids = [x for chunk in pool.map(host, range(8)) for x in chunk]
    for agent_id in ids:
        events.wait_for(has("completion_routed", agent_id, 2))
    for agent_id in ids:
        mine = events.of(agent_id)
        assert [tag(e) for e in mine] == ONE_TURN + NEXT_TURN
        generations = [getattr(e, "generation", None) for e in mine]
        assert generations == [None, 1, 1, 1, None, 2, 2, 2, None]
        completion_ids = [e.completion_id for e in mine if isinstance(e, CompletionRouted)]
        assert completion_ids == [f"{agent_id}:1", f"{agent_id}:2"]


def test_unsubscribe_stops_delivery(open_runtime: OpenRuntime, events: EventLog) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    stays = EventLog()
    unsubscribe = rt.subscribe(events)
    rt.subscribe(stays)
    a = rt.spawn("worker", "t")
    events.wait_for(has("completion_routed", a.id))
    unsubscribe()
    b = rt.spawn("worker", "t")
    stays.wait_for(has("completion_routed", b.id))
    assert events.of(b.id) == []


def test_a_failing_subscriber_harms_nobody(open_runtime: OpenRuntime, events: EventLog) -> None:
    def broken(event: Event) -> None:
        raise RuntimeError("subscriber bug")

    rt = open_runtime([Profile("worker", runner=echo)])
    rt.subscribe(broken)
    rt.subscribe(events)
    for i in range(3):
        agent = rt.spawn("worker", f"t{i}")
        assert rt.wait(agent.id, timeout=5).output == f"done:t{i}"
        events.wait_for(has("completion_routed", agent.id))
        assert [tag(e) for e in events.of(agent.id)] == ONE_TURN


def test_events_are_msgspec_structs_with_a_tag(open_runtime: OpenRuntime, events: EventLog) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    rt.subscribe(events)
    a = rt.spawn("worker", "t")
    rt.send(a.id, "hi")
    rt.wait(a.id, timeout=5)
    rt.close(a.id)
    events.wait_for(has("agent_closed", a.id))
    kinds = set()
    for event in events.of(a.id):
        encoded = msgspec.json.encode(event)
        assert f'"event":"{tag(event)}"'.encode() in encoded
        assert msgspec.json.decode(encoded, type=Event) == event
        kinds.add(tag(event))
    assert kinds == {*ONE_TURN, "message_queued", "agent_closed"}


def test_a_rerouted_completion_is_published(open_runtime: OpenRuntime, events: EventLog) -> None:
    def mid(turn: Turn) -> str:
        turn.spawn("leaf", "deep", name="c")
        return "mid"

    def top(turn: Turn) -> str:
        if turn.task == "go":
            turn.run("mid", "m", name="b", timeout=5)
        return "top"

    rt = open_runtime(
        [
            Profile("top", subagents=["mid"], runner=top, wake_on_completion=False),
            Profile("mid", subagents=["leaf"], runner=mid, wake_on_completion=False),
            Profile("leaf", runner=echo),
        ]
    )
    rt.subscribe(events)
    a = rt.spawn("top", "go", name="a")
    rt.wait(a.id, timeout=5)
    c = rt.get("/root/a/b/c")
    wait_settled(rt, c.id)
    rt.close(c.id)
    rt.close("/root/a/b")  # c's pending completion moves up to a
    rt.send(a.id, "marker")  # events arrive in commit order: this one comes after
    events.wait_for(has("message_queued", a.id))
    routes = [
        (e.completion_id, e.recipient) for e in events.of(c.id) if isinstance(e, CompletionRouted)
    ]
    assert routes == [(f"{c.id}:1", "/root/a/b"), (f"{c.id}:1", "/root/a")]


def test_a_blocked_subscriber_loses_its_oldest_events_counted_and_blocks_nobody(
    open_runtime: OpenRuntime, events: EventLog
) -> None:
    capacity = 40
    rt = open_runtime([Profile("worker", runner=echo)], event_queue_capacity=capacity)
    release = threading.Event()
    slow = EventLog()

    def blocked(event: Event) -> None:
        slow(event)
        release.wait(timeout=60)

    rt.subscribe(blocked)
    rt.subscribe(events)
    last = ""
    for i in range(30):  # ~6 events per lifecycle: far more than the capacity
        agent = rt.spawn("worker", f"t{i}")
        rt.wait(agent.id, timeout=5)  # the supervisor is not held up by the blocked one
        rt.close(agent.id)
        last = agent.id
    everything = events.wait_for(has("agent_closed", last))
    release.set()
    got = slow.wait_for(
        lambda seen: any(e.agent_id == last and tag(e) == "agent_closed" for e in seen)
    )
    notices = [i for i, e in enumerate(got) if isinstance(e, EventsDropped)]
    assert len(notices) == 1, got
    (at,) = notices
    notice = got[at]
    assert isinstance(notice, EventsDropped)
    assert (notice.agent_id, notice.path) == ("", "/root")
    before, after = got[:at], got[at + 1 :]
    # The oldest were dropped, the newest kept, and the notice sits where the gap is.
    assert len(after) == capacity
    assert before + after == everything[: len(before)] + everything[-capacity:]
    assert notice.dropped == len(everything) - len(before) - len(after)
    assert not any(isinstance(e, EventsDropped) for e in everything)


def test_the_event_queue_capacity_comes_from_the_environment() -> None:
    assert Limits().event_queue_capacity == 10_000
    limits = Limits.from_env({"RETINUE_EVENT_QUEUE_CAPACITY": "123"})
    assert limits.event_queue_capacity == 123


def test_a_transitions_events_come_before_what_its_effects_publish() -> None:
    # A turn's runner starts in an after-commit effect; what it publishes live must
    # follow the turn_started of the transition that started it.
    from concurrent.futures import Future

    from retinue import ToolCallStarted
    from retinue.actors.events import EventBus
    from retinue.actors.events._bus import EventQueue
    from retinue.actors.supervisor._transition import Transition

    bus = EventBus(16)
    queue = EventQueue(16)
    bus.attach(queue)
    tx = Transition(Future(), bus, "start", record_events=True)
    tx.emit(TurnStarted(agent_id="a", path="/root/a", at=1.0, generation=1))
    live = ToolCallStarted(
        agent_id="a", path="/root/a", at=1.0, call_id="c", tool="t", arguments_preview="{}"
    )
    tx.after(lambda: bus.publish([live]))
    tx.committed(None)
    with queue.cond:
        taken = queue.take_locked(16)
    assert [tag(e) for e in taken] == ["turn_started", "tool_call_started"]


def test_a_cancelled_turn_publishes_nothing_more() -> None:
    # Its interrupt's settle is published after the cancel: nothing the runner
    # reports after the cancel may come after that settle.
    from retinue.actors.events import EventBus, Observer
    from retinue.actors.events._bus import EventQueue

    bus = EventBus(16)
    queue = EventQueue(16)
    bus.attach(queue)
    turn = control_of(loose_turn())
    watch = Observer(bus).watch(turn)
    call = watch.tool_call("c1", "grep", '{"pattern": "x"}')
    turn.cancel()
    call.finished(None)
    watch.tool_call("c2", "grep", "{}")
    with queue.cond:
        taken = queue.take_locked(16)
    assert [(tag(e), getattr(e, "call_id", "")) for e in taken] == [("tool_call_started", "c1")]
