"""Crash recovery: running and queued agents come back ``interrupted``, and nothing runs by itself.

Two kinds of crashed stores: hand-written records (exact, for edge cases) and
a real runtime in a child process SIGKILLed while its runners are blocked
mid-turn (built once per module, copied for each test).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from retinue import AgentStateError, Limits, Profile, Runtime
from retinue.protocol.messages import AgentState, CompletionStatus

from . import (
    PROMPT_S,
    Child,
    Recorder,
    agent,
    agent_write,
    completion,
    completion_write,
    completions_of,
    message,
    message_write,
    write_store,
)

# Long enough for a wrongly started turn to reach its runner; used only to
# show that something does *not* happen.
QUIET_S = 0.3


def profiles(runner: Recorder) -> list[Profile]:
    """The profiles of every store in this module, all run by ``runner``."""
    return [
        Profile("worker", runner=runner),
        Profile("fast", runner=runner),
        Profile("lead", subagents=("worker", "fast"), runner=runner),
    ]


def open_rt(path: Path, runner: Recorder) -> Runtime:
    """Open a writer runtime on ``path`` with this module's profiles."""
    return Runtime.open(path, profiles=profiles(runner), limits=Limits(wait_default_s=PROMPT_S))


def settle_quietly(rt: Runtime) -> None:
    """Round-trip the supervisor, then give a wrongly queued turn time to start."""
    rt.agents()
    time.sleep(QUIET_S)
    rt.agents()


# -- hand-written crashed stores -------------------------------------------------


def test_running_and_starting_agents_become_interrupted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    running = agent("run", "/root/run", state="running", generation=2, host_received=1)
    starting = agent("start", "/root/start", state="starting", task="queued task")
    idle = agent("idle", "/root/idle")
    write_store(
        store,
        [
            agent_write(running),
            agent_write(starting),
            agent_write(idle),
            completion_write(completion(running, 1, 1, delivered=True)),
            completion_write(completion(idle, 1, 2)),
        ],
    )
    runner = Recorder()
    with open_rt(store, runner) as rt:
        assert rt.diagnostics == []
        states = {a.id: a.state for a in rt.agents()}
        assert states == {"run": "interrupted", "start": "interrupted", "idle": "completed"}
        assert rt.get("run").generation == 2, "restore does not start a new turn"
        got = rt.wait("run", timeout=PROMPT_S)
        assert (got.id, got.generation, got.status) == ("run:2", 2, "interrupted")
        got = rt.wait("start", timeout=PROMPT_S)
        assert (got.id, got.status) == ("start:1", "interrupted")
        settle_quietly(rt)
        assert runner.count() == 0
    for agent_id, generations in {"run": [1, 2], "start": [1], "idle": [1]}.items():
        assert [c.completion.generation for c in completions_of(store, agent_id)] == generations
    # A second reopen finds nothing to interrupt and makes nothing again.
    with open_rt(store, runner) as rt:
        assert rt.diagnostics == []
        assert rt.get("run").state == "interrupted"
    assert len(completions_of(store, "run")) == 2
    assert len(completions_of(store, "start")) == 1
    assert runner.count() == 0


def test_an_interrupted_completion_already_stored_is_not_made_twice(tmp_path: Path) -> None:
    store = tmp_path / "store"
    running = agent("run", "/root/run", state="running")
    stored = completion(running, 1, 1, status="interrupted", output=None, created_at=123.0)
    write_store(store, [agent_write(running), completion_write(stored)])
    runner = Recorder()
    with open_rt(store, runner) as rt:
        assert rt.get("run").state == "interrupted"
        got = rt.wait("run", timeout=PROMPT_S)
        assert (got.id, got.status, got.created_at) == ("run:1", "interrupted", 123.0)
    (only,) = completions_of(store, "run")
    assert only.completion == stored.completion


