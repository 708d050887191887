"""Regressions from the code review: each test pins a behaviour that was once wrong."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from retinue import (
    AgentBusy,
    AgentClosed,
    AgentState,
    Limits,
    Profile,
    Runtime,
    Turn,
)
from retinue.actors.agent import AgentActor


def _workers(lead: object, worker: object, **limits: int | float) -> dict[str, object]:
    return {
        "profiles": [
            Profile("lead", subagents=["worker"], runner=lead),  # type: ignore[arg-type]
            Profile("worker", runner=worker),  # type: ignore[arg-type]
        ],
        "limits": Limits(**limits),
    }


def test_closing_the_runtime_wakes_nobody(tmp_path: Path) -> None:
    """Shutdown's interrupts must not wake an idle parent with a new turn."""
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

    rt = Runtime.open(tmp_path / "s", **_workers(lead, worker))  # type: ignore[arg-type]
    info = rt.spawn("lead", "t", name="lead")
    rt.wait(info.id, timeout=10)
    assert child_started.wait(10)
    rt.shutdown()
    assert reasons == ["spawn"]
    with Runtime.open(tmp_path / "s", **_workers(lead, worker)) as again:  # type: ignore[arg-type]
        states = {a.name: (a.state, a.generation) for a in again.agents()}
    assert states["lead"] == (AgentState.COMPLETED, 1)


def test_a_turn_waits_on_one_child_at_a_time(tmp_path: Path) -> None:
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

    with Runtime.open(tmp_path / "s", **_workers(lead, worker)) as rt:  # type: ignore[arg-type]
        info = rt.spawn("lead", "t", name="lead")
        assert rt.wait(info.id, timeout=20).output == "done"
    assert isinstance(outcome["b"], AgentBusy)
    assert getattr(outcome["a"], "output", None) == "a"


def test_a_parent_waiting_on_a_closed_child_hears_agent_closed(tmp_path: Path) -> None:
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

    with Runtime.open(tmp_path / "s", **_workers(lead, worker)) as rt:  # type: ignore[arg-type]
        info = rt.spawn("lead", "t", name="lead")
        assert waiting.wait(10)
        while rt.get("/root/lead/c").state is not AgentState.COMPLETED:
            pass
        rt.close("/root/lead/c")
        assert rt.wait(info.id, timeout=10).output == "done"
    assert len(seen) == 1


def test_close_tree_does_not_wake_a_parent_it_is_about_to_close(tmp_path: Path) -> None:
    reasons: list[str] = []

    def lead(turn: Turn) -> str:
        reasons.append(turn.reason)
        turn.spawn("worker", "w", name="w")
        return "lead"

    def worker(turn: Turn) -> str:
        turn.cancelled.wait(10)
        return "w"

    with Runtime.open(tmp_path / "s", **_workers(lead, worker)) as rt:  # type: ignore[arg-type]
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


def test_a_retried_send_returns_the_original_even_after_the_recipient_closed(
    tmp_path: Path,
) -> None:
    with Runtime.open(tmp_path / "s", profiles=[Profile("w", runner=lambda t: "ok")]) as rt:
        a = rt.spawn("w", "t", name="a")
        rt.wait(a.id, timeout=10)
        first = rt.send(a.id, "hello", dedup_key="k")
        rt.close(a.id)
        assert rt.send(a.id, "hello", dedup_key="k").id == first.id
        with pytest.raises(AgentClosed):
            rt.send(a.id, "hello", dedup_key="other")


def test_a_failed_actor_start_leaves_the_turns_inputs_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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


def test_a_cancelled_wait_async_gives_a_handed_over_completion_back(tmp_path: Path) -> None:
    """A completion claimed for a wait whose task is then cancelled goes to the next wait."""
    with Runtime.open(tmp_path / "s", profiles=[Profile("w", runner=lambda t: t.task)]) as rt:
        a = rt.spawn("w", "result", name="a")

        async def scenario() -> str:
            # Settled already: the wait is answered at once, and cancelled right after.
            while rt.get(a.id).state is not AgentState.COMPLETED:
                await asyncio.sleep(0.005)
            task = asyncio.create_task(rt.wait_async(a.id, timeout=10))
            for _ in range(200):  # until the supervisor has handed the completion over
                await asyncio.sleep(0)
                if rt.get(a.id).state is AgentState.COMPLETED and task.done():
                    break
                if task.done():
                    break
            task.cancel()
            try:
                got = await task
                return f"first:{got.output}"
            except asyncio.CancelledError:
                again = await rt.wait_async(a.id, timeout=5)
                return f"second:{again.output}"

        outcome = asyncio.run(scenario())
        # Either the first wait returned it, or the cancelled one gave it back.
        assert outcome in ("first:result", "second:result")
