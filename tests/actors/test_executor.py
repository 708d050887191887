"""Execution: pooled sync runners, the allowance for abandoned runners, and turn timeouts."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import PROMPT_S, EventLog, OpenRuntime, tag, wait_until

from retinue import (
    AgentState,
    CompletionStatus,
    ConfigurationError,
    Limits,
    Profile,
    RunnerAbandoned,
    Runtime,
    Turn,
)
from retinue.actors.turns import AgentActor
from retinue.actors.turns._executor import LoopThread, WorkerPool
from retinue.testing import Gate, echo


@pytest.fixture
def thread_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """Record ``(starting thread's name, new thread's name)`` for every thread started."""
    starts: list[tuple[str, str]] = []
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        starts.append((threading.current_thread().name, self.name))
        original(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    yield starts


def test_the_supervisor_never_starts_a_thread(
    open_runtime: OpenRuntime, thread_starts: list[tuple[str, str]]
) -> None:
    def lead(turn: Turn) -> str:
        results = turn.run_many([("worker", f"w{i}") for i in range(4)], timeout=PROMPT_S)
        return str(len(results))

    async def alead(turn: Turn) -> str:
        done = await turn.run_async("worker", "aw", timeout=PROMPT_S)
        return str(done.output)

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, wake_on_completion=False),
            Profile("alead", subagents=["worker"], runner=alead, wake_on_completion=False),
            Profile("worker", runner=echo, turn_timeout_s=30),
        ]
    )
    for i in range(5):
        assert rt.wait(rt.spawn("lead", f"l{i}").id, timeout=PROMPT_S).output == "4"
        assert rt.wait(rt.spawn("alead", f"a{i}").id, timeout=PROMPT_S).output == "done:aw"
    starters = {starter for starter, _ in thread_starts}
    assert starters  # threads were started, by someone
    assert not [s for s in starters if s.startswith("SupervisorActor")]


def test_sync_runner_threads_are_reused(open_runtime: OpenRuntime) -> None:
    names: list[str] = []

    def runner(turn: Turn) -> str:
        names.append(threading.current_thread().name)
        return "ok"

    rt = open_runtime([Profile("w", runner=runner)])
    for i in range(30):
        rt.wait(rt.spawn("w", f"t{i}").id, timeout=PROMPT_S)
    # One turn at a time: a handful of pooled threads serve all thirty.
    assert len(set(names)) <= 3
    assert all(n.startswith("retinue-runner-") for n in names)


def test_a_pool_retires_idle_workers_and_reuses_busy_ones() -> None:
    pool = WorkerPool(idle_s=0.05)
    try:
        ran: list[str] = []
        done = threading.Event()
        for i in range(5):
            pool.submit(lambda i=i: ran.append(f"job{i}"))  # type: ignore[misc]
        pool.submit(done.set)
        assert done.wait(PROMPT_S)
        wait_until(lambda: len(ran) == 5)
        assert sorted(ran) == [f"job{i}" for i in range(5)]
        wait_until(lambda: pool.threads == 0, what="idle workers to retire")
        again = threading.Event()
        pool.submit(again.set)
        assert again.wait(PROMPT_S)
    finally:
        pool.shutdown(PROMPT_S)
    assert pool.threads == 0


def test_a_job_never_waits_behind_a_blocked_worker() -> None:
    pool = WorkerPool()
    release = threading.Event()
    second = threading.Event()

    def blocked() -> None:
        release.wait(PROMPT_S)

    try:
        pool.submit(blocked)
        pool.submit(second.set)
        assert second.wait(PROMPT_S)  # a new worker took it while the first one blocks
    finally:
        release.set()
        pool.shutdown(PROMPT_S)


def test_abandoned_runners_keep_threads_within_the_allowance(
    open_runtime: OpenRuntime, make_gate: Callable[..., Gate]
) -> None:
    stubborn = make_gate(honour_cancel=False)
    log = EventLog()
    rt = open_runtime([Profile("w", runner=stubborn)], max_active_turns=2, max_abandoned_runners=1)
    rt.subscribe(log)
    a = rt.spawn("w", "a")
    b = rt.spawn("w", "b")
    stubborn.wait_started(2)
    rt.interrupt(a.id)
    rt.interrupt(b.id)
    assert rt.abandoned_runners == 2
    # Two slots are free, but only one thread is left below 2 + 1.
    c = rt.spawn("w", "c")
    d = rt.spawn("w", "d")
    stubborn.wait_started(3)
    assert rt.get(c.id).state is AgentState.RUNNING
    assert rt.get(d.id).state is AgentState.STARTING
    assert sorted(stubborn.tasks()) == ["a", "b", "c"]
    log.wait_for(lambda events: sum(isinstance(e, RunnerAbandoned) for e in events) == 2)
    counts = [e.abandoned for e in log.events if isinstance(e, RunnerAbandoned)]
    assert counts == [1, 2]
    # The first abandoned runner returns: its thread is free, so d starts.
    stubborn.release("a")
    stubborn.wait_started(4)
    wait_until(lambda: rt.abandoned_runners == 1)
    assert rt.get(d.id).state is AgentState.RUNNING
    stubborn.release()
    assert rt.wait(d.id, timeout=PROMPT_S).output == "released:d"
    wait_until(lambda: rt.abandoned_runners == 0)


def test_async_turns_are_not_held_back_by_abandoned_runners(
    open_runtime: OpenRuntime, make_gate: Callable[..., Gate]
) -> None:
    stubborn = make_gate(honour_cancel=False)

    async def quick(turn: Turn) -> str:
        await asyncio.sleep(0)
        return "async ok"

    rt = open_runtime(
        [Profile("w", runner=stubborn), Profile("q", runner=quick)],
        max_active_turns=2,
        max_abandoned_runners=1,
    )
    agents = [rt.spawn("w", f"s{i}") for i in range(2)]
    stubborn.wait_started(2)
    for agent in agents:
        rt.interrupt(agent.id)
    blocked = rt.spawn("w", "blocked")
    x = rt.spawn("w", "x")
    assert rt.get(x.id).state is AgentState.STARTING
    stubborn.wait_started(3)
    rt.interrupt(blocked.id)
    rt.interrupt(x.id)
    assert rt.abandoned_runners == 3
    assert rt.wait(rt.spawn("q", "t").id, timeout=PROMPT_S).output == "async ok"
    stubborn.release()


def test_an_async_turn_queued_behind_a_sync_turn_waiting_for_a_thread_starts(
    open_runtime: OpenRuntime, make_gate: Callable[..., Gate]
) -> None:
    """Each kind is scheduled by its own rule: a sync turn that waits as ``starting``
    for a thread (abandoned runners hold them) holds back no async turn queued after it."""
    stubborn = make_gate(honour_cancel=False)

    async def quick(turn: Turn) -> str:
        await asyncio.sleep(0)
        return "async ok"

    rt = open_runtime(
        [Profile("w", runner=stubborn), Profile("q", runner=quick)],
        max_active_turns=2,
        max_abandoned_runners=1,
    )
    agents = [rt.spawn("w", f"s{i}") for i in range(3)]
    stubborn.wait_started(2)
    rt.interrupt(agents[0].id)
    rt.interrupt(agents[1].id)
    stubborn.wait_started(3)  # the third took the last thread below 2 + 1
    rt.interrupt(agents[2].id)
    assert rt.abandoned_runners == 3  # every thread held: no sync turn may start
    waiting = rt.spawn("w", "waits for a thread")
    assert rt.get(waiting.id).state is AgentState.STARTING
    late = rt.spawn("q", "queued after it")
    assert rt.wait(late.id, timeout=PROMPT_S).output == "async ok"
    assert rt.get(waiting.id).state is AgentState.STARTING  # still first in its own queue
    stubborn.release()
    assert rt.wait(waiting.id, timeout=PROMPT_S).output == "released:waits for a thread"


def test_limits_max_abandoned_runners_is_env_settable() -> None:
    assert Limits().max_abandoned_runners == 8
    limits = Limits.from_env({"RETINUE_MAX_ABANDONED_RUNNERS": "3"})
    assert limits.max_abandoned_runners == 3


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "5"])
def test_profile_turn_timeout_must_be_positive(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="turn_timeout_s"):
        Profile("w", turn_timeout_s=bad)


def test_a_sync_turn_past_its_timeout_fails_and_its_runner_is_abandoned(
    open_runtime: OpenRuntime, make_gate: Callable[..., Gate]
) -> None:
    stubborn = make_gate(honour_cancel=False)
    rt = open_runtime([Profile("w", runner=stubborn, turn_timeout_s=0.05)])
    a = rt.spawn("w", "t")
    (turn,) = stubborn.wait_started(1)
    done = rt.wait(a.id, timeout=PROMPT_S)
    assert (done.status, done.error) == (
        CompletionStatus.FAILED,
        "TurnTimeout: turn exceeded 0.05 s",
    )
    assert turn.cancelled.is_set()
    assert rt.get(a.id).state is AgentState.FAILED
    assert rt.abandoned_runners == 1
    stubborn.release()
    stubborn.join_runner_threads()
    wait_until(lambda: rt.abandoned_runners == 0)
    assert rt.get(a.id).error == "TurnTimeout: turn exceeded 0.05 s"  # the late result is dropped


def test_an_async_turn_past_its_timeout_is_cancelled_and_fails(open_runtime: OpenRuntime) -> None:
    cancelled: list[str] = []

    async def forever(turn: Turn) -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(turn.task)
            raise
        return "never"

    rt = open_runtime([Profile("w", runner=forever, turn_timeout_s=0.05)])
    a = rt.spawn("w", "t")
    done = rt.wait(a.id, timeout=PROMPT_S)
    assert (done.status, done.error) == (
        CompletionStatus.FAILED,
        "TurnTimeout: turn exceeded 0.05 s",
    )
    wait_until(lambda: cancelled == ["t"])
    assert rt.abandoned_runners == 0


def test_a_turn_that_returns_in_time_is_not_timed_out(open_runtime: OpenRuntime) -> None:
    log = EventLog()
    rt = open_runtime([Profile("w", runner=echo, turn_timeout_s=1.0)])
    rt.subscribe(log)
    a = rt.spawn("w", "t")
    assert rt.wait(a.id, timeout=PROMPT_S).output == "done:t"
    # Past the timer of the settled turn, nothing changed: a stale timer is ignored.
    threading.Event().wait(1.3)
    info = rt.get(a.id)
    assert (info.state, info.output, info.error) == (AgentState.COMPLETED, "done:t", None)
    assert [tag(e) for e in log.of(a.id)].count("turn_settled") == 1


def _same(turn: Turn) -> str:
    return turn.task


async def _asame(turn: Turn) -> str:
    return turn.task


@pytest.mark.parametrize("use_async", [False, True])
def test_a_finished_turn_leaves_no_cyclic_garbage(
    open_runtime: OpenRuntime, use_async: bool
) -> None:
    """A turn's actor and its context are freed as the turn ends, not left for the cyclic GC.

    Every turn makes an actor and a turn context (with its watch); were either
    kept in a reference cycle, a busy runtime would make the collector run (and
    pause every thread) once per few dozen turns. With the collector off, none
    may be left.
    """
    rt = open_runtime([Profile("w", runner=_asame if use_async else _same)])

    def actors() -> list[object]:
        # Below the API on purpose: the promise is about what the collector holds.
        return [o for o in gc.get_objects() if isinstance(o, AgentActor | Turn)]

    gc.collect()
    gc.disable()
    try:
        for n in range(20):
            info = rt.spawn("w", f"t{n}")
            assert rt.wait(info.id, timeout=PROMPT_S).output == f"t{n}"
            rt.close(info.id)
        wait_until(lambda: not actors(), what="every turn's actor and context to be freed")
    finally:
        gc.enable()


# -- found by the review -----------------------------------------------------------------


def test_a_failed_actor_start_leaves_the_turns_inputs_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An actor that cannot start fails the turn and leaves its inputs unread for the next turn.

    Found by the code review (was ``tests/runtime/test_regressions.py``).
    """
    seen: list[tuple[str, list[str]]] = []

    def runner(turn: Turn) -> str:
        seen.append((turn.reason, [m.content for m in turn.messages]))
        return "ok"

    with Runtime.open(tmp_path / "s", profiles=[Profile("w", runner=runner)]) as rt:
        a = rt.spawn("w", "t", name="a")
        rt.wait(a.id, timeout=10)
        rt.send(a.id, "IMPORTANT")
        original = AgentActor.start
        failures = [RuntimeError("can't start new thread")]

        def flaky_start(*args: object, **kwargs: object) -> object:
            if failures:
                raise failures.pop()
            return original(*args, **kwargs)

        monkeypatch.setattr(AgentActor, "start", flaky_start)
        rt.follow_up(a.id, "read")
        failed = rt.wait(a.id, timeout=10)
        assert failed.status == "failed" and "cannot start an actor" in (failed.error or "")
        rt.follow_up(a.id, "again")
        rt.wait(a.id, timeout=10)
    assert seen == [("spawn", []), ("follow_up", ["IMPORTANT"])]


