"""Async runners: turns as tasks on the runtime's one event loop, and the turn's async twins."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from support import PROMPT_S, EventLog, OpenRuntime, tag, wait_settled, wait_until

from retinue import (
    AgentState,
    Completion,
    CompletionStatus,
    Message,
    Profile,
    RetinueError,
    Runtime,
    Turn,
    WaitTimeout,
)
from retinue.actors.turns._control import TurnControl
from retinue.testing import Gate, echo


async def echo_async(turn: Turn) -> str:
    """Return the task (an async runner)."""
    return turn.task


class Hold:
    """Async turns that block on an asyncio event until the test releases them.

    Records which turns started, which were cancelled (their task got
    ``CancelledError``) and on which threads they ran.
    """

    def __init__(self) -> None:
        """Create a closed hold."""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.threads: set[str] = set()

    async def __call__(self, turn: Turn) -> str:
        """Record the turn, await the release, return ``held:<task>``."""
        with self._lock:
            if self._event is None:
                self._loop = asyncio.get_running_loop()
                self._event = asyncio.Event()
            event = self._event
            self.started.append(turn.task)
            self.threads.add(threading.current_thread().name)
        try:
            await event.wait()
        except asyncio.CancelledError:
            with self._lock:
                self.cancelled.append(turn.task)
            raise
        return f"held:{turn.task}"

    def release(self) -> None:
        """Let every held turn return (from any thread)."""
        with self._lock:
            loop, event = self._loop, self._event
        if loop is not None and event is not None:
            loop.call_soon_threadsafe(event.set)


@pytest.fixture
def hold() -> Hold:
    """A fresh :class:`Hold`."""
    return Hold()


def test_an_async_runner_runs_on_the_runtimes_event_loop(open_runtime: OpenRuntime) -> None:
    seen: list[tuple[str, str]] = []

    async def runner(turn: Turn) -> str:
        await asyncio.sleep(0)
        seen.append((threading.current_thread().name, type(turn.profile).__name__))
        return f"async:{turn.task}:{turn.profile.name}"

    rt = open_runtime([Profile("w", runner=runner)])
    a = rt.spawn("w", "t1")
    b = rt.spawn("w", "t2")
    assert rt.wait(a.id, timeout=PROMPT_S).output == "async:t1:w"
    assert rt.wait(b.id, timeout=PROMPT_S).output == "async:t2:w"
    assert {name for name, _ in seen} == {"retinue-loop"}
    assert {kind for _, kind in seen} == {"Profile"}


def test_an_object_with_an_async_call_is_an_async_runner(open_runtime: OpenRuntime) -> None:
    class Runner:
        async def __call__(self, turn: Turn) -> str:
            await asyncio.sleep(0)
            return threading.current_thread().name

    rt = open_runtime([Profile("w", runner=Runner())])
    a = rt.spawn("w", "t")
    assert rt.wait(a.id, timeout=PROMPT_S).output == "retinue-loop"


def test_turn_profile_is_the_agents_profile(open_runtime: OpenRuntime) -> None:
    seen: list[Profile] = []

    def runner(turn: Turn) -> str:
        seen.append(turn.profile)
        return "ok"

    profile = Profile("w", runner=runner, instructions="be brief", turn_timeout_s=30)
    rt = open_runtime([profile])
    rt.wait(rt.spawn("w", "t").id, timeout=PROMPT_S)
    # The runtime's resolved profile (inherited tools filled in), same definition.
    (got,) = seen
    assert (got.name, got.runner, got.instructions, got.turn_timeout_s) == (
        "w",
        runner,
        "be brief",
        30,
    )


def test_async_runner_errors_and_bad_results_fail_the_turn(open_runtime: OpenRuntime) -> None:
    async def boom(turn: Turn) -> str:
        await asyncio.sleep(0)
        raise ValueError("bad input")

    async def number(turn: Turn) -> str:
        return 42  # type: ignore[return-value]

    def forgot_async(turn: Turn) -> str:
        async def inner() -> str:
            return "never"

        return inner()  # type: ignore[return-value]

    rt = open_runtime(
        [
            Profile("boom", runner=boom),
            Profile("number", runner=number),
            Profile("forgot", runner=forgot_async),
        ]
    )
    failed = rt.wait(rt.spawn("boom", "t").id, timeout=PROMPT_S)
    assert (failed.status, failed.error) == (CompletionStatus.FAILED, "ValueError: bad input")
    typed = rt.wait(rt.spawn("number", "t").id, timeout=PROMPT_S)
    assert typed.error == "TypeError: runner returned int, expected str"
    coro = rt.wait(rt.spawn("forgot", "t").id, timeout=PROMPT_S)
    assert coro.status is CompletionStatus.FAILED
    assert "async def" in (coro.error or "")


def test_a_turn_task_cancelled_by_something_else_fails_its_turn(
    open_runtime: OpenRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The task ends cancelled before its runner returns, and not by the turn's interrupt
    # (as when something cancels it before its first step): its done callback reports it.
    # (its runner never runs: the task raises CancelledError as it starts, its turn
    # not cancelled)
    monkeypatch.setattr(TurnControl, "claim_start", lambda self, on_cancel=None: False)
    rt = open_runtime([Profile("agent", runner=echo_async)])
    failed = rt.wait(rt.spawn("agent", "t").id, timeout=PROMPT_S)
    assert failed.status is CompletionStatus.FAILED
    assert failed.error == (
        "CancelledError: the turn's task was cancelled, and not by its interrupt"
    )
    assert rt.get(failed.agent_id).state is AgentState.FAILED


def test_async_twins_drive_a_tree(open_runtime: OpenRuntime) -> None:
    async def lead(turn: Turn) -> str:
        first = await turn.run_async("mid", "one", name="one")
        many = await turn.run_many_async([("leaf", "x"), ("leaf", "y")], timeout=PROMPT_S)
        kids = await turn.children_async()
        outputs = [r.output for r in many if isinstance(r, Completion)]
        for kid in kids:
            await turn.close_async(kid.id)
        return f"{first.output}|{','.join(str(o) for o in outputs)}|{len(kids)}"

    async def mid(turn: Turn) -> str:
        child = await turn.spawn_async("leaf", "deep", name="deep")
        done = await turn.wait_async(child.id, timeout=PROMPT_S)
        assert isinstance(done, Completion)
        await turn.close_tree_async(child.id)
        return f"mid({done.output})"

    async def leaf(turn: Turn) -> str:
        await asyncio.sleep(0)
        return f"leaf:{turn.task}"

    rt = open_runtime(
        [
            Profile("lead", subagents=["mid", "leaf"], runner=lead, wake_on_completion=False),
            Profile("mid", subagents=["leaf"], runner=mid, wake_on_completion=False),
            Profile("leaf", runner=leaf),
        ]
    )
    a = rt.spawn("lead", "go", name="a")
    done = rt.wait(a.id, timeout=PROMPT_S)
    assert (done.status, done.output) == (
        CompletionStatus.COMPLETED,
        "mid(leaf:deep)|leaf:x,leaf:y|3",
    )
    assert [x.path for x in rt.agents()] == ["/root/a"]


def test_async_send_and_wait_see_a_childs_message_first(open_runtime: OpenRuntime) -> None:
    async def lead(turn: Turn) -> str:
        child = await turn.spawn_async("child", "talk", name="c")
        first = await turn.wait_async(child.id, timeout=PROMPT_S)
        second = await turn.wait_async(child.id, timeout=PROMPT_S)
        assert isinstance(first, Message) and isinstance(second, Completion)
        return f"{first.content}/{second.output}"

    async def child(turn: Turn) -> str:
        await turn.send_async("/root/lead", "progress")
        return "finished"

    rt = open_runtime(
        [
            Profile("lead", subagents=["child"], runner=lead, wake_on_completion=False),
            Profile("child", runner=child),
        ]
    )
    a = rt.spawn("lead", "go", name="lead")
    assert rt.wait(a.id, timeout=PROMPT_S).output == "progress/finished"


def test_wait_async_times_out_and_the_child_keeps_running(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    outcome: list[str] = []

    async def lead(turn: Turn) -> str:
        child = await turn.spawn_async("slow", "s", name="s")
        try:
            await turn.wait_async(child.id, timeout=0.05)
        except WaitTimeout as exc:
            outcome.append(type(exc).__name__)
        return "gave up"

    rt = open_runtime(
        [
            Profile("lead", subagents=["slow"], runner=lead, wake_on_completion=False),
            Profile("slow", runner=gate),
        ]
    )
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=PROMPT_S).output == "gave up"
    assert outcome == ["WaitTimeout"]
    assert rt.get("/root/a/s").state is AgentState.RUNNING
    gate.release()


def test_a_zero_timeout_wait_async_returns_a_settled_child(open_runtime: OpenRuntime) -> None:
    async def lead(turn: Turn) -> str:
        child = await turn.spawn_async("leaf", "q", name="q")
        for _ in range(200):
            if not [k for k in await turn.children_async() if k.state is AgentState.RUNNING]:
                break
            await asyncio.sleep(0.01)
        done = await turn.wait_async(child.id, timeout=0)
        assert isinstance(done, Completion)
        return str(done.output)

    rt = open_runtime(
        [
            Profile("lead", subagents=["leaf"], runner=lead, wake_on_completion=False),
            Profile("leaf", runner=echo),
        ]
    )
    a = rt.spawn("lead", "go")
    assert rt.wait(a.id, timeout=PROMPT_S).output == "done:q"


def test_interrupting_an_async_turn_cancels_its_task_at_once(
    open_runtime: OpenRuntime, hold: Hold
) -> None:
    rt = open_runtime([Profile("w", runner=hold)])
    a = rt.spawn("w", "t", name="a")
    wait_until(lambda: hold.started == ["t"], what="the async turn to start")
    info = rt.interrupt(a.id)
    assert info.state is AgentState.INTERRUPTED
    wait_until(lambda: hold.cancelled == ["t"], what="the turn's task to be cancelled")
    done = rt.wait(a.id, timeout=PROMPT_S)
    assert (done.status, done.output) == (CompletionStatus.INTERRUPTED, None)
    # The agent takes a follow-up turn as a new generation, on the same loop.
    hold.release()
    assert rt.follow_up(a.id, "again").generation == 2
    assert rt.wait(a.id, timeout=PROMPT_S).output == "held:again"
    assert rt.abandoned_runners == 0


def test_an_interrupt_abandons_an_in_flight_wait_async(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    reached: list[str] = []

    async def lead(turn: Turn) -> str:
        child = await turn.spawn_async("slow", "s", name="s")
        reached.append("waiting")
        try:
            await turn.wait_async(child.id, timeout=PROMPT_S)
        except asyncio.CancelledError:
            reached.append("cancelled")
            raise
        reached.append("returned")
        return "never"

    rt = open_runtime(
        [
            Profile("lead", subagents=["slow"], runner=lead, wake_on_completion=False),
            Profile("slow", runner=gate),
        ]
    )
    a = rt.spawn("lead", "go", name="a")
    gate.wait_started(1)
    # The child can start before the lead's spawn_async has returned to it (the
    # spawn's answer and the child's start race): interrupt once the lead waits.
    wait_until(lambda: reached == ["waiting"], what="the lead to wait for its child")
    rt.interrupt(a.id)
    wait_until(lambda: reached == ["waiting", "cancelled"], what="the lead's wait to be abandoned")
    assert rt.wait(a.id, timeout=PROMPT_S).status is CompletionStatus.INTERRUPTED
    # The child was not interrupted with its parent; its completion goes to the lead.
    assert rt.get("/root/a/s").state is AgentState.RUNNING
    gate.release()
    wait_settled(rt, "/root/a/s")
    assert reached == ["waiting", "cancelled"]


def test_a_blocking_call_from_an_async_runner_is_refused(open_runtime: OpenRuntime) -> None:
    async def lead(turn: Turn) -> str:
        try:
            turn.spawn("leaf", "x")
        except RetinueError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "spawned"

    rt = open_runtime(
        [Profile("lead", subagents=["leaf"], runner=lead), Profile("leaf", runner=echo)]
    )
    done = rt.wait(rt.spawn("lead", "go").id, timeout=PROMPT_S)
    assert (done.output or "").startswith("BlockingCallInAsyncRunner:")
    assert "spawn_async" not in (done.output or "") and "wait_async" in (done.output or "")
    assert len(rt.agents()) == 1  # nothing was spawned


def test_many_async_turns_share_one_thread(open_runtime: OpenRuntime, hold: Hold) -> None:
    rt = open_runtime([Profile("w", runner=hold)], max_active_turns=200)
    warm = rt.spawn("w", "warm")
    wait_until(lambda: hold.started == ["warm"])
    before = threading.active_count()
    agents = [rt.spawn("w", f"t{i}") for i in range(150)]
    wait_until(lambda: len(hold.started) == 151, what="150 async turns to start")
    assert threading.active_count() <= before + 1
    assert hold.threads == {"retinue-loop"}
    hold.release()
    for agent in [warm, *agents]:
        assert rt.wait(agent.id, timeout=PROMPT_S).status is CompletionStatus.COMPLETED


def test_an_async_parent_is_woken_by_its_childs_completion(open_runtime: OpenRuntime) -> None:
    reasons: list[tuple[str, list[str]]] = []

    async def lead(turn: Turn) -> str:
        reasons.append((turn.reason, [m.content for m in turn.messages]))
        if turn.reason == "spawn":
            await turn.spawn_async("leaf", "x", name="x")
            return "dispatched"
        return "woken"

    rt = open_runtime(
        [Profile("lead", subagents=["leaf"], runner=lead), Profile("leaf", runner=echo)]
    )
    a = rt.spawn("lead", "go")
    assert rt.wait(a.id, timeout=PROMPT_S).output == "dispatched"
    assert rt.wait(a.id, timeout=PROMPT_S).output == "woken"
    assert reasons == [("spawn", []), ("wake", ["done:x"])]


def test_closing_the_runtime_cancels_async_turns_and_stops_the_loop(
    store_path: object, hold: Hold
) -> None:
    before = set(threading.enumerate())
    rt = Runtime.open(store_path, profiles=[Profile("w", runner=hold)])  # type: ignore[arg-type]
    log = EventLog()
    rt.subscribe(log)
    for i in range(3):
        rt.spawn("w", f"t{i}")
    wait_until(lambda: len(hold.started) == 3)
    rt.shutdown()
    assert sorted(hold.cancelled) == ["t0", "t1", "t2"]
    leftover = [t for t in threading.enumerate() if t not in before]
    for thread in leftover:
        thread.join(PROMPT_S / len(leftover))
    assert [t.name for t in leftover if t.is_alive()] == []
    assert "turn_settled" in {tag(e) for e in log.events}


def test_a_cancelled_wait_async_inside_a_turn_frees_the_wait(
    open_runtime: OpenRuntime, make_gate: Callable[..., Gate]
) -> None:
    slow = make_gate()

    async def lead(turn: Turn) -> str:
        child = await turn.spawn_async("slow", "s", name="s")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(turn.wait_async(child.id, timeout=PROMPT_S), 0.05)
        # The cancelled wait was given up, so the turn may wait again.
        slow.release()
        done = await turn.wait_async(child.id, timeout=PROMPT_S)
        assert isinstance(done, Completion)
        return str(done.output)

    rt = open_runtime(
        [
            Profile("lead", subagents=["slow"], runner=lead, wake_on_completion=False),
            Profile("slow", runner=slow),
        ]
    )
    a = rt.spawn("lead", "go")
    assert rt.wait(a.id, timeout=PROMPT_S).output == "released:s"


@pytest.mark.parametrize("kind", [SystemExit, KeyboardInterrupt])
def test_a_sub_task_raising_system_exit_fails_its_turn_and_the_loop_carries_on(
    open_runtime: OpenRuntime, kind: type[BaseException]
) -> None:
    """asyncio re-raises a task's SystemExit/KeyboardInterrupt out of the event loop; the
    runtime's loop must survive it: the turn settles failed and later async turns run."""

    async def sub() -> None:
        await asyncio.sleep(0)
        raise kind("from a sub-task")

    async def lead(turn: Turn) -> str:
        await asyncio.gather(sub())
        return "not reached"

    async def later(turn: Turn) -> str:
        await asyncio.sleep(0)
        return "later ok"

    rt = open_runtime([Profile("lead", runner=lead), Profile("later", runner=later)])
    done = rt.wait(rt.spawn("lead", "x").id, timeout=PROMPT_S)
    assert done.status is CompletionStatus.FAILED
    assert done.error == f"{kind.__name__}: from a sub-task"
    assert rt.wait(rt.spawn("later", "y").id, timeout=PROMPT_S).output == "later ok"
