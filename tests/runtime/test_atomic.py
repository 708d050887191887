"""A supervisor command is one transaction: whole, or not at all.

Faults are injected into the live supervisor (``retinue.testing.faults``) at
every change point of a command in turn: each failing attempt answers the
caller with ``InternalError`` naming the command, leaves the supervisor's
memory exactly as it was (the supervisor compares before and after) and the
store as it was (a read-only runtime beside the writer reads it), and the
same call then succeeds. A command that is the last word on a turn (a settle,
a timeout, a due restart) and fails ends that turn ``failed`` with the
InternalError instead: one completion, and no agent left busy with nothing to
carry it on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from support import PROMPT_S, OpenRuntime

from retinue import (
    AgentState,
    CompletionStatus,
    InternalError,
    NothingToWaitFor,
    Profile,
    Restart,
    Runtime,
    Turn,
)
from retinue.llm import SCRIPTED_MODEL
from retinue.persistence.store import DATABASES
from retinue.testing import Gate, echo
from retinue.testing.faults import disarm, faults_seen, inject_fault

MAX_POINTS = 200  # more changes than any one command here makes


def stored(rt: Runtime) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every record the store holds (committed and synced), read in one read transaction."""
    store = rt._system.store  # type: ignore[union-attr]
    store.flush()
    return store.snapshot(DATABASES).records


def every_point(rt: Runtime, command: str, call: Callable[[], Any]) -> tuple[Any, int]:
    """Fail ``command`` at its first change, then its second, ... until ``call`` succeeds.

    Each failure must answer InternalError naming the command, restore memory
    exactly and leave the store unchanged. Returns what the successful call
    returned and how many changes the command made.
    """
    for at in range(1, MAX_POINTS):
        before = stored(rt)
        seen = len(faults_seen(rt))
        inject_fault(rt, command, at=at)
        try:
            result = call()
        except InternalError as exc:
            assert exc.command == command, exc
            assert "InjectedFault" in exc.cause
            assert faults_seen(rt)[seen:] == [(command, True, ())], "memory was not restored"
            assert stored(rt) == before, f"{command} failed at change {at} but wrote"
            continue
        assert disarm(rt), f"{command} succeeded though a fault at change {at} was armed"
        assert at > 1, f"{command} made no change at all"
        return result, at - 1
    raise AssertionError(f"{command} never succeeded")


def team(gate: Gate) -> list[Profile]:
    def lead(turn: Turn) -> str:
        done = turn.run_many([("worker", "a"), ("worker", "b")], timeout=PROMPT_S)
        return " ".join(d.output or "" for d in done if not isinstance(d, Exception))

    return [
        Profile("lead", runner=lead, subagents=["worker", "held"]),
        Profile("worker", runner=echo),
        Profile("held", runner=gate),
    ]


