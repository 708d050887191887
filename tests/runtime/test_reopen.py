"""The LMDB store: a closed runtime reopens with the same tree; close leaves no thread behind."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from support import PROMPT_S, EventLog, OpenRuntime, Script, act, wait_settled

from retinue import (
    AgentInfo,
    AgentState,
    CompletionStatus,
    DuplicateAgentPath,
    FanoutLimitExceeded,
    NothingToWaitFor,
    Profile,
    Runtime,
    StoreError,
    Turn,
)
from retinue.testing import Gate, echo


def team(script: Script, gate: Gate) -> list[Profile]:
    """A lead that never wakes, a scripted worker and a gated blocker."""
    return [
        Profile("lead", subagents=["worker"], runner=script, wake_on_completion=False),
        Profile("worker", runner=script),
        Profile("blocker", runner=gate),
    ]


def snapshot(info: AgentInfo) -> tuple[object, ...]:
    """Every field of an agent that a reopen must keep."""
    return (
        info.id,
        info.name,
        info.path,
        info.profile,
        info.parent_path,
        info.depth,
        info.state,
        info.generation,
        info.task,
        info.output,
        info.error,
        info.created_at,
    )


def test_reopen_restores_the_tree(
    open_runtime: OpenRuntime, store_path: Path, script: Script, gate: Gate
) -> None:
    def fail(turn: Turn) -> str:
        raise ValueError("nope")

    script.on("fail", fail)
    rt = open_runtime(team(script, gate))
    received = rt.spawn("worker", "r", name="received").id
    rt.wait(received, timeout=5)
    pending = rt.spawn("worker", "p", name="pending").id
    failed = rt.spawn("worker", "fail", name="failed").id
    mailbox = rt.spawn("worker", "m", name="mailbox").id
    lead = rt.spawn("lead", "l", name="lead").id
    child = rt.spawn("worker", "c", name="child", parent=lead).id
    gone = rt.spawn("worker", "g", name="gone").id
    for ref in (pending, failed, mailbox, lead, child, gone):
        wait_settled(rt, ref)
    rt.wait(mailbox, timeout=5)
    rt.wait(gone, timeout=5)
    rt.close(gone)
    blocked = rt.spawn("blocker", "b", name="blocked").id
    gate.wait_started(1)
    rt.interrupt(blocked)
    first = rt.send(mailbox, "u1")
    second = rt.send(mailbox, "u2", dedup_key="d")
    before = sorted(snapshot(a) for a in rt.agents(include_closed=True))
    rt.shutdown()

    rt2 = open_runtime(team(script, gate), path=store_path)
    assert sorted(snapshot(a) for a in rt2.agents(include_closed=True)) == before
    live = {received, pending, failed, mailbox, lead, child, blocked}
    assert {a.id for a in rt2.agents()} == live
    assert rt2.get("/root/lead/child").id == child
    assert rt2.get(gone).state is AgentState.CLOSED

    # Pending host completions are still waitable; received ones are not handed out again.
    done = rt2.wait(pending, timeout=5)
    assert (done.id, done.status, done.output) == (f"{pending}:1", "completed", "ok:p")
    bad = rt2.wait(failed, timeout=5)
    assert (bad.status, bad.error) == (CompletionStatus.FAILED, "ValueError: nope")
    assert rt2.wait(blocked, timeout=5).status is CompletionStatus.INTERRUPTED
    with pytest.raises(NothingToWaitFor):
        rt2.wait(received, timeout=5)
    with pytest.raises(NothingToWaitFor):
        rt2.wait(mailbox, timeout=5)

    # Unread messages survive, in order, and dedup keys still hold.
    assert rt2.send(mailbox, "u2 again", dedup_key="d") == second
    act(rt2, mailbox, "read")
    turn = script.turns_of(mailbox)[-1]
    assert [m.id for m in turn.messages] == [first.id, second.id]
    assert [m.content for m in turn.messages] == ["u1", "u2"]

    # The child's completion is still pending for its (never woken) parent.
    act(rt2, lead, "collect")
    (handed,) = script.turns_of(lead)[-1].messages
    assert handed.kind == "completion" and handed.completion is not None
    assert (handed.completion.agent_id, handed.content) == (child, "ok:c")

    # A closed agent's name is free; live names are still taken.
    assert rt2.spawn("worker", "new", name="gone").id != gone
    with pytest.raises(DuplicateAgentPath):
        rt2.spawn("worker", "dup", name="received")


def test_close_interrupts_running_and_queued_turns_durably(
    open_runtime: OpenRuntime, store_path: Path, gate: Gate
) -> None:
    profiles = [Profile("blocker", runner=gate)]
    rt = open_runtime(profiles, max_active_turns=1)
    running = rt.spawn("blocker", "run", name="running").id
    (turn,) = gate.wait_started(1)
    queued = rt.spawn("blocker", "queue", name="queued").id
    rt.shutdown()
    assert turn.cancelled.is_set()
    assert gate.tasks() == ["run"]

    rt2 = open_runtime(profiles, path=store_path, max_active_turns=1)
    for ref in (running, queued):
        info = rt2.get(ref)
        assert (info.state, info.generation) == (AgentState.INTERRUPTED, 1)
        done = rt2.wait(ref, timeout=5)
        assert (done.generation, done.status) == (1, CompletionStatus.INTERRUPTED)
    gate.release()
    rt2.follow_up(queued, "again")
    assert rt2.wait(queued, timeout=5).output == "released:again"


def test_caps_count_the_restored_tree(open_runtime: OpenRuntime, store_path: Path) -> None:
    profiles = [
        Profile("lead", subagents=["worker"], runner=echo, wake_on_completion=False),
        Profile("worker", runner=echo),
    ]
    rt = open_runtime(profiles, fanout_cap=2, max_agents=4)
    lead = rt.spawn("lead", "l", name="lead").id
    rt.spawn("worker", "a", name="a", parent=lead)
    rt.spawn("worker", "b", name="b", parent=lead)
    rt.shutdown()

    rt2 = open_runtime(profiles, path=store_path, fanout_cap=2, max_agents=4)
    with pytest.raises(FanoutLimitExceeded):
        rt2.spawn("worker", "c", name="c", parent=lead)
    with pytest.raises(DuplicateAgentPath):
        rt2.spawn("lead", "l", name="lead")
    rt2.spawn("lead", "other", name="other")
    from retinue import AgentLimitExceeded

    with pytest.raises(AgentLimitExceeded):
        rt2.spawn("lead", "one too many")


def test_reopen_twice_is_stable(open_runtime: OpenRuntime, store_path: Path) -> None:
    profiles = [Profile("worker", runner=echo)]
    rt = open_runtime(profiles)
    a = rt.spawn("worker", "t", name="a").id
    rt.wait(a, timeout=5)
    rt.shutdown()
    for _ in range(2):
        again = open_runtime(profiles, path=store_path)
        (info,) = again.agents()
        assert (info.id, info.state, info.output) == (a, AgentState.COMPLETED, "done:t")
        with pytest.raises(NothingToWaitFor):
            again.wait(a, timeout=5)
        again.shutdown()


def test_a_second_writer_is_refused(open_runtime: OpenRuntime, store_path: Path) -> None:
    profiles = [Profile("worker", runner=echo)]
    open_runtime(profiles)
    with pytest.raises(StoreError):
        Runtime.open(store_path, profiles=profiles)


def test_a_temporary_store_is_removed_on_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with Runtime.open(None, profiles=[Profile("worker", runner=echo)]) as rt:
        a = rt.spawn("worker", "t")
        assert rt.wait(a.id, timeout=5).output == "done:t"
        assert list(scratch.iterdir()), "the temporary store should live in the temp folder"
    assert list(scratch.iterdir()) == []


def test_close_leaves_no_thread_behind(store_path: Path, gate: Gate) -> None:
    before = set(threading.enumerate())

    def lead(turn: Turn) -> str:
        turn.run("worker", "quick", timeout=5)
        turn.spawn("blocker", "stuck")
        return "lead"

    log = EventLog()
    rt = Runtime.open(
        store_path,
        profiles=[
            Profile("lead", subagents=["worker", "blocker"], runner=lead),
            Profile("worker", runner=echo),
            Profile("blocker", runner=gate),
        ],
    )
    rt.subscribe(log)
    for i in range(3):
        rt.spawn("lead", f"l{i}")
    rt.spawn("blocker", "top")
    gate.wait_started(4)
    assert len(threading.enumerate()) > len(before)
    rt.shutdown()
    assert rt.closed
    assert all(t.cancelled.is_set() for t in gate.turns)

    leftover = [t for t in threading.enumerate() if t not in before]
    for thread in leftover:
        thread.join(PROMPT_S / len(leftover))
    alive = [t.name for t in leftover if t.is_alive()]
    assert alive == []


def test_close_is_bounded_with_a_runner_that_ignores_cancellation(
    store_path: Path, make_gate: Callable[..., Gate]
) -> None:
    before = set(threading.enumerate())
    stubborn = make_gate(honour_cancel=False)
    profiles = [Profile("worker", runner=stubborn)]
    rt = Runtime.open(store_path, profiles=profiles)
    a = rt.spawn("worker", "t").id
    (turn,) = stubborn.wait_started(1)
    rt.shutdown()  # returns after its bounded grace period, the runner still blocked
    assert rt.closed
    assert turn.cancelled.is_set()
    stubborn.release()  # its late result arrives after close and is dropped quietly
    stubborn.join_runner_threads()
    leftover = [t for t in threading.enumerate() if t not in before]
    for thread in leftover:
        thread.join(PROMPT_S / len(leftover))
    assert [t.name for t in leftover if t.is_alive()] == []
    with Runtime.open(store_path, profiles=profiles) as again:
        info = again.get(a)
        assert (info.state, info.output) == (AgentState.INTERRUPTED, None)


READER = """
import json, sys
from retinue import Runtime
rt = Runtime.open(sys.argv[1], readonly=True)
print(json.dumps({a.path: [a.state, a.generation] for a in rt.agents(include_closed=True)}))
rt.shutdown()
"""


def read_from_another_process(path: Path) -> dict[str, list[object]]:
    """Return ``{path: [state, generation]}`` as a separate reader process sees the store."""
    done = subprocess.run(
        [sys.executable, "-c", READER, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, list[object]] = json.loads(done.stdout)
    return result


def test_each_call_is_committed_before_it_returns(
    open_runtime: OpenRuntime, store_path: Path, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    a = rt.spawn("worker", "t", name="a").id
    assert read_from_another_process(store_path)["/root/a"] in (
        ["starting", 1],
        ["running", 1],
    )
    rt.interrupt(a)
    assert read_from_another_process(store_path) == {"/root/a": ["interrupted", 1]}
    rt.close(a)
    assert read_from_another_process(store_path) == {"/root/a": ["closed", 1]}
