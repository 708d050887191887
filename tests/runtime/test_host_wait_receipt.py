"""What a host wait receives when the host's receipt mark settles what is new.

A host wait receives the agent's oldest completion the host has not received.
When the host received every generation below the current one and gave none
back, only the current one can be new: a wait on a busy agent then only waits
(``HostWaits._register``), and the settle hands the completion to the blocked
wait without asking for the agent's other completions (``HostWaits.take_now``,
``HostWaits.next_for_host``). These tests take the other branches too: an
older completion not received, a generation given back by a released lease,
two waits on one agent, and a lone wait cancelled before the settle.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest
from support import PROMPT_S, CommandCounter, OpenRuntime, wait_settled, wait_until

from retinue import Completion, NothingToWaitFor, Profile, Runtime
from retinue.testing import Gate


def counting(rt: Runtime) -> CommandCounter:
    sink = CommandCounter()
    assert rt._attach_timings(sink) is not None
    return sink


def blocked_wait(
    rt: Runtime,
    sink: CommandCounter,
    pool: concurrent.futures.Executor,
    ref: str,
    **options: object,
) -> concurrent.futures.Future[Completion]:
    """Start ``rt.wait(ref)`` on ``pool``; return once the supervisor served its command
    (the wait is registered: a settle served after it finds it blocked)."""
    served = sink.count("Wait")
    future = pool.submit(rt.wait, ref, timeout=PROMPT_S, **options)  # type: ignore[arg-type]
    wait_until(lambda: sink.count("Wait") > served, what="the wait's command")
    return future


def test_an_older_completion_the_host_has_not_received_comes_first(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("w", runner=gate)])
    sink = counting(rt)
    agent = rt.spawn("w", "one").id
    gate.release("one")
    wait_settled(rt, agent)  # generation 1 is queued for the host, not received
    rt.follow_up(agent, "two")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = rt.wait(agent, timeout=PROMPT_S)  # generation 2 still runs
        assert (first.generation, first.output) == (1, "released:one")
        second = blocked_wait(rt, sink, pool, agent)
        assert not second.done()
        gate.release("two")
        done = second.result(timeout=PROMPT_S)
    assert (done.generation, done.output) == (2, "released:two")
    with pytest.raises(NothingToWaitFor):  # the host received both
        rt.wait(agent, timeout=PROMPT_S)


def test_a_generation_a_released_lease_gave_back_comes_before_the_new_one(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("w", runner=gate)])
    sink = counting(rt)
    gate.release("one")
    gate.release("two")
    agent = rt.run("w", "one", name="a", lease="L1", timeout=PROMPT_S).agent_id
    rt.follow_up(agent, "two")
    assert rt.wait(agent, timeout=PROMPT_S).generation == 2
    assert rt.release_lease("L1")  # the host lost generation 1 (below its mark, 2): back
    rt.follow_up(agent, "three")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        again = rt.wait(agent, timeout=PROMPT_S)
        assert (again.generation, again.output) == (1, "released:one")
        new = blocked_wait(rt, sink, pool, agent)
        assert not new.done()
        gate.release("three")
        done = new.result(timeout=PROMPT_S)
    assert (done.generation, done.output) == (3, "released:three")
    with pytest.raises(NothingToWaitFor):  # the host received all three
        rt.wait(agent, timeout=PROMPT_S)


def test_of_two_waits_blocked_on_one_agent_the_first_takes_the_completion(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("w", runner=gate)])
    sink = counting(rt)
    agent = rt.spawn("w", "one").id
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = blocked_wait(rt, sink, pool, agent)
        second = blocked_wait(rt, sink, pool, agent)
        gate.release()
        done = first.result(timeout=PROMPT_S)
        with pytest.raises(NothingToWaitFor):
            second.result(timeout=PROMPT_S)
    assert (done.generation, done.output) == (1, "released:one")
    with pytest.raises(NothingToWaitFor):
        rt.wait(agent, timeout=PROMPT_S)


def test_a_lone_wait_cancelled_before_the_settle_leaves_the_completion_queued(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("w", runner=gate)])
    sink = counting(rt)
    agent = rt.spawn("w", "one").id

    async def scenario() -> Completion:
        served = sink.count("Wait")
        waiting = asyncio.create_task(rt.wait_async(agent, timeout=PROMPT_S))
        await asyncio.to_thread(wait_until, lambda: sink.count("Wait") > served, what="wait")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        gate.release()
        await asyncio.to_thread(wait_settled, rt, agent)
        return await rt.wait_async(agent, timeout=PROMPT_S)  # the cancelled one took none

    done = asyncio.run(scenario())
    assert (done.generation, done.output) == (1, "released:one")
    with pytest.raises(NothingToWaitFor):
        rt.wait(agent, timeout=PROMPT_S)
