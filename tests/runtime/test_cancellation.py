"""Cancellation is not interruption: only a turn's own interrupt, close or timeout ends it
``interrupted``; a ``CancelledError`` a runner raises otherwise fails it, restartably.

Real runtimes, async runners on the runtime's event loop.
"""

from __future__ import annotations

import asyncio

from support import PROMPT_S, OpenRuntime, wait_settled, wait_until

from retinue import AgentState, CompletionStatus, Profile, Restart, Turn

FAST = Restart(max_restarts=3, within_s=60, backoff_s=0.01, backoff_max_s=0.05, jitter=0.0)


async def cancels_itself(turn: Turn) -> str:
    """Fail the first attempt with a CancelledError nobody asked for (a library's own)."""
    if turn.attempt == 1:
        await asyncio.sleep(0)
        raise asyncio.CancelledError("the client library gave up")
    return f"done on attempt {turn.attempt}"


async def awaits_a_cancelled_task(turn: Turn) -> str:
    """Await a sub-task something cancelled: its CancelledError reaches the runner."""
    inner = asyncio.ensure_future(asyncio.sleep(PROMPT_S))
    inner.cancel()
    await inner
    return "never"


def test_an_async_runner_raising_cancelled_error_fails_its_turn(
    open_runtime: OpenRuntime,
) -> None:
    rt = open_runtime(
        [Profile("w", runner=cancels_itself), Profile("sub", runner=awaits_a_cancelled_task)]
    )
    got = rt.wait(rt.spawn("w", "t").id, timeout=PROMPT_S)
    assert (got.status, got.output) == (CompletionStatus.FAILED, None)
    assert got.error == "CancelledError: the client library gave up"
    sub = rt.wait(rt.spawn("sub", "t").id, timeout=PROMPT_S)
    assert (sub.status, sub.error) == (CompletionStatus.FAILED, "CancelledError")


def test_a_failure_by_cancelled_error_is_restarted(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("w", runner=cancels_itself, restart=FAST)])
    got = rt.wait(rt.spawn("w", "t").id, timeout=PROMPT_S)
    assert (got.status, got.output, got.attempt) == (
        CompletionStatus.COMPLETED,
        "done on attempt 2",
        2,
    )
    assert rt.agents()[0].last_error == "CancelledError: the client library gave up"


def test_the_turns_own_interrupt_still_ends_it_interrupted(open_runtime: OpenRuntime) -> None:
    started: list[str] = []

    async def waits(turn: Turn) -> str:
        started.append(turn.task)
        await asyncio.sleep(PROMPT_S)
        return "never"

    rt = open_runtime([Profile("w", runner=waits, restart=FAST)])
    a = rt.spawn("w", "t")
    wait_until(lambda: started == ["t"], what="the async turn to start")
    assert rt.interrupt(a.id).state is AgentState.INTERRUPTED
    done = rt.wait(a.id, timeout=PROMPT_S)
    assert (done.status, done.error) == (CompletionStatus.INTERRUPTED, "interrupted")
    rt.wait_idle(PROMPT_S)
    assert started == ["t"], "an interrupt is no failure: nothing restarts"


def test_a_sync_runner_raising_cancelled_error_fails_its_turn(open_runtime: OpenRuntime) -> None:
    def sync_cancels(turn: Turn) -> str:
        raise asyncio.CancelledError("cancelled by the client")

    rt = open_runtime([Profile("w", runner=sync_cancels)])
    a = rt.spawn("w", "t")
    info = wait_settled(rt, a.id)
    assert (info.state, info.error) == (
        AgentState.FAILED,
        "CancelledError: cancelled by the client",
    )