def test_every_host_command_failing_at_any_change_leaves_store_and_memory_as_before(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime(team(gate), max_active_turns=4)
    held, _ = every_point(rt, "Spawn", lambda: rt.spawn("held", "hold", name="h"))
    every_point(rt, "Send", lambda: rt.send(held.id, "hello", dedup_key="k"))
    every_point(rt, "Interrupt", lambda: rt.interrupt(held.id))
    every_point(rt, "Resume", lambda: rt.resume(held.id))
    gate.wait_started(2)
    every_point(rt, "InterruptTree", lambda: rt.interrupt_tree(held.id))
    every_point(rt, "FollowUp", lambda: rt.follow_up(held.id, "again"))
    gate.release()
    rt.wait_idle(PROMPT_S)
    first, _ = every_point(rt, "Wait", lambda: rt.wait(held.id, lease="lease-1"))
    assert first.generation == 1
    every_point(rt, "ReleaseLease", lambda: rt.release_lease("lease-1"))
    again, _ = every_point(rt, "Wait", lambda: rt.wait(held.id, lease="lease-2"))
    assert again.id == first.id  # given back, received again
    every_point(rt, "AckLease", lambda: rt.ack_lease("lease-2"))
    lead, _ = every_point(rt, "Spawn", lambda: rt.spawn("lead", "go"))
    assert rt.wait(lead.id, timeout=PROMPT_S).output == "done:a done:b"
    # A spawn under a parent: a fault before or after it counts the parent's child.
    every_point(rt, "Spawn", lambda: rt.spawn("worker", "kid", parent=lead.id))
    rt.wait_idle(PROMPT_S)  # the kid's turn writes nothing during the run's attempts
    ran, _ = every_point(rt, "Run", lambda: rt.run("worker", "ran", timeout=PROMPT_S))
    assert (ran.generation, ran.output) == (1, "done:ran")
    every_point(rt, "Close", lambda: rt.close(ran.agent_id))
    every_point(rt, "Close", lambda: rt.close(held.id))
    every_point(rt, "CloseTree", lambda: rt.close_tree(lead.id))
    every_point(rt, "Compact", lambda: rt.compact())
    # held, the lead with its two batches (the kid's completion woke it), the kid, ran.
    assert [a.state for a in rt.agents(include_closed=True)] == [AgentState.CLOSED] * 8


def test_a_refused_spawn_in_a_batch_leaves_nothing_of_itself(
    open_runtime: OpenRuntime,
) -> None:
    """A batch keeps its refused children's places and nothing else of them."""

    def lead(turn: Turn) -> str:
        done = turn.run_many([("worker", "a", "same"), ("worker", "b", "same")], timeout=PROMPT_S)
        return ",".join(type(d).__name__ if isinstance(d, Exception) else "ok" for d in done)

    rt = open_runtime(
        [Profile("lead", runner=lead, subagents=["worker"]), Profile("worker", runner=echo)]
    )
    done = rt.wait(rt.spawn("lead", "go").id, timeout=PROMPT_S)
    assert done.output == "ok,DuplicateAgentPath"
    assert len(rt.agents()) == 2


def test_a_settle_that_cannot_be_applied_fails_the_turn_with_one_completion(
    open_runtime: OpenRuntime,
) -> None:
    """Before, the supervisor kept half the settle and the agent stayed running forever."""
    rt = open_runtime([Profile("worker", runner=echo)])
    inject_fault(rt, "Settle", at=2)
    agent = rt.spawn("worker", "hi")
    done = rt.wait(agent.id, timeout=PROMPT_S)
    assert done.status is CompletionStatus.FAILED
    assert done.error is not None and done.error.startswith("InternalError: ")
    assert "Settle" in done.error
    assert done.error_type == "InternalError"
    assert faults_seen(rt) == [("Settle", True, ((agent.id, 1),))]
    rt.wait_idle(PROMPT_S)  # its runner counts as reported: the runtime is quiet
    with pytest.raises(NothingToWaitFor):
        rt.wait(agent.id, timeout=0)  # exactly one completion
    again = rt.follow_up(agent.id, "once more")  # the agent carries on normally
    assert rt.wait(again.id, timeout=PROMPT_S).status is CompletionStatus.COMPLETED


def test_a_child_settle_that_fails_reaches_the_waiting_parent_as_one_failure(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    def lead(turn: Turn) -> str:
        done = turn.run("worker", "hi", timeout=PROMPT_S)
        return f"{done.status}:{done.error_type}"

    rt = open_runtime(
        [Profile("lead", runner=lead, subagents=["worker"]), Profile("worker", runner=gate)]
    )
    lead_info = rt.spawn("lead", "go")
    gate.wait_started(1)  # the lead waits on its worker, which holds in the gate
    inject_fault(rt, "Settle", at=1)
    gate.release()  # the worker's settle is the next one: it fails
    done = rt.wait(lead_info.id, timeout=PROMPT_S)
    assert (done.status, done.output) == (CompletionStatus.COMPLETED, "failed:InternalError")
    rt.wait_idle(PROMPT_S)
    assert not any(a.state.busy for a in rt.agents())


def test_a_turn_timeout_that_cannot_be_applied_still_ends_the_turn(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("slow", runner=gate, turn_timeout_s=0.05)])
    inject_fault(rt, "ExpireTurn", at=1)
    agent = rt.spawn("slow", "hang")
    done = rt.wait(agent.id, timeout=PROMPT_S)
    assert done.status is CompletionStatus.FAILED
    assert (done.error or "").startswith("InternalError: ")
    rt.wait_idle(PROMPT_S)


def test_a_due_restart_that_cannot_fire_fails_its_task_once(
    open_runtime: OpenRuntime,
) -> None:
    def flaky(turn: Turn) -> str:
        if turn.attempt == 1:
            raise ConnectionError("down")
        return "up"

    rt = open_runtime([Profile("flaky", runner=flaky, restart=Restart(backoff_s=0.01))])
    inject_fault(rt, "FireRestarts", at=1)
    agent = rt.spawn("flaky", "go")
    done = rt.wait(agent.id, timeout=PROMPT_S)
    assert done.status is CompletionStatus.FAILED
    assert (done.error or "").startswith("InternalError: ")
    assert faults_seen(rt) == [("FireRestarts", True, ((agent.id, 2),))]
    rt.wait_idle(PROMPT_S)
    assert rt.get(agent.id).state is AgentState.FAILED


@pytest.mark.parametrize("model", [False, True])
def test_a_settle_handing_its_completion_to_a_blocked_wait_fails_whole_at_any_change(
    open_runtime: OpenRuntime, model: bool
) -> None:
    """A run's settle (the host's wait blocked on it takes the completion in the settle's
    own transition; a model turn's last step is written with the settle's record) that
    fails at any change is undone whole: memory as before, and the rescue's failure
    reaches the blocked wait, stored delivered, once."""
    profile = Profile("m", model=SCRIPTED_MODEL) if model else Profile("m", runner=echo)
    rt = open_runtime([profile])
    fired = 0
    for at in range(1, MAX_POINTS):
        inject_fault(rt, "Settle", at=at)
        done = rt.run("m", "hi", lease=f"lease-{at}", timeout=PROMPT_S)
        if disarm(rt):  # the settle made fewer changes than ``at``: it succeeded
            assert done.status is CompletionStatus.COMPLETED
            break
        fired += 1
        assert done.status is CompletionStatus.FAILED, at
        assert done.error_type == "InternalError" and "Settle" in (done.error or "")
        assert faults_seen(rt)[-1] == ("Settle", True, ((done.agent_id, 1),))
        rt.wait_idle(PROMPT_S)
        with pytest.raises(NothingToWaitFor):
            rt.wait(done.agent_id, timeout=0)  # exactly one completion, received
        assert rt.wait(done.agent_id, lease=f"lease-{at}", timeout=0) == done  # stored
        records = stored(rt)
        assert dict(records["undelivered"]) == {}
    assert fired > 2
