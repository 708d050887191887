"""Runtime defects the state machine's search led to, each pinned by the test that found it.

Each test states the promise it checks; while the runtime breaks it, it is
marked ``xfail(strict=True)``; once fixed the mark goes and the test stays.
"""

from __future__ import annotations

import threading

from conftest import PROMPT_S, OpenRuntime, wait_settled, wait_until

from retinue import AgentState, Completion, Profile, Turn
from retinue.testing import Gate


def test_a_completion_run_many_received_survives_an_interrupt_of_its_next_wait(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    """A batch's first child completes; the parent is interrupted while its batch still waits.

    ``run_many`` raised (``TurnInterrupted``), so the runner never saw the first
    child's completion. Exactly once means some turn of the parent receives it:
    the parent's next turn (a follow-up) must find it in ``turn.messages``.
    (Found when the batch waited on each child in turn and had taken the first.)
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
    wait_until(lambda: rt.get(p.id).state is AgentState.INTERRUPTED)
    rt.follow_up(p.id, "read")
    wait_settled(rt, p.id, generation=2)
    assert seen.count(f"{quick.id}:1") == 1


def test_a_completion_run_many_async_received_survives_an_interrupt_of_its_next_wait(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    """The async twin: the parent's task is cancelled while its batch waits on the second child."""
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
    wait_until(lambda: rt.get(p.id).state is AgentState.INTERRUPTED)
    rt.follow_up(p.id, "read")
    wait_settled(rt, p.id, generation=2)
    assert seen.count(f"{quick.id}:1") == 1
