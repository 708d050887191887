"""Completions: host waits, routing (and the closed-parent fallback), wake-ups, turn waits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from support import OpenRuntime, lead_and_worker, wait_settled, wait_until

from retinue import (
    AgentBusy,
    AgentClosed,
    AgentState,
    Completion,
    CompletionBacklogFull,
    CompletionStatus,
    Message,
    NothingToWaitFor,
    Profile,
    RetinueError,
    Runner,
    Runtime,
    Turn,
    TurnInterrupted,
    WaitTimeout,
)
from retinue.testing import Gate, echo

# -- host waits -------------------------------------------------------------------------


def test_wait_returns_the_completion_of_the_turn(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "job", name="a")
    done = rt.wait(a.id, timeout=5)
    assert isinstance(done, Completion)
    assert done.id == f"{a.id}:1"
    assert (done.agent_id, done.path, done.generation) == (a.id, "/root/a", 1)
    assert done.status is CompletionStatus.COMPLETED
    assert (done.output, done.error) == ("done:job", None)
    assert done.created_at > 0
    info = rt.get(a.id)
    assert (info.state, info.output, info.error) == (AgentState.COMPLETED, "done:job", None)
    # By path, too.
    b = rt.spawn("worker", "other", name="b")
    assert rt.wait("/root/b", timeout=5).agent_id == b.id


def test_wait_returns_the_oldest_unreceived_completion_once(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "t1")
    wait_settled(rt, a.id, 1)
    rt.follow_up(a.id, "t2")
    wait_settled(rt, a.id, 2)
    first = rt.wait(a.id, timeout=5)
    second = rt.wait(a.id, timeout=5)
    assert (first.generation, first.output) == (1, "done:t1")
    assert (second.generation, second.output) == (2, "done:t2")
    with pytest.raises(NothingToWaitFor, match="completed: no turn is queued or running"):
        rt.wait(a.id, timeout=5)  # at once: idle, and every completion received


def test_wait_timeout_leaves_the_agent_running(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    a = rt.spawn("worker", "slow")
    (turn,) = gate.wait_started(1)
    with pytest.raises(WaitTimeout) as caught:
        rt.wait(a.id, timeout=0.05)
    assert isinstance(caught.value, TimeoutError)
    assert rt.get(a.id).state is AgentState.RUNNING
    assert not turn.cancelled.is_set()
    with pytest.raises(TimeoutError):
        rt.wait(a.id, timeout=0)
    gate.release()
    done = rt.wait(a.id, timeout=5)  # the timed-out waits consumed nothing
    assert (done.generation, done.output) == (1, "released:slow")
    with pytest.raises(NothingToWaitFor):
        rt.wait(a.id, timeout=5)


# -- failures --------------------------------------------------------------------------


def test_a_runner_that_raises_fails_with_type_and_message(open_runtime: OpenRuntime) -> None:
    def boom(turn: Turn) -> str:
        raise ValueError("bad input: 42")

    rt = open_runtime([Profile("worker", runner=boom)])
    a = rt.spawn("worker", "t")
    done = rt.wait(a.id, timeout=5)
    assert done.status is CompletionStatus.FAILED
    assert done.error == "ValueError: bad input: 42"
    assert done.output is None
    info = rt.get(a.id)
    assert (info.state, info.error) == (AgentState.FAILED, "ValueError: bad input: 42")
    assert "Traceback" not in str(info.error)


@pytest.mark.parametrize("value", [42, None, b"bytes", ["list"]])
def test_a_runner_that_returns_a_non_string_fails(open_runtime: OpenRuntime, value: object) -> None:
    def bad(turn: Turn) -> str:
        return value  # type: ignore[return-value]

    rt = open_runtime([Profile("worker", runner=bad)])
    a = rt.spawn("worker", "t")
    done = rt.wait(a.id, timeout=5)
    assert done.status is CompletionStatus.FAILED
    assert done.output is None
    assert done.error is not None
    assert "str" in done.error
    assert type(value).__name__ in done.error
    assert rt.get(a.id).state is AgentState.FAILED


def test_a_failed_child_reaches_its_parent_as_a_failed_completion(
    open_runtime: OpenRuntime,
) -> None:
    def boom(turn: Turn) -> str:
        raise RuntimeError("child broke")

    def lead(turn: Turn) -> str:
        child = turn.run("worker", "t", timeout=5)
        return f"{child.status}|{child.error}"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=boom)]
    )
    a = rt.spawn("lead", "go")
    assert rt.wait(a.id, timeout=5).output == "failed|RuntimeError: child broke"


# -- the backlog cap --------------------------------------------------------------------


def test_pending_completions_cap_refuses_a_follow_up(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)], pending_completions_per_agent=2)
    a = rt.spawn("worker", "t1")
    wait_settled(rt, a.id, 1)
    rt.follow_up(a.id, "t2")  # one unreceived: allowed
    wait_settled(rt, a.id, 2)
    with pytest.raises(CompletionBacklogFull) as caught:
        rt.follow_up(a.id, "t3")  # two unreceived: refused, never dropped
    assert str(caught.value)
    info = rt.get(a.id)
    assert (info.generation, info.state, info.output) == (2, AgentState.COMPLETED, "done:t2")
    assert rt.wait(a.id, timeout=5).generation == 1
    rt.follow_up(a.id, "t3")
    wait_settled(rt, a.id, 3)
    assert [rt.wait(a.id, timeout=5).generation for _ in range(2)] == [2, 3]


# -- wake on completion ------------------------------------------------------------------


def test_wake_on_completion_coalesces_pending_completions(
    open_runtime: OpenRuntime, make_gate: Callable[..., Gate]
) -> None:
    hold = make_gate()
    turns: list[Turn] = []

    def lead(turn: Turn) -> str:
        turns.append(turn)
        if not turn.messages:
            for i in range(3):
                turn.spawn("worker", f"w{i}", name=f"w{i}")
            hold(turn)  # keep running until every child has settled
            return "dispatched"
        return "got " + ",".join(m.content for m in turn.messages)

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=echo)]
    )
    a = rt.spawn("lead", "go", name="a")
    hold.wait_started(1)
    kids = [rt.get(f"/root/a/w{i}") for i in range(3)]
    for kid in kids:
        wait_settled(rt, kid.id)
    hold.release()

    first = rt.wait(a.id, timeout=5)
    second = rt.wait(a.id, timeout=5)
    assert (first.generation, first.output) == (1, "dispatched")
    assert second.generation == 2
    assert len(turns) == 2
    wake = turns[1]
    assert [m.kind for m in wake.messages] == ["completion"] * 3
    assert {m.completion.agent_id for m in wake.messages if m.completion} == {k.id for k in kids}
    for m in wake.messages:
        assert isinstance(m, Message) and m.completion is not None
        assert m.completion.status is CompletionStatus.COMPLETED
        assert m.sender == m.completion.path
        assert m.content == m.completion.output
    assert second.output == "got " + ",".join(m.content for m in wake.messages)
    # One follow-up turn carried all three; nothing is left to wake it again.
    info = rt.get(a.id)
    assert (info.generation, info.state) == (2, AgentState.COMPLETED)


def test_without_wake_on_completion_the_parent_stays_idle(open_runtime: OpenRuntime) -> None:
    turns: list[Turn] = []

    def lead(turn: Turn) -> str:
        turns.append(turn)
        if turn.task == "go":
            turn.spawn("worker", "w0", name="w0")
            turn.spawn("worker", "w1", name="w1")
            return "dispatched"
        return "collected " + ",".join(sorted(m.content for m in turn.messages))

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, wake_on_completion=False),
            Profile("worker", runner=echo),
        ]
    )
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "dispatched"
    wait_settled(rt, "/root/a/w0")
    wait_settled(rt, "/root/a/w1")
    info = rt.get(a.id)
    assert (info.generation, info.state) == (1, AgentState.COMPLETED)
    # The pending completions are handed to its next turn instead.
    rt.follow_up(a.id, "collect")
    done = rt.wait(a.id, timeout=5)
    assert done.output == "collected done:w0,done:w1"
    assert [m.kind for m in turns[1].messages] == ["completion", "completion"]
    rt.follow_up(a.id, "collect")
    assert rt.wait(a.id, timeout=5).output == "collected "


# -- routing ---------------------------------------------------------------------------


def fallback_profiles(top: Runner, leaf: Runner, *, top_wakes: bool = True) -> list[Profile]:
    """top -> mid -> leaf, where mid never wakes and spawns one leaf ``c``."""

    def mid(turn: Turn) -> str:
        if turn.task == "spawn":
            turn.spawn("leaf", "deep", name="c")
        return "mid"

    return [
        Profile("top", subagents=["mid"], runner=top, wake_on_completion=top_wakes),
        Profile("mid", subagents=["leaf"], runner=mid, wake_on_completion=False),
        Profile("leaf", runner=leaf),
    ]


def top_runner(record: list[Turn]) -> Callable[[Turn], str]:
    """A top agent that runs ``mid`` ``b`` once, then reports what its wake turns see."""

    def top(turn: Turn) -> str:
        record.append(turn)
        if not turn.messages:
            turn.run("mid", "spawn", name="b", timeout=5)
            return "ran b"
        return ";".join(
            f"{m.kind}:{m.sender}:{m.completion.status if m.completion else ''}"
            for m in turn.messages
        )

    return top


def test_completion_of_a_closed_parent_goes_to_the_nearest_live_ancestor(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    turns: list[Turn] = []
    rt = open_runtime(fallback_profiles(top_runner(turns), gate))
    a = rt.spawn("top", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "ran b"
    gate.wait_started(1)
    gate.release()
    wait_settled(rt, "/root/a/b/c")
    # b does not wake; c's completion waits in b's pending list.
    assert rt.get("/root/a/b").generation == 1
    assert rt.get(a.id).generation == 1
    rt.close("/root/a/b/c")
    rt.close("/root/a/b")
    # b is gone: c's completion moves up to a, which wakes with it.
    woken = rt.wait(a.id, timeout=5)
    assert woken.generation == 2
    assert woken.output == "completion:/root/a/b/c:completed"
    assert len(turns) == 2


def test_close_tree_routes_interrupted_completions_to_the_live_ancestor(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    turns: list[Turn] = []
    rt = open_runtime(fallback_profiles(top_runner(turns), gate))
    a = rt.spawn("top", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "ran b"
    gate.wait_started(1)
    closed = rt.close_tree("/root/a/b")
    assert [i.path for i in closed] == ["/root/a/b/c", "/root/a/b"]
    woken = rt.wait(a.id, timeout=5)
    assert woken.output == "completion:/root/a/b/c:interrupted"


def test_completion_goes_to_the_host_when_no_ancestor_is_live(
    open_runtime: OpenRuntime,
) -> None:
    turns: list[Turn] = []
    rt = open_runtime(fallback_profiles(top_runner(turns), echo, top_wakes=False))
    a = rt.spawn("top", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "ran b"
    c = rt.get("/root/a/b/c")  # spawned by b before b settled
    wait_settled(rt, c.id)
    closed = rt.close_tree(a.id)
    assert [i.path for i in closed] == ["/root/a/b/c", "/root/a/b", "/root/a"]
    done = rt.wait(c.id, timeout=5)
    assert (done.agent_id, done.status, done.output) == (c.id, "completed", "done:deep")
    assert len(turns) == 1  # a never woke


# -- waits inside a turn ---------------------------------------------------------------


def test_turn_wait_returns_a_childs_message_before_its_completion(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    seen: list[Message | Completion] = []

    def worker(turn: Turn) -> str:
        turn.send(turn.agent.parent_path, "progress 1")
        gate(turn)
        return "final"

    def lead(turn: Turn) -> str:
        child = turn.spawn("worker", "w", name="w")
        seen.append(turn.wait(child.id, timeout=5))
        gate.release()
        seen.append(turn.wait("w", timeout=5))  # a relative reference resolves below
        return "ok"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=worker)]
    )
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "ok"
    first, second = seen
    assert isinstance(first, Message)
    assert (first.kind, first.content, first.sender) == ("message", "progress 1", "/root/a/w")
    assert first.recipient == "/root/a"
    assert isinstance(second, Completion)
    assert (second.status, second.output, second.path) == ("completed", "final", "/root/a/w")
    # Both were received by the waits: no wake turn hands them over again.
    info = rt.get(a.id)
    assert (info.generation, info.state) == (1, AgentState.COMPLETED)


def test_turn_wait_and_run_timeouts_leave_children_running(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    outcome: dict[str, object] = {}
    turns: list[Turn] = []

    def lead(turn: Turn) -> str:
        turns.append(turn)
        if turn.messages:
            return "woken with " + ",".join(sorted(m.content for m in turn.messages))
        child = turn.spawn("worker", "w", name="w")
        try:
            turn.wait(child.id, timeout=0.05)
        except WaitTimeout as exc:
            outcome["wait"] = isinstance(exc, TimeoutError)
        try:
            turn.run("worker", "r", name="r", timeout=0.05)
        except WaitTimeout:
            outcome["run"] = True
        outcome["states"] = sorted(str(c.state) for c in turn.children())
        return "timed out"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=gate)]
    )
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "timed out"
    assert outcome == {"wait": True, "run": True, "states": ["running", "running"]}
    assert rt.get("/root/a/w").state is AgentState.RUNNING
    gate.release()
    # The timed-out waits consumed nothing: both completions reach the lead's next turns.
    received: list[str] = []
    while len(received) < 2:
        woken = rt.wait(a.id, timeout=5)
        assert woken.output is not None
        received.extend(woken.output.removeprefix("woken with ").split(","))
    assert sorted(received) == ["released:r", "released:w"]


def test_waits_default_to_wait_default_s(open_runtime: OpenRuntime, gate: Gate) -> None:
    def lead(turn: Turn) -> str:
        child = turn.spawn("worker", "w", name="w")
        try:
            turn.wait(child.id)
        except WaitTimeout:
            return "turn wait timed out"
        return "turn wait returned"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, wake_on_completion=False),
            Profile("worker", runner=gate),
        ],
        wait_default_s=0.05,
    )
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "turn wait timed out"
    with pytest.raises(WaitTimeout):
        rt.wait("/root/a/w")
    assert rt.get("/root/a/w").state is AgentState.RUNNING


def test_a_turn_may_wait_only_on_its_own_children(open_runtime: OpenRuntime) -> None:
    outcome: dict[str, str] = {}

    def mid(turn: Turn) -> str:
        turn.spawn("leaf", "deep", name="c")
        return "mid"

    def lead(turn: Turn) -> str:
        turn.run("mid", "m", name="b", timeout=5)
        for label, ref in (("grandchild", "/root/a/b/c"), ("stranger", "/root/s")):
            try:
                turn.wait(ref, timeout=1)
                outcome[label] = "allowed"
            except (RetinueError, TurnInterrupted) as exc:
                outcome[label] = type(exc).__name__
        return "lead"

    rt = open_runtime(
        [
            Profile("lead", subagents=["mid"], runner=lead, wake_on_completion=False),
            Profile("mid", subagents=["leaf"], runner=mid, wake_on_completion=False),
            Profile("leaf", runner=echo),
        ]
    )
    stranger = rt.spawn("leaf", "s", name="s")
    wait_settled(rt, stranger.id)
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "lead"
    assert outcome == {"grandchild": "NotPermitted", "stranger": "NotPermitted"}


def test_an_interrupted_queued_wake_turn_keeps_its_completions(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    turns: list[Turn] = []

    def lead(turn: Turn) -> str:
        turns.append(turn)
        if turn.task == "go":
            turn.spawn("worker", "c", name="c")
        return "lead " + ",".join(m.content for m in turn.messages)

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=gate)],
        max_active_turns=2,
    )
    p = rt.spawn("lead", "go", name="p").id
    wait_settled(rt, p)
    gate.wait_started(1)  # c holds one slot
    rt.spawn("worker", "b")
    gate.wait_started(2)  # b holds the other
    rt.spawn("worker", "d")  # d queues first
    gate.release("c")  # c settles: its slot goes to d, p's wake turn queues behind it
    wait_until(lambda: rt.get(p).generation == 2)
    assert rt.get(p).state is AgentState.STARTING
    rt.interrupt(p)  # the wake turn never runs ...
    gate.release()
    rt.follow_up(p, "collect")
    wait_settled(rt, p, 3)
    # ... so c's completion was never received and goes to the next turn instead.
    assert [t.task for t in turns] == ["go", "collect"]
    assert [m.kind for m in turns[1].messages] == ["completion"]
    assert turns[1].messages[0].content == "released:c"


def test_a_zero_timeout_wait_returns_a_settled_completion(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "t").id
    wait_settled(rt, a)
    # It has settled, so nothing needs to block: the completion is there to take.
    done = rt.wait(a, timeout=0)
    assert (done.generation, done.output) == (1, "done:t")


def test_a_wake_held_back_by_the_backlog_cap_happens_once_it_drains(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    turns: list[Turn] = []

    def lead(turn: Turn) -> str:
        turns.append(turn)
        if turn.task == "go" and not turn.messages:
            turn.spawn("worker", "c", name="c")
        return "lead " + ",".join(m.content for m in turn.messages)

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=gate)],
        pending_completions_per_agent=1,
    )
    p = rt.spawn("lead", "go", name="p").id
    wait_settled(rt, p)  # p's own completion is unreceived: its backlog is full
    gate.wait_started(1)
    gate.release()
    wait_settled(rt, rt.get("/root/p/c").id)
    # c's completion reached p while a wake would break the cap: it stays pending.
    assert rt.get(p).generation == 1
    assert rt.wait(p, timeout=5).generation == 1  # the host drains p's backlog
    # Nothing is dropped: p now gets the follow-up turn carrying c's completion.
    woken = rt.wait(p, timeout=2)
    assert (woken.generation, woken.output) == (2, "lead released:c")
    assert [m.kind for m in turns[1].messages] == ["completion"]


def test_an_event_taken_by_an_interrupted_wait_stays_for_the_next_turn(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    turns: list[Turn] = []
    outcome: list[str] = []

    def worker(turn: Turn) -> str:
        turn.send(turn.agent.parent_path, "progress")
        gate(turn)
        return "child done"

    def lead(turn: Turn) -> str:
        turns.append(turn)
        if turn.task == "go":
            child = turn.spawn("worker", "c", name="c")
            try:
                turn.wait(child.id, timeout=30)
                outcome.append("returned")
            except (RetinueError, TurnInterrupted) as exc:
                outcome.append(type(exc).__name__)
        return "lead"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, wake_on_completion=False),
            Profile("worker", runner=worker),
        ],
        max_active_turns=1,
    )
    p = rt.spawn("lead", "go", name="p").id
    # The waiting lead gave its only slot to c; c's message answers the wait, but the
    # lead cannot run on until c lets the slot go.
    gate.wait_started(1)
    rt.interrupt(p)
    wait_until(lambda: outcome, what="the lead's wait to end")
    assert outcome == ["TurnInterrupted"]
    gate.release()
    wait_settled(rt, "/root/p/c")
    rt.follow_up(p, "collect")
    wait_settled(rt, p, 2)
    # Neither the message nor the completion was received by the interrupted turn.
    assert [(m.kind, m.content) for m in turns[1].messages] == [
        ("message", "progress"),
        ("completion", "child done"),
    ]


# -- turn waits found by the review ------------------------------------------------------


def test_a_turn_waits_on_one_child_at_a_time(tmp_path: Path) -> None:
    """A second wait of one turn, while its first wait is registered, is refused with AgentBusy.

    Found by the code review (was ``tests/runtime/test_regressions.py``).
    """
    outcome: dict[str, object] = {}
    release = threading.Event()

    def lead(turn: Turn) -> str:
        turn.spawn("worker", "a", name="a")
        turn.spawn("worker", "b", name="b")
        first_waiting = threading.Event()

        def wait_a() -> None:
            first_waiting.set()
            outcome["a"] = turn.wait("a", timeout=10)

        waiter = threading.Thread(target=wait_a)
        waiter.start()
        first_waiting.wait(5)
        deadline = 50
        while deadline and "b" not in outcome:  # until the first wait is registered
            try:
                turn.wait("b", timeout=0.01)
            except AgentBusy as exc:
                outcome["b"] = exc
            except Exception:
                deadline -= 1
        release.set()
        waiter.join(10)
        return "done"

    def worker(turn: Turn) -> str:
        release.wait(10)
        return turn.task

    with Runtime.open(tmp_path / "s", **lead_and_worker(lead, worker)) as rt:
        info = rt.spawn("lead", "t", name="lead")
        assert rt.wait(info.id, timeout=20).output == "done"
    assert isinstance(outcome["b"], AgentBusy)
    assert getattr(outcome["a"], "output", None) == "a"


def test_a_parent_waiting_on_a_closed_child_hears_agent_closed(tmp_path: Path) -> None:
    """A turn waiting on a child that gets closed (nothing more can come) hears AgentClosed.

    Found by the code review (was ``tests/runtime/test_regressions.py``).
    """
    waiting = threading.Event()
    seen: list[BaseException] = []

    def lead(turn: Turn) -> str:
        child = turn.spawn("worker", "quick", name="c")
        turn.wait(child.id, timeout=10)  # its completion
        waiting.set()
        try:
            turn.wait(child.id, timeout=30)  # nothing more will come: it gets closed
        except AgentClosed as exc:
            seen.append(exc)
        return "done"

    def worker(turn: Turn) -> str:
        return "quick"

    with Runtime.open(tmp_path / "s", **lead_and_worker(lead, worker)) as rt:
        info = rt.spawn("lead", "t", name="lead")
        assert waiting.wait(10)
        wait_settled(rt, "/root/lead/c")
        rt.close("/root/lead/c")
        assert rt.wait(info.id, timeout=10).output == "done"
    assert len(seen) == 1
