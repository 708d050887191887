"""Interrupting queued and running turns, closing agents and whole subtrees."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from support import PROMPT_S, OpenRuntime, lead_and_worker, wait_settled, wait_until

from retinue import (
    ActiveDescendants,
    AgentClosed,
    AgentState,
    ArgumentTypeError,
    Completion,
    CompletionStatus,
    NothingToWaitFor,
    Profile,
    RetinueError,
    Runtime,
    RuntimeClosed,
    Turn,
    TurnInterrupted,
    Usage,
    WaitTimeout,
)
from retinue.actors.commands import HOST, Agents, LlmStep, TurnRef
from retinue.actors.supervisor._scheduler import settle_of
from retinue.actors.turns import runner_finished
from retinue.testing import Gate, echo


def tree_profiles(leaf: Callable[[Turn], str]) -> list[Profile]:
    """lead -> mid -> leaf; lead and mid echo and never wake."""
    return [
        Profile("lead", subagents=["mid"], runner=echo, wake_on_completion=False),
        Profile("mid", subagents=["leaf"], runner=echo, wake_on_completion=False),
        Profile("leaf", runner=leaf),
    ]


# -- interrupt ---------------------------------------------------------------------------


def test_an_interrupted_queued_turn_never_runs(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)], max_active_turns=1)
    a = rt.spawn("worker", "hold", name="a")
    gate.wait_started(1)
    b = rt.spawn("worker", "queued", name="b")
    assert rt.get(b.id).state is AgentState.STARTING

    info = rt.interrupt(b.id)
    assert (info.state, info.generation) == (AgentState.INTERRUPTED, 1)
    done = rt.wait(b.id, timeout=5)
    assert (done.id, done.status, done.output) == (f"{b.id}:1", CompletionStatus.INTERRUPTED, None)

    gate.release()
    rt.wait(a.id, timeout=5)
    # First come, first served: had b stayed queued, it would run before c.
    c = rt.spawn("worker", "after", name="c")
    rt.wait(c.id, timeout=5)
    assert gate.tasks() == ["hold", "after"]
    assert rt.get(b.id).state is AgentState.INTERRUPTED
    with pytest.raises(NothingToWaitFor):
        rt.wait(b.id, timeout=5)


def test_an_interrupted_running_turn_discards_its_late_result(
    open_runtime: OpenRuntime, make_gate: Callable[..., Gate]
) -> None:
    stubborn = make_gate(honour_cancel=False, output="late")
    rt = open_runtime([Profile("worker", runner=stubborn)])
    a = rt.spawn("worker", "t", name="a")
    (turn,) = stubborn.wait_started(1)

    info = rt.interrupt(a.id)
    # At once, while the runner is still blocked.
    assert (info.state, info.generation, info.output) == (AgentState.INTERRUPTED, 1, None)
    assert turn.cancelled.is_set()
    assert stubborn.finished == []
    done = rt.wait(a.id, timeout=5)
    assert (done.generation, done.status, done.output) == (1, CompletionStatus.INTERRUPTED, None)

    stubborn.release()
    stubborn.join_runner_threads()
    after = rt.get(a.id)
    assert (after.state, after.generation, after.output) == (AgentState.INTERRUPTED, 1, None)
    with pytest.raises(NothingToWaitFor):  # the late result made no second completion
        rt.wait(a.id, timeout=5)

    # The agent takes a follow-up turn as a new generation.
    assert rt.follow_up(a.id, "again").generation == 2
    again = rt.wait(a.id, timeout=5)
    assert (again.generation, again.status, again.output) == (2, "completed", "late:again")


def test_a_parent_running_a_child_receives_its_interrupted_completion(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    def lead(turn: Turn) -> str:
        child = turn.run("worker", "w", name="w", timeout=5)
        return f"{child.status}:{child.output}"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=gate)]
    )
    a = rt.spawn("lead", "go", name="a")
    gate.wait_started(1)
    rt.interrupt("/root/a/w")
    assert rt.wait(a.id, timeout=5).output == "interrupted:None"


def test_an_interrupted_turn_stops_waiting(open_runtime: OpenRuntime, gate: Gate) -> None:
    outcome: list[BaseException] = []
    waiting_ended = threading.Event()

    def lead(turn: Turn) -> str:
        child = turn.spawn("worker", "w", name="w")
        try:
            turn.wait(child.id, timeout=60)
        except BaseException as exc:
            outcome.append(exc)
            raise
        finally:
            waiting_ended.set()
        return "not interrupted"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=gate)]
    )
    a = rt.spawn("lead", "go", name="a")
    gate.wait_started(1)
    rt.interrupt(a.id)
    assert waiting_ended.wait(PROMPT_S), "an interrupted turn kept waiting for its child"
    assert len(outcome) == 1
    assert isinstance(outcome[0], TurnInterrupted)
    assert rt.wait(a.id, timeout=5).status is CompletionStatus.INTERRUPTED
    assert rt.get("/root/a/w").state is AgentState.RUNNING  # the child was not touched


def test_turn_interrupt_and_close_act_on_the_own_subtree_only(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    report: dict[str, object] = {}

    def lead(turn: Turn) -> str:
        child = turn.spawn("worker", "w", name="w")
        gate.wait_started(1)
        report["interrupt"] = turn.interrupt(child.id).state
        report["close"] = turn.close("w").state
        strangers: dict[str, Callable[[], object]] = {
            "close_stranger": lambda: turn.close("/root/stranger"),
            "interrupt_stranger": lambda: turn.interrupt("/root/stranger"),
        }
        for label, call in strangers.items():
            try:
                call()
                report[label] = "allowed"
            except RetinueError as exc:
                report[label] = type(exc).__name__
        return "ok"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, wake_on_completion=False),
            Profile("worker", runner=gate),
            Profile("idle", runner=echo),
        ]
    )
    stranger = rt.spawn("idle", "s", name="stranger")
    wait_settled(rt, stranger.id)
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "ok"
    assert report == {
        "interrupt": AgentState.INTERRUPTED,
        "close": AgentState.CLOSED,
        "close_stranger": "NotPermitted",
        "interrupt_stranger": "NotPermitted",
    }
    assert rt.get(stranger.id).state is AgentState.COMPLETED
    assert gate.turns[0].cancelled.is_set()


# -- close ------------------------------------------------------------------------------


def test_close_refuses_live_children_then_closed_agents_refuse_everything(
    open_runtime: OpenRuntime,
) -> None:
    rt = open_runtime(tree_profiles(echo))
    a = rt.spawn("lead", "go", name="a").id
    b = rt.spawn("mid", "go", name="b", parent=a).id
    wait_settled(rt, a)
    wait_settled(rt, b)
    with pytest.raises(ActiveDescendants) as caught:
        rt.close(a)
    assert str(caught.value)
    assert rt.get(a).state is AgentState.COMPLETED  # refused: nothing changed

    assert rt.close(b).state is AgentState.CLOSED
    closed = rt.close(a)
    assert (closed.id, closed.state) == (a, AgentState.CLOSED)

    refused: dict[str, Callable[[], object]] = {
        "close": lambda: rt.close(a),
        "close_tree": lambda: rt.close_tree(a),
        "send": lambda: rt.send(a, "hi"),
        "follow_up": lambda: rt.follow_up(a, "again"),
        "interrupt": lambda: rt.interrupt(a),
        "spawn under": lambda: rt.spawn("mid", "t", parent=a),
    }
    for name, call in refused.items():
        with pytest.raises(AgentClosed):
            call()
            pytest.fail(f"{name} on a closed agent did not raise")
    assert rt.agents() == []
    assert {i.id for i in rt.agents(include_closed=True)} == {a, b}
    assert rt.get(a).state is AgentState.CLOSED


def test_closing_a_running_agent_interrupts_it_first(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    a = rt.spawn("worker", "t", name="a")
    (turn,) = gate.wait_started(1)
    closed = rt.close(a.id)
    assert closed.state is AgentState.CLOSED
    assert turn.cancelled.is_set()
    done = rt.wait(a.id, timeout=5)  # the interrupted completion still reaches the host
    assert (done.generation, done.status) == (1, CompletionStatus.INTERRUPTED)
    gate.join_runner_threads()
    assert rt.get(a.id).state is AgentState.CLOSED
    assert rt.spawn("worker", "reuse", name="a").id != a.id


def test_close_tree_closes_children_before_parents(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime(tree_profiles(gate))
    a = rt.spawn("lead", "go", name="a").id
    b1 = rt.spawn("mid", "go", name="b1", parent=a).id
    b2 = rt.spawn("mid", "go", name="b2", parent=a).id
    c1 = rt.spawn("leaf", "c1", name="c1", parent=b1).id
    c2 = rt.spawn("leaf", "c2", name="c2", parent=b1).id
    gate.wait_started(2)
    outsider = rt.spawn("lead", "other", name="outsider").id

    closed = rt.close_tree(a)
    assert {i.id for i in closed} == {a, b1, b2, c1, c2}
    assert all(i.state is AgentState.CLOSED for i in closed)
    order = [i.path for i in closed]
    for info in closed:
        if info.parent_path != "/root":
            assert order.index(info.path) < order.index(info.parent_path), order
    assert order[-1] == "/root/a"
    assert all(t.cancelled.is_set() for t in gate.turns)
    for leaf in (c1, c2):
        assert rt.wait(leaf, timeout=5).status is CompletionStatus.INTERRUPTED
    assert [i.id for i in rt.agents()] == [outsider]
    # Every name is free again.
    rt.spawn("lead", "again", name="a")


def test_close_tree_of_a_leaf_closes_just_it(open_runtime: OpenRuntime) -> None:
    rt = open_runtime(tree_profiles(echo))
    a = rt.spawn("lead", "go", name="a").id
    b = rt.spawn("mid", "go", name="b", parent=a).id
    wait_settled(rt, b)
    assert [i.id for i in rt.close_tree(b)] == [b]
    assert rt.get(a).state is not AgentState.CLOSED


def test_close_tree_from_a_turn(open_runtime: OpenRuntime, gate: Gate) -> None:
    outcome: list[list[str]] = []

    def mid(turn: Turn) -> str:
        turn.spawn("leaf", "deep", name="c")
        return "mid"

    def lead(turn: Turn) -> str:
        turn.run("mid", "m", name="b", timeout=5)
        gate.wait_started(1)
        outcome.append([i.path for i in turn.close_tree("b")])
        return f"children left: {len(turn.children())}"

    rt = open_runtime(
        [
            Profile("lead", subagents=["mid"], runner=lead, wake_on_completion=False),
            Profile("mid", subagents=["leaf"], runner=mid, wake_on_completion=False),
            Profile("leaf", runner=gate),
        ]
    )
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "children left: 0"
    assert outcome == [["/root/a/b/c", "/root/a/b"]]


def test_a_closed_agents_completion_is_still_waitable(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "t", name="a").id
    wait_settled(rt, a)
    rt.close(a)
    done: Completion = rt.wait(a, timeout=5)
    assert (done.status, done.output) == ("completed", "done:t")


def test_runtime_context_manager_closes(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt: Runtime = open_runtime([Profile("worker", runner=gate)])
    with rt:
        rt.spawn("worker", "t")
        (turn,) = gate.wait_started(1)
    assert rt.closed
    assert turn.cancelled.is_set()
    with pytest.raises(RuntimeClosed):
        rt.spawn("worker", "after close")
    with pytest.raises(RuntimeClosed):
        rt.get("/root/x")


def test_a_late_result_never_settles_a_newer_turn(
    open_runtime: OpenRuntime, make_gate: Callable[..., Gate]
) -> None:
    stubborn = make_gate(honour_cancel=False, output="late")
    rt = open_runtime([Profile("worker", runner=stubborn)])
    a = rt.spawn("worker", "first", name="a").id
    stubborn.wait_started(1)
    rt.interrupt(a)
    assert rt.follow_up(a, "second").generation == 2
    stubborn.wait_started(2)  # the first runner is still blocked: two runners at once
    stubborn.release("first")
    wait_until(lambda: runner_finished(stubborn.threads[0]), what="the first runner to return")
    info = rt.get(a)
    assert (info.state, info.generation, info.output) == (AgentState.RUNNING, 2, None)
    first = rt.wait(a, timeout=5)
    assert (first.generation, first.status) == (1, CompletionStatus.INTERRUPTED)
    with pytest.raises(WaitTimeout):
        rt.wait(a, timeout=0.05)
    stubborn.release("second")
    second = rt.wait(a, timeout=5)
    assert (second.generation, second.status, second.output) == (2, "completed", "late:second")


def test_an_interrupted_turns_later_calls_are_refused(
    open_runtime: OpenRuntime, make_gate: Callable[..., Gate]
) -> None:
    stubborn = make_gate(honour_cancel=False)
    outcome: list[str] = []

    def lead(turn: Turn) -> str:
        stubborn(turn)
        try:
            turn.spawn("worker", "after interrupt", name="late")
            outcome.append("spawned")
        except (RetinueError, TurnInterrupted) as exc:
            outcome.append(type(exc).__name__)
        return "late"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=echo)]
    )
    a = rt.spawn("lead", "go", name="a")
    stubborn.wait_started(1)
    rt.interrupt(a.id)
    stubborn.release()
    stubborn.join_runner_threads()
    assert outcome == ["TurnInterrupted"]
    assert [x.path for x in rt.agents()] == ["/root/a"]


# -- closing an agent is not closing the runtime ------------------------------------------


def test_close_without_an_agent_is_refused_and_shutdown_closes_the_runtime(
    open_runtime: OpenRuntime,
) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "x", name="a")
    refusals: list[Callable[[], object]] = [lambda: rt.close(None), rt.close]  # type: ignore[arg-type]
    for call in refusals:
        with pytest.raises(ArgumentTypeError, match="shutdown"):
            call()
    assert not rt.closed
    assert rt.wait(a.id, timeout=PROMPT_S).output == "done:x"
    assert rt.close(a.id).state is AgentState.CLOSED
    rt.shutdown()
    assert rt.closed
    rt.shutdown()  # idempotent
    with pytest.raises(RuntimeClosed):
        rt.spawn("worker", "y")


def test_close_async_without_an_agent_is_refused(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    with pytest.raises(ArgumentTypeError, match="shutdown"):
        asyncio.run(rt.close_async(None))  # type: ignore[arg-type]
    assert not rt.closed


# -- found by the review and the state machine -------------------------------------------


def test_closing_the_runtime_wakes_nobody(tmp_path: Path) -> None:
    """Shutdown's interrupts must not wake an idle parent with a new turn.

    Found by the code review (was ``tests/runtime/test_regressions.py``).
    """
    reasons: list[str] = []
    child_started = threading.Event()

    def lead(turn: Turn) -> str:
        reasons.append(turn.reason)
        if turn.reason == "spawn":
            turn.spawn("worker", "w")
        return "lead"

    def worker(turn: Turn) -> str:
        child_started.set()
        turn.cancelled.wait(10)
        return "w"

    rt = Runtime.open(tmp_path / "s", **lead_and_worker(lead, worker))
    info = rt.spawn("lead", "t", name="lead")
    rt.wait(info.id, timeout=10)
    assert child_started.wait(10)
    rt.shutdown()
    assert reasons == ["spawn"]
    with Runtime.open(tmp_path / "s", **lead_and_worker(lead, worker)) as again:
        states = {a.name: (a.state, a.generation) for a in again.agents()}
    assert states["lead"] == (AgentState.COMPLETED, 1)


def test_close_tree_does_not_wake_a_parent_it_is_about_to_close(tmp_path: Path) -> None:
    """close_tree closes a parent without first waking it with its child's completion.

    Found by the code review (was ``tests/runtime/test_regressions.py``).
    """
    reasons: list[str] = []

    def lead(turn: Turn) -> str:
        reasons.append(turn.reason)
        turn.spawn("worker", "w", name="w")
        return "lead"

    def worker(turn: Turn) -> str:
        turn.cancelled.wait(10)
        return "w"

    with Runtime.open(tmp_path / "s", **lead_and_worker(lead, worker)) as rt:
        info = rt.spawn("lead", "t", name="lead")
        rt.wait(info.id, timeout=10)
        closed = rt.close_tree(info.id)
        assert [(c.name, c.state) for c in closed] == [
            ("w", AgentState.CLOSED),
            ("lead", AgentState.CLOSED),
        ]
        with pytest.raises(AgentClosed):
            rt.wait(info.id, timeout=1)  # no spurious second completion of lead
    assert reasons == ["spawn"]


def test_a_completion_run_many_received_survives_an_interrupt_of_its_next_wait(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    """A batch's first child completes; the parent is interrupted while its batch still waits.

    ``run_many`` raised (``TurnInterrupted``), so the runner never saw the first
    child's completion. Exactly once means some turn of the parent receives it:
    the parent's next turn (a follow-up) must find it in ``turn.messages``.
    (Found when the batch waited on each child in turn and had taken the first.)

    Found by the state machine's search (was ``tests/runtime/test_sm_findings.py``).
    """
    seen: list[str] = []
    threads: list[threading.Thread] = []

    def parent(turn: Turn) -> str:
        seen.extend(m.id for m in turn.messages if m.kind == "completion")
        if turn.task == "batch":
            threads.append(threading.current_thread())
            results = turn.run_many([("leaf", "quick"), ("leaf", "hold")], timeout=PROMPT_S)
            seen.extend(r.id for r in results if isinstance(r, Completion))
        return "ok"

    gate.release("quick")
    rt = open_runtime(
        [
            Profile("p", subagents=["leaf"], runner=parent, wake_on_completion=False),
            Profile("leaf", runner=gate),
        ]
    )
    p = rt.spawn("p", "batch", name="p")
    gate.wait_started(2)
    quick = next(t.agent for t in gate.turns if t.task == "quick")
    wait_settled(rt, quick.id)
    wait_until(lambda: threads, what="the parent's runner")
    # The batch's wait was registered with its spawns, in one transition (RunMany):
    # its first child settled, so the parent waits on the second one now.
    rt.interrupt(p.id)
    assert wait_settled(rt, p.id).state is AgentState.INTERRUPTED
    rt.follow_up(p.id, "read")
    wait_settled(rt, p.id, generation=2)
    assert seen.count(f"{quick.id}:1") == 1


def test_a_completion_run_many_async_received_survives_an_interrupt_of_its_next_wait(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    """The async twin: the parent's task is cancelled while its batch waits on the second child.

    Found by the state machine's search (was ``tests/runtime/test_sm_findings.py``).
    """
    seen: list[str] = []

    async def parent(turn: Turn) -> str:
        seen.extend(m.id for m in turn.messages if m.kind == "completion")
        if turn.task == "batch":
            results = await turn.run_many_async(
                [("leaf", "quick"), ("leaf", "hold")], timeout=PROMPT_S
            )
            seen.extend(r.id for r in results if isinstance(r, Completion))
        return "ok"

    gate.release("quick")
    rt = open_runtime(
        [
            Profile("p", subagents=["leaf"], runner=parent, wake_on_completion=False),
            Profile("leaf", runner=gate),
        ]
    )
    p = rt.spawn("p", "batch", name="p")
    gate.wait_started(2)
    quick = next(t.agent for t in gate.turns if t.task == "quick")
    wait_settled(rt, quick.id)
    # As above: the children exist, so the batch's wait is registered.
    rt.interrupt(p.id)
    assert wait_settled(rt, p.id).state is AgentState.INTERRUPTED
    rt.follow_up(p.id, "read")
    wait_settled(rt, p.id, generation=2)
    assert seen.count(f"{quick.id}:1") == 1


def test_a_late_settle_drops_its_last_step_and_changes_nothing(
    open_runtime: OpenRuntime,
) -> None:
    """A settle of a turn that settled already (a stale runner's) carrying a model step:
    the step is not served (no usage added, no transcript stored) and the settle is
    discarded, exactly as its LlmStep would be refused."""
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "t", name="a")
    done = rt.wait(a.id, timeout=5)
    before = rt.get(a.id)
    assert (done.generation, before.state) == (1, AgentState.COMPLETED)
    system = rt._system
    assert system is not None
    step = LlmStep(TurnRef(a.id, 1), Usage(prompt_tokens=7, completion_tokens=3), b"x")
    system.engine.tell(settle_of(a.id, 1, "late", None, None, step))
    system.engine.ask(Agents(HOST))  # served after the settle (one inbox, in order)
    after = rt.get(a.id)
    assert after == before
    assert after.usage == Usage()
    with pytest.raises(NothingToWaitFor):  # the late settle made no second completion
        rt.wait(a.id, timeout=5)
