"""The input rule: a turn's inputs are consumed only by a turn that completes.

Python runners on real runtimes: a lead woken with its child's result that
fails, is interrupted, restarted or lost hands that result to its next attempt
or next turn; the completing turn consumes it (received exactly once); a
restarted attempt says what its task's first attempt was for (``turn.origin``).
"""

from __future__ import annotations

import threading
from pathlib import Path

import msgspec
from persistence import agent, agent_write, completion, completion_write, write_store
from support import PROMPT_S, OpenRuntime, wait_settled, wait_until

from retinue import AgentState, Profile, Restart, Runtime, Turn

FAST = Restart(max_restarts=3, within_s=60, backoff_s=0.01, backoff_max_s=0.05, jitter=0.0)


class Lead:
    """A Python lead: its first turn spawns a worker and returns; a later turn summarises
    what it was handed, failing the first ``fails`` attempts of a wake (or holding, with
    ``hold``, until it is interrupted)."""

    def __init__(self, fails: int = 0, *, hold: bool = False) -> None:
        self.fails = fails
        self.hold = hold
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str, int, list[str]]] = []  # reason, origin, attempt, inputs

    def __call__(self, turn: Turn) -> str:
        with self.lock:
            self.seen.append(
                (turn.reason, turn.origin, turn.attempt, [m.content for m in turn.messages])
            )
        if turn.reason == "spawn":
            turn.spawn("worker", "check the change", name="w")
            return "delegated"
        if self.hold and turn.reason == "wake":
            turn.cancelled.wait(PROMPT_S)
            return "held"
        if turn.origin == "wake" and turn.attempt <= self.fails:
            raise RuntimeError("the summary failed")
        return f"summary of {[m.content for m in turn.messages]}"


def team(lead: Lead, restart: Restart | None = None) -> list[Profile]:
    return [
        Profile("lead", subagents=["worker"], runner=lead, restart=restart),
        Profile("worker", runner=lambda turn: "checked"),
    ]


def test_a_woken_lead_that_fails_once_is_restarted_with_its_childs_result(
    open_runtime: OpenRuntime,
) -> None:
    lead = Lead(fails=1)
    rt = open_runtime(team(lead, FAST))
    a = rt.spawn("lead", "review")
    done = wait_settled(rt, a.id, 3)  # 1: delegated, 2: the wake that failed, 3: its restart
    assert (done.state, done.output) == (AgentState.COMPLETED, "summary of ['checked']")
    assert lead.seen[1:] == [("wake", "wake", 1, ["checked"]), ("restart", "wake", 2, ["checked"])]
    rt.wait_idle(PROMPT_S)
    assert rt.inspect(a.id).pending == (), "the completing turn consumed it: received once"
    assert len(lead.seen) == 3


def test_a_failed_turn_gives_its_inputs_to_the_next_turn_and_is_not_woken_by_them(
    open_runtime: OpenRuntime,
) -> None:
    lead = Lead(fails=1)
    rt = open_runtime(team(lead))
    a = rt.spawn("lead", "review", name="lead")
    failed = wait_settled(rt, a.id, 2)
    assert (failed.state, failed.error) == (AgentState.FAILED, "RuntimeError: the summary failed")
    rt.wait_idle(PROMPT_S)
    (back,) = rt.inspect(a.id).pending
    assert (back.path, back.output) == ("/root/lead/w", "checked")
    assert rt.get(a.id).generation == 2, "no wake on what its failed turn gave back"
    again = rt.follow_up(a.id, "summarise now")
    done = wait_settled(rt, a.id, again.generation)
    assert done.output == "summary of ['checked']"
    assert lead.seen[-1] == ("follow_up", "follow_up", 1, ["checked"])
    assert rt.inspect(a.id).pending == ()