def test_restore_wakes_nobody_even_for_a_child_interrupted_under_an_idle_parent(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    boss = agent("boss", "/root/boss", profile="lead")
    kid = agent("kid", "/root/boss/kid", "boss", state="running")
    boss2 = agent("boss2", "/root/boss2", profile="lead")
    done_kid = agent("done_kid", "/root/boss2/kid", "boss2")
    write_store(
        store,
        [
            agent_write(boss),
            agent_write(kid),
            agent_write(boss2),
            agent_write(done_kid),
            completion_write(completion(boss, 1, 1, delivered=True)),
            completion_write(completion(boss2, 1, 2, delivered=True)),
            completion_write(completion(done_kid, 1, 3, recipient_id="boss2")),
        ],
    )
    runner = Recorder()
    with open_rt(store, runner) as rt:
        assert rt.get("kid").state == "interrupted"
        settle_quietly(rt)
        states = {a.id: (a.state, a.generation) for a in rt.agents()}
        assert states["boss"] == ("completed", 1), "restore must not queue a turn for boss"
        assert states["boss2"] == ("completed", 1), "restore must not queue a turn for boss2"
        assert runner.count() == 0
        # Asked, each parent's next turn gets its child's completion.
        for parent, kid_completion in (("boss", "kid:1"), ("boss2", "done_kid:1")):
            rt.follow_up(parent, "look")
            rt.wait(parent, timeout=PROMPT_S)
            assert rt.wait(parent, timeout=PROMPT_S).generation == 2
            (turn,) = runner.of(parent)
            assert [m.completion and m.completion.id for m in turn.messages] == [kid_completion]


def test_pending_child_completions_are_delivered_again_exactly_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    boss = agent("boss", "/root/boss", profile="lead")
    pending_kid = agent("kid", "/root/boss/kid", "boss")
    seen_kid = agent("seen", "/root/boss/seen", "boss")
    write_store(
        store,
        [
            agent_write(boss),
            agent_write(pending_kid),
            agent_write(seen_kid),
            completion_write(completion(boss, 1, 1, delivered=True)),
            completion_write(completion(seen_kid, 1, 2, recipient_id="boss", delivered=True)),
            completion_write(completion(pending_kid, 1, 3, recipient_id="boss", output="kid out")),
        ],
    )
    runner = Recorder()
    with open_rt(store, runner) as rt:
        settle_quietly(rt)
        assert runner.count() == 0
        rt.follow_up("boss", "next")
        rt.wait("boss", timeout=PROMPT_S)
        assert rt.wait("boss", timeout=PROMPT_S).generation == 2
        (turn,) = runner.of("boss")
        assert [(m.kind, m.id, m.content) for m in turn.messages] == [
            ("completion", "kid:1", "kid out")
        ]
        assert turn.messages[0].completion is not None
        assert turn.messages[0].completion.status == "completed"
    with open_rt(store, runner) as rt:
        rt.follow_up("boss", "once more")
        assert rt.wait("boss", timeout=PROMPT_S).generation == 3
        turn = runner.of("boss")[-1]
        assert turn.task == "once more"
        assert turn.messages == [], "a delivered completion is not delivered again"


def test_unread_messages_reach_the_next_turn_exactly_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    worker = agent("w", "/root/w", state="running", task="the task")
    write_store(
        store,
        [
            agent_write(worker),
            message_write(message(worker, 1, "read before the crash", read=True)),
            message_write(message(worker, 2, "first unread")),
            message_write(message(worker, 3, "second unread")),
        ],
    )
    runner = Recorder()
    with open_rt(store, runner) as rt:
        rt.resume("w")
        rt.wait("w", timeout=PROMPT_S)
        assert rt.wait("w", timeout=PROMPT_S).generation == 2
        (turn,) = runner.of("w")
        assert [m.content for m in turn.messages] == ["first unread", "second unread"]
    with open_rt(store, runner) as rt:
        rt.follow_up("w", "later")
        assert rt.wait("w", timeout=PROMPT_S).generation == 3
        assert runner.of("w")[-1].messages == []


def test_resume_reruns_the_interrupted_task(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(
        store,
        [
            agent_write(agent("w", "/root/w", state="running", task="the task")),
            agent_write(agent("idle", "/root/idle")),
            completion_write(completion(("idle", "/root/idle"), 1, 1)),
        ],
    )
    runner = Recorder()
    with open_rt(store, runner) as rt:
        info = rt.resume("w")
        assert (info.generation, info.task) == (2, "the task")
        assert info.state in (AgentState.STARTING, AgentState.RUNNING)
        first = rt.wait("w", timeout=PROMPT_S)
        second = rt.wait("w", timeout=PROMPT_S)
        assert (first.generation, first.status) == (1, CompletionStatus.INTERRUPTED)
        assert (second.id, second.status, second.output) == ("w:2", "completed", "done:the task")
        (turn,) = runner.of("w")
        assert (turn.task, turn.reason, turn.generation) == ("the task", "resume", 2)
        with pytest.raises(AgentStateError):
            rt.resume("w")  # completed now, not interrupted
        with pytest.raises(AgentStateError):
            rt.resume("idle")


# -- a real runtime, SIGKILLed mid-turn -----------------------------------------------

CRASH_CHILD = r"""
import sys, threading, time
from retinue import Limits, Profile, Runtime

hold = threading.Event()
say_lock = threading.Lock()

def say(*parts):
    # One whole line per write: runner threads print concurrently.
    with say_lock:
        sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
        sys.stdout.flush()

def blocking(turn):
    say("STARTED", turn.agent.name, turn.agent.id)
    hold.wait()
    return "never"

def fast(turn):
    return "kid done"

def lead(turn):
    if turn.task == "delegate and wait":
        turn.spawn("fast", "kid task", name="kid")
        hold.wait()
        return "never"
    turn.spawn("worker", "slow task", name="slow")
    return "boss2 done"

def until(ref, state):
    while True:
        try:
            info = rt.get(ref)
            if info.state == state:
                return info
        except Exception:
            pass
        time.sleep(0.005)

profiles = [
    Profile("worker", runner=blocking),
    Profile("fast", runner=fast),
    Profile("lead", subagents=("worker", "fast"), runner=lead),
]
rt = Runtime.open(sys.argv[1], profiles=profiles, limits=Limits(max_active_turns=4))
alpha = rt.spawn("worker", "original task", name="alpha")
sent = rt.send(alpha.id, "hello alpha")
say("SENT", sent.id)
boss = rt.spawn("lead", "delegate and wait", name="boss")
kid = until("/root/boss/kid", "completed")
boss2 = rt.spawn("lead", "delegate and finish", name="boss2")
until("/root/boss2", "completed")
slow = until("/root/boss2/slow", "running")
beta = rt.spawn("worker", "beta task", name="beta")
gamma = rt.spawn("worker", "gamma task", name="gamma")
assert gamma.state == "starting", gamma.state
ids = dict(alpha=alpha.id, boss=boss.id, kid=kid.id, boss2=boss2.id, slow=slow.id,
           beta=beta.id, gamma=gamma.id)
say("IDS", *[f"{k}={v}" for k, v in ids.items()])
for ref in ("alpha", "boss", "slow", "beta"):
    assert rt.get(ids[ref]).state == "running", ref
say("READY")
hold.wait()
"""


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A store left by a runtime SIGKILLed mid-turn, and the ids of its agents."""
    store = tmp_path_factory.mktemp("crashed") / "store"
    with Child(CRASH_CHILD, store) as child:
        child.expect("SENT")
        words = child.expect("IDS")
        child.expect("READY")
        child.kill()
    return store, dict(w.split("=") for w in words)


@pytest.fixture
def copy(crashed: tuple[Path, dict[str, str]], tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A private copy of the crashed store."""
    template, agent_ids = crashed
    store = tmp_path / "store"
    shutil.copytree(template, store, ignore=shutil.ignore_patterns("control.sock"))
    return store, agent_ids


def test_crash_busy_agents_come_back_interrupted(copy: tuple[Path, dict[str, str]]) -> None:
    store, _ = copy
    with open_rt(store, Recorder()) as rt:
        assert rt.diagnostics == []
        states = {a.name: a.state for a in rt.agents()}
    assert states == {
        "alpha": "interrupted",
        "boss": "interrupted",
        "kid": "completed",
        "boss2": "completed",
        "slow": "interrupted",
        "beta": "interrupted",
        "gamma": "interrupted",
    }


def test_crash_exactly_one_interrupted_completion_each(copy: tuple[Path, dict[str, str]]) -> None:
    store, agent_ids = copy
    runner = Recorder()
    for _ in range(2):  # reopening again makes nothing twice
        with open_rt(store, runner):
            pass
        for name in ("alpha", "boss", "slow", "beta", "gamma"):
            agent_id = agent_ids[name]
            records = completions_of(store, agent_id)
            assert [(r.completion.id, r.completion.status) for r in records] == [
                (f"{agent_id}:1", "interrupted")
            ], name
        (kid,) = completions_of(store, agent_ids["kid"])
        assert kid.completion.status == "completed"


def test_crash_nothing_runs_until_asked(copy: tuple[Path, dict[str, str]]) -> None:
    store, _ = copy
    runner = Recorder()
    with open_rt(store, runner) as rt:
        settle_quietly(rt)
        busy = [(a.name, a.state) for a in rt.agents() if a.state in ("starting", "running")]
        assert busy == [], "restore queued turns"
        assert runner.count() == 0


def test_crash_host_waits_interrupted_agents(copy: tuple[Path, dict[str, str]]) -> None:
    store, agent_ids = copy
    with open_rt(store, Recorder()) as rt:
        for name in ("alpha", "beta", "gamma", "boss", "slow"):
            got = rt.wait(agent_ids[name], timeout=PROMPT_S)
            assert (got.id, got.status) == (f"{agent_ids[name]}:1", "interrupted"), name


def test_crash_resume_reruns_the_task_with_unread_messages(
    copy: tuple[Path, dict[str, str]],
) -> None:
    store, agent_ids = copy
    alpha = agent_ids["alpha"]
    runner = Recorder()
    with open_rt(store, runner) as rt:
        info = rt.resume(alpha)
        assert (info.generation, info.task) == (2, "original task")
        assert rt.wait(alpha, timeout=PROMPT_S).status == "interrupted"
        done = rt.wait(alpha, timeout=PROMPT_S)
        assert (done.generation, done.output) == (2, "done:original task")
        (turn,) = runner.of(alpha)
        assert (turn.task, turn.reason) == ("original task", "resume")
        assert [m.content for m in turn.messages] == ["hello alpha"]


def test_crash_pending_child_completion_reaches_the_resumed_parent(
    copy: tuple[Path, dict[str, str]],
) -> None:
    store, agent_ids = copy
    boss, kid = agent_ids["boss"], agent_ids["kid"]
    runner = Recorder()
    with open_rt(store, runner) as rt:
        rt.resume(boss)
        rt.wait(boss, timeout=PROMPT_S)
        assert rt.wait(boss, timeout=PROMPT_S).generation == 2
        (turn,) = runner.of(boss)
        got: list[Any] = [(m.kind, m.completion and m.completion.id) for m in turn.messages]
        assert got == [("completion", f"{kid}:1")]
        assert turn.messages[0].content == "kid done"


def test_crash_follow_up_and_interrupted_child_reaches_parent(
    copy: tuple[Path, dict[str, str]],
) -> None:
    store, agent_ids = copy
    gamma, boss2, slow = agent_ids["gamma"], agent_ids["boss2"], agent_ids["slow"]
    runner = Recorder()
    with open_rt(store, runner) as rt:
        info = rt.follow_up(gamma, "new task")
        assert info.generation == 2
        assert rt.wait(gamma, timeout=PROMPT_S).status == "interrupted"
        assert rt.wait(gamma, timeout=PROMPT_S).output == "done:new task"
        assert [t.task for t in runner.of(gamma)] == ["new task"]
        # slow's interrupted completion went to its idle parent boss2; it is
        # handed over with boss2's next turn, which starts only when asked.
        rt.wait(boss2, timeout=PROMPT_S)
        assert rt.follow_up(boss2, "what happened").generation == 2
        assert rt.wait(boss2, timeout=PROMPT_S).generation == 2
        (turn,) = runner.of(boss2)
        assert [m.completion and m.completion.id for m in turn.messages] == [f"{slow}:1"]
