"""Restart policies: a failed turn runs again after a backoff, within an intensity, exactly once.

Real runtimes on real stores; runners fail on the attempts a test scripts.
Backoffs are tiny so nothing waits long; no assertion is about time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from persistence import agent, agent_write, completions_of, write_store
from support import PROMPT_S, EventLog, OpenRuntime, wait_until

from retinue import (
    AgentState,
    CompletionStatus,
    ConfigurationError,
    Profile,
    Restart,
    Runtime,
    Turn,
    TurnRestarting,
)
from retinue.errors import TokenBudgetExceeded
from retinue.protocol.supervision import LOST_ERROR

FAST = Restart(max_restarts=3, within_s=60, backoff_s=0.01, backoff_max_s=0.05, jitter=0.0)


class Flaky:
    """A runner that fails its first ``fails`` attempts of every task, then answers."""

    def __init__(self, fails: int, error: Callable[[], BaseException] | None = None) -> None:
        self.fails = fails
        self.error = error or (lambda: RuntimeError("boom"))
        self.seen: list[tuple[str, int, str, int]] = []  # task, generation, reason, attempt
        self.lock = threading.Lock()

    def __call__(self, turn: Turn) -> str:
        with self.lock:
            self.seen.append((turn.task, turn.agent.generation, turn.reason, turn.attempt))
        if turn.attempt <= self.fails:
            raise self.error()
        return f"done {turn.task} on attempt {turn.attempt}"


def test_a_task_that_fails_twice_completes_on_attempt_3_with_one_completion(
    open_runtime: OpenRuntime, events: EventLog
) -> None:
    flaky = Flaky(2)

    def lead(turn: Turn) -> str:
        done = turn.run("worker", "the job", timeout=PROMPT_S)
        return f"{done.status}:{done.attempt}:{done.output}"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead),
            Profile("worker", runner=flaky, restart=FAST),
        ]
    )
    rt.subscribe(events)
    top = rt.spawn("lead", "go")
    got = rt.wait(top.id, timeout=PROMPT_S)
    assert got.output == "completed:3:done the job on attempt 3"
    assert [s[1:] for s in flaky.seen] == [(1, "spawn", 1), (2, "restart", 2), (3, "restart", 3)]
    worker = rt.agents()[1]
    assert (worker.state, worker.generation, worker.attempt) == (AgentState.COMPLETED, 3, 3)
    assert worker.last_error == "RuntimeError: boom"
    restarting = [e for e in events.wait_for(lambda es: len(_restarts(es)) == 2)]
    assert [(e.generation, e.attempt, e.error) for e in _restarts(restarting)] == [
        (2, 2, "RuntimeError: boom"),
        (3, 3, "RuntimeError: boom"),
    ]
    rt.wait_idle(PROMPT_S)
    rt.shutdown()
    # One completion for the task: generation 3, attempt 3; generations 1 and 2 made none.
    (only,) = completions_of(rt.path, worker.id)
    assert (only.completion.generation, only.completion.attempt) == (3, 3)
    assert only.completion.status is CompletionStatus.COMPLETED


def _restarts(events: Iterable[object]) -> list[TurnRestarting]:
    return [e for e in events if isinstance(e, TurnRestarting)]


def test_a_runner_that_always_fails_escalates_after_exactly_max_restarts(
    open_runtime: OpenRuntime,
) -> None:
    flaky = Flaky(99)
    policy = Restart(max_restarts=2, within_s=60, backoff_s=0.01, jitter=0.0)
    rt = open_runtime([Profile("worker", runner=flaky, restart=policy)])
    a = rt.spawn("worker", "t")
    got = rt.wait(a.id, timeout=PROMPT_S)
    assert got.status is CompletionStatus.FAILED
    assert (
        got.error == "RestartLimitExceeded: 2 restarts within 60 s; last error: RuntimeError: boom"
    )
    assert (got.generation, got.attempt) == (3, 3)
    assert len(flaky.seen) == 3  # the first run and exactly two restarts
    rt.wait_idle(PROMPT_S)
    assert len(flaky.seen) == 3


def test_no_policy_means_no_restart(open_runtime: OpenRuntime) -> None:
    flaky = Flaky(1)
    rt = open_runtime([Profile("worker", runner=flaky)])
    a = rt.spawn("worker", "t")
    got = rt.wait(a.id, timeout=PROMPT_S)
    assert (got.status, got.error, got.attempt) == ("failed", "RuntimeError: boom", 1)


def test_a_spent_budget_never_restarts(open_runtime: OpenRuntime) -> None:
    flaky = Flaky(99, lambda: TokenBudgetExceeded("tokens_per_tree budget of 1 tokens is spent"))
    rt = open_runtime([Profile("worker", runner=flaky, restart=FAST)])
    got = rt.wait(rt.spawn("worker", "t").id, timeout=PROMPT_S)
    assert got.error is not None and got.error.startswith("TokenBudgetExceeded")
    assert len(flaky.seen) == 1


def test_a_turn_timeout_restarts(open_runtime: OpenRuntime) -> None:
    release = threading.Event()

    def slow_once(turn: Turn) -> str:
        if turn.attempt == 1:
            while not turn.cancelled.is_set():
                release.wait(0.01)
        return f"attempt {turn.attempt}"

    profile = Profile("worker", runner=slow_once, restart=FAST, turn_timeout_s=0.05)
    rt = open_runtime([profile])
    got = rt.wait(rt.spawn("worker", "t").id, timeout=PROMPT_S)
    assert (got.status, got.output, got.attempt) == ("completed", "attempt 2", 2)
    assert rt.get(got.agent_id).last_error == "TurnTimeout: turn exceeded 0.05 s"


SLOW = Restart(max_restarts=3, backoff_s=30.0, backoff_max_s=30.0, jitter=0.0)


def test_a_restarting_agent_is_busy_and_a_host_wait_keeps_waiting(
    open_runtime: OpenRuntime,
) -> None:
    flaky = Flaky(1)
    rt = open_runtime([Profile("worker", runner=flaky, restart=SLOW)])
    a = rt.spawn("worker", "t")
    info = wait_until(lambda: (i := rt.get(a.id)).state is AgentState.RESTARTING and i)
    assert info.state.busy and (info.generation, info.attempt) == (2, 2)
    assert info.restart_due_at is not None and info.restart_due_at > info.updated_at + 29
    with pytest.raises(Exception) as caught:
        rt.wait(a.id, timeout=0.05)
    assert type(caught.value).__name__ == "WaitTimeout"  # not NothingToWaitFor


@pytest.mark.parametrize("how", ["interrupt", "close"])
def test_interrupt_or_close_cancels_a_pending_restart_with_one_completion(
    open_runtime: OpenRuntime, how: str
) -> None:
    flaky = Flaky(1)
    rt = open_runtime([Profile("worker", runner=flaky, restart=SLOW)])
    a = rt.spawn("worker", "t")
    wait_until(lambda: rt.get(a.id).state is AgentState.RESTARTING)
    if how == "interrupt":
        assert rt.interrupt(a.id).state is AgentState.INTERRUPTED
    else:
        assert rt.close(a.id).state is AgentState.CLOSED
    got = rt.wait(a.id, timeout=PROMPT_S) if how == "interrupt" else None
    if got is not None:
        assert (got.status, got.error, got.generation, got.attempt) == (
            "interrupted",
            "interrupted before execution",
            2,
            2,
        )
    rt.wait_idle(PROMPT_S)  # the cancelled restart keeps nothing pending
    assert len(flaky.seen) == 1
    rt.shutdown()
    assert [c.completion.generation for c in completions_of(rt.path, a.id)] == [2]


def test_a_pending_restart_survives_a_close_and_fires_after_the_reopen(
    store_path: Path,
) -> None:
    flaky = Flaky(1)
    policy = Restart(backoff_s=0.3, jitter=0.0)
    profiles = [Profile("worker", runner=flaky, restart=policy)]
    with Runtime.open(store_path, profiles=profiles) as rt:
        a = rt.spawn("worker", "t")
        wait_until(lambda: rt.get(a.id).state is AgentState.RESTARTING)
    with Runtime.open(store_path, profiles=profiles) as rt:
        assert rt.get(a.id).state is AgentState.RESTARTING  # not interrupted by the restore
        got = rt.wait(a.id, timeout=PROMPT_S)
        assert (got.status, got.generation, got.attempt) == ("completed", 2, 2)
    assert [s[2] for s in flaky.seen] == ["spawn", "restart"]
    assert [c.completion.generation for c in completions_of(store_path, a.id)] == [2]


def test_a_read_only_open_shows_a_pending_restart_and_fires_nothing(store_path: Path) -> None:
    flaky = Flaky(1)
    profiles = [Profile("worker", runner=flaky, restart=SLOW)]
    with Runtime.open(store_path, profiles=profiles) as rt:
        a = rt.spawn("worker", "t")
        wait_until(lambda: rt.get(a.id).state is AgentState.RESTARTING)
    with Runtime.open(store_path, readonly=True) as reader:
        info = reader.get(a.id)
        assert (info.state, info.attempt, info.last_error) == (
            "restarting",
            2,
            "RuntimeError: boom",
        )
    assert len(flaky.seen) == 1


def test_a_lost_turn_restarts_on_open_parents_first(tmp_path: Path) -> None:
    store = tmp_path / "store"
    boss = agent("boss", "/root/boss", profile="lead", state="running", task="lead task")
    kid = agent("kid", "/root/boss/kid", "boss", state="running", task="kid task")
    write_store(store, [agent_write(boss), agent_write(kid)])
    order: list[str] = []
    lock = threading.Lock()

    def record(turn: Turn) -> str:
        with lock:
            order.append(f"{turn.agent.name}:{turn.reason}:{turn.attempt}")
        return "ok"

    # The backoff outlasts the reads below by far, even on a loaded machine: at 0.05 s
    # both restarts (and the boss's next turn) had run before the first read.
    lost = Restart(on=("failed", "lost"), backoff_s=2.0, jitter=0.2)
    profiles = [
        Profile("lead", subagents=["worker"], runner=record, restart=lost),
        Profile("worker", runner=record, restart=lost),
    ]
    with Runtime.open(store, profiles=profiles) as rt:
        for ref in ("boss", "kid"):
            info = rt.get(ref)
            assert (info.state, info.generation, info.attempt) == ("restarting", 2, 2)
            assert info.last_error == LOST_ERROR
        got = rt.wait("kid", timeout=PROMPT_S)
        assert (got.status, got.generation) == ("completed", 2)
        rt.wait_idle(PROMPT_S)
    assert order[:2] == ["boss:restart:2", "kid:restart:2"]


def test_a_lost_turn_waits_attempt_1s_backoff_and_keeps_its_attempt_count(
    tmp_path: Path,
) -> None:
    """A turn lost on its second attempt restarts after ``backoff_s`` (attempt 1's backoff),
    not the doubled backoff of a second restart; it is counted as attempt 3."""
    store = tmp_path / "store"
    lost_at_2 = agent(
        "w", "/root/w", state="running", generation=2, attempt=2, last_error="RuntimeError: boom"
    )
    write_store(store, [agent_write(lost_at_2)])
    slow = Restart(on=("failed", "lost"), backoff_s=30.0, backoff_max_s=300.0, jitter=0.0)
    with Runtime.open(store, profiles=[Profile("worker", runner=Flaky(0), restart=slow)]) as rt:
        info = rt.get("w")
        assert (info.state, info.generation, info.attempt) == ("restarting", 3, 3)
        assert info.last_error == LOST_ERROR
        assert info.restart_due_at is not None
        assert info.restart_due_at - info.updated_at == pytest.approx(30.0)


def test_without_a_lost_policy_a_lost_turn_is_interrupted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(store, [agent_write(agent("w", "/root/w", state="running"))])
    with Runtime.open(store, profiles=[Profile("worker", runner=Flaky(0), restart=FAST)]) as rt:
        assert rt.get("w").state is AgentState.INTERRUPTED


def test_a_new_task_starts_at_attempt_1(open_runtime: OpenRuntime) -> None:
    flaky = Flaky(1)
    rt = open_runtime([Profile("worker", runner=flaky, restart=FAST)])
    a = rt.spawn("worker", "t")
    assert rt.wait(a.id, timeout=PROMPT_S).attempt == 2
    rt.follow_up(a.id, "again")
    got = rt.wait(a.id, timeout=PROMPT_S)
    assert (got.attempt, got.generation) == (2, 4)  # attempt 1 of "again" failed too
    assert [s[3] for s in flaky.seen] == [1, 2, 1, 2]


@pytest.mark.parametrize(
    "bad",
    [
        {"max_restarts": -1},
        {"within_s": 0},
        {"backoff_s": -1},
        {"backoff_s": 2, "backoff_max_s": 1},
        {"jitter": 1.5},
        {"on": ()},
        {"on": ("crashed",)},
        {"on": "failed"},
    ],
)
def test_a_bad_policy_is_a_configuration_error(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match="Restart"):
        Restart(**bad)  # type: ignore[arg-type]


def test_a_profile_restart_must_be_a_restart() -> None:
    with pytest.raises(ConfigurationError, match=r"restart must be a retinue\.Restart"):
        Profile("p", restart={"max_restarts": 1})  # type: ignore[arg-type]


def test_giving_up_escalates_one_failed_completion_to_the_parent(
    open_runtime: OpenRuntime,
) -> None:
    flaky = Flaky(99)
    policy = Restart(max_restarts=1, backoff_s=0.01, jitter=0.0)
    got: list[object] = []

    def lead(turn: Turn) -> str:
        got.append(turn.run("worker", "the job", timeout=PROMPT_S))
        return "reported"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, wake_on_completion=False),
            Profile("worker", runner=flaky, restart=policy),
        ]
    )
    top = rt.spawn("lead", "go")
    assert rt.wait(top.id, timeout=PROMPT_S).output == "reported"
    rt.wait_idle(PROMPT_S)
    (done,) = got
    assert getattr(done, "status", None) == "failed"
    assert getattr(done, "error", "").startswith("RestartLimitExceeded: 1 restart within 60 s")
    assert rt.backlog().pending_completions == 0, "no second completion waits anywhere"