def test_an_interrupted_turn_gives_its_inputs_to_the_resumed_turn(
    open_runtime: OpenRuntime,
) -> None:
    lead = Lead(hold=True)
    rt = open_runtime(team(lead))
    a = rt.spawn("lead", "review")
    wait_until(lambda: any(s[0] == "wake" for s in lead.seen), what="the wake turn")
    rt.interrupt(a.id)
    assert [c.output for c in rt.inspect(a.id).pending] == ["checked"]
    again = rt.resume(a.id)
    done = wait_settled(rt, a.id, again.generation)
    assert done.output == "summary of ['checked']"
    assert lead.seen[-1] == ("resume", "resume", 1, ["checked"])


def test_a_restarted_attempt_gets_the_same_inputs_and_what_arrived_meanwhile_in_order(
    open_runtime: OpenRuntime,
) -> None:
    started = threading.Event()
    release = threading.Event()
    seen: list[tuple[int, list[str]]] = []

    def solo(turn: Turn) -> str:
        seen.append((turn.attempt, [m.content for m in turn.messages]))
        if turn.task == "work" and turn.attempt == 1:
            started.set()
            release.wait(PROMPT_S)
            raise RuntimeError("first attempt failed")
        return "ok"

    rt = open_runtime([Profile("solo", runner=solo, restart=FAST)])
    a = rt.spawn("solo", "first")
    wait_settled(rt, a.id, 1)
    rt.send(a.id, "m1")
    rt.send(a.id, "m2")
    rt.follow_up(a.id, "work")
    assert started.wait(PROMPT_S)
    rt.send(a.id, "m3")  # arrives while attempt 1 runs: it is not attempt 1's input
    release.set()
    done = wait_settled(rt, a.id, 3)
    assert (done.state, done.attempt) == (AgentState.COMPLETED, 2)
    assert seen[1:] == [(1, ["m1", "m2"]), (2, ["m1", "m2", "m3"])]
    assert rt.inspect(a.id).unread == ()


def test_what_a_failed_turns_wait_received_goes_to_its_next_attempt(
    open_runtime: OpenRuntime,
) -> None:
    seen: list[tuple[int, list[str]]] = []

    def lead(turn: Turn) -> str:
        seen.append((turn.attempt, [m.content for m in turn.messages]))
        if turn.attempt == 1:
            child = turn.spawn("worker", "check", name="w")
            got = turn.wait(child.id, timeout=PROMPT_S)
            raise RuntimeError(f"failed after receiving {got.output}")  # type: ignore[union-attr]
        return f"summary of {[m.content for m in turn.messages]}"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, restart=FAST),
            Profile("worker", runner=lambda turn: "checked"),
        ]
    )
    a = rt.spawn("lead", "review")
    done = wait_settled(rt, a.id, 2)
    assert (done.output, done.last_error) == (
        "summary of ['checked']",
        "RuntimeError: failed after receiving checked",
    )
    assert seen == [(1, []), (2, ["checked"])]
    rt.wait_idle(PROMPT_S)
    assert rt.inspect(a.id).pending == ()


def test_the_origin_of_a_lost_turn_survives_the_reopen(tmp_path: Path) -> None:
    """A follow-up turn lost in a crash restarts as ``reason="restart"``, ``origin="follow_up"``,
    with the child's result it had received."""
    store = tmp_path / "store"
    lead = agent(
        "lead", "/root/lead", profile="lead", state="running", generation=2, origin="follow_up"
    )
    kid = agent("kid", "/root/lead/kid", "lead", state="completed")
    done = completion(kid, 1, 1, recipient_id="lead", delivered=True, output="checked")
    held = completion_write(msgspec.structs.replace(done, delivered_generation=2))  # gen 2 had it
    write_store(store, [agent_write(lead), agent_write(kid), held])
    got = Lead()
    lost = Restart(on=("failed", "lost"), backoff_s=0.01, jitter=0.0)
    with Runtime.open(store, profiles=team(got, lost)) as rt:
        info = wait_settled(rt, "lead", 3)
        assert info.output == "summary of ['checked']"
    assert got.seen == [("restart", "follow_up", 2, ["checked"])]