def test_a_run_whose_actor_cannot_start_is_answered_with_the_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's wait on the agent it spawned is only registered while its first turn is
    queued or running; a turn that failed as it started answers the run at once."""
    with Runtime.open(tmp_path / "s", profiles=[Profile("w", runner=echo)]) as rt:
        assert rt.run("w", "first", timeout=10).output == "done:first"

        def no_start(*args: object, **kwargs: object) -> object:
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(AgentActor, "start", no_start)
        failed = rt.run("w", "second", timeout=10)
        assert failed.status == "failed" and "cannot start an actor" in (failed.error or "")
        assert failed.generation == 1


def test_a_closed_loop_refuses_every_call_not_only_the_first() -> None:
    """After shutdown, call_soon says False every time: a caller that hears True has a
    call that runs (a turn handed to a closed loop is reported unrun, not forgotten)."""
    loop = LoopThread()
    ran = threading.Event()
    assert loop.call_soon(ran.set)
    assert ran.wait(5)
    loop.shutdown(5)
    assert [loop.call_soon(ran.set) for _ in range(3)] == [False, False, False]


def test_a_call_accepted_before_the_loop_closes_runs() -> None:
    """A call queued while the loop is busy and then stopped still runs as it closes."""
    loop = LoopThread()
    busy, release, ran = threading.Event(), threading.Event(), threading.Event()

    def block() -> None:
        busy.set()
        release.wait(5)

    assert loop.call_soon(block)
    assert busy.wait(5)
    assert loop.call_soon(ran.set)  # queued behind the blocked callback
    closer = threading.Thread(target=loop.shutdown, args=(5,))
    closer.start()
    release.set()
    closer.join(10)
    assert ran.is_set()
    assert loop.call_soon(ran.set) is False


def test_a_task_started_while_the_loop_closes_is_cancelled_not_left_pending() -> None:
    """A turn's start drained while the close awaits the cancelled tasks starts a task
    after the close took its list: that task is cancelled too, so it reports itself."""
    loop = LoopThread()
    late: list[asyncio.Task[None]] = []
    ended: list[bool] = []
    started = threading.Event()

    async def forever() -> None:
        await asyncio.Event().wait()

    def start_late() -> None:
        task = asyncio.get_running_loop().create_task(forever())
        task.add_done_callback(lambda done: ended.append(done.cancelled()))
        late.append(task)

    async def first() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            loop.call_soon(start_late)  # queued as the close awaits this task
            await asyncio.sleep(0.05)  # the drain runs while this task still ends
            raise

    assert loop.call_soon(lambda: asyncio.get_running_loop().create_task(first()))
    assert started.wait(5)
    loop.shutdown(5)
    assert len(late) == 1
    assert ended == [True]
