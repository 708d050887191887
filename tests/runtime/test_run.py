"""``Runtime.run``: spawn and wait in one supervisor command, with spawn-then-wait's answers.

Commands are counted through the runtime's command timer (``rt._attach_timings``, as
``retinue.metrics`` counts them) and committed transitions through the store's stats.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

import pytest
from support import PROMPT_S, CommandCounter, OpenRuntime, wait_until

from retinue import (
    AgentClosed,
    AgentState,
    CompletionStatus,
    DuplicateAgentPath,
    InvalidArgument,
    NothingToWaitFor,
    Profile,
    Runtime,
    RuntimeClosed,
    StoreReadOnly,
    Turn,
    UnknownAgent,
    UnknownProfile,
    WaitTimeout,
)
from retinue.actors.commands import Run
from retinue.testing import Gate, echo

TICK_S = 0.005


def test_run_returns_the_agents_first_completion(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    done = rt.run("worker", "hello", name="a", timeout=PROMPT_S)
    assert (done.path, done.generation, done.status) == ("/root/a", 1, CompletionStatus.COMPLETED)
    assert done.output == rt.wait(rt.spawn("worker", "hello").id, timeout=PROMPT_S).output
    # The host received it: nothing is left for a wait.
    with pytest.raises(NothingToWaitFor):
        rt.wait("/root/a", timeout=PROMPT_S)
    assert rt.get("/root/a").state is AgentState.COMPLETED


def test_run_is_one_command_fewer_and_commits_as_the_spawn_does(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    rt.wait(rt.spawn("worker", "warm up").id, timeout=PROMPT_S)
    store = rt._store

    def counted(call: str) -> tuple[Counter[str], int]:
        rt.wait_idle(timeout=PROMPT_S)
        sink = CommandCounter()
        detach = rt._attach_timings(sink)
        assert detach is not None
        before = store.stats.transitions
        try:
            if call == "run":
                done = rt.run("worker", "t", timeout=PROMPT_S)
            else:
                done = rt.wait(rt.spawn("worker", "t").id, timeout=PROMPT_S)
            assert done.status is CompletionStatus.COMPLETED
            transitions = store.stats.transitions - before
        finally:
            detach()
        return sink.counted(), transitions

    two, two_transitions = counted("spawn+wait")
    one, one_transitions = counted("run")
    assert (two["Spawn"], two["Wait"], two["Run"]) == (1, 1, 0)
    assert (one["Spawn"], one["Wait"], one["Run"]) == (0, 0, 1)
    assert sum(one.values()) == sum(two.values()) - 1
    # The run commits its spawn and the settle, no more. The two calls commit those two,
    # and a third when the turn settled before the Wait arrived (the Wait then takes the
    # completion itself); a Wait that only registers its waiter commits nothing.
    assert one_transitions == 2
    assert two_transitions in (2, 3)


def test_a_refused_run_spawns_nothing(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    with pytest.raises(UnknownProfile):
        rt.run("nobody", "t", timeout=PROMPT_S)
    with pytest.raises(InvalidArgument):
        rt.run("worker", "   ", timeout=PROMPT_S)
    with pytest.raises(InvalidArgument):  # a bad timeout: checked before the spawn
        rt.run("worker", "t", name="late", timeout=-1)
    assert rt.agents(include_closed=True) == []
    rt.run("worker", "t", name="a", timeout=PROMPT_S)
    with pytest.raises(DuplicateAgentPath):
        rt.run("worker", "t", name="a", timeout=PROMPT_S)
    assert [a.path for a in rt.agents(include_closed=True)] == ["/root/a"]


def test_a_bad_lease_spawns_nothing(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    first = rt.run("worker", "t", name="a", timeout=PROMPT_S, lease="L")
    # The lease holds a completion of /root/a: a run that would spawn /root/b with it is
    # refused, and /root/b is not spawned.
    with pytest.raises(InvalidArgument, match="lease"):
        rt.run("worker", "t", name="b", timeout=PROMPT_S, lease="L")
    with pytest.raises(InvalidArgument):
        rt.run("worker", "t", name="c", timeout=PROMPT_S, lease="")
    assert [a.path for a in rt.agents(include_closed=True)] == ["/root/a"]
    assert rt.leases() == {"L": first}


def test_a_timed_out_run_names_the_agent_and_a_wait_gets_its_completion(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    with pytest.raises(WaitTimeout) as caught:
        rt.run("worker", "slow", timeout=0.05)
    path = caught.value.path
    assert path is not None and path.startswith("/root/")
    assert rt.get(path).state.busy  # it keeps running
    gate.release()
    done = rt.wait(path, timeout=PROMPT_S)
    assert (done.path, done.output) == (path, "released:slow")


def test_a_timed_out_run_async_names_the_agent(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])

    async def scenario() -> None:
        with pytest.raises(WaitTimeout) as caught:
            await rt.run_async("worker", "slow", name="s", timeout=0.05)
        assert caught.value.path == "/root/s"
        gate.release()
        done = await rt.wait_async("/root/s", timeout=PROMPT_S)
        assert done.output == "released:slow"

    asyncio.run(scenario())


def test_a_cancelled_run_async_gives_the_completion_back(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])

    async def scenario() -> None:
        running = asyncio.create_task(rt.run_async("worker", "t", name="a", timeout=30))
        await asyncio.to_thread(wait_until, lambda: len(gate.turns) == 1, what="the turn")
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        gate.release()
        done = await rt.wait_async("/root/a", timeout=PROMPT_S)
        assert (done.generation, done.output) == (1, "released:t")

    asyncio.run(scenario())


def settled(rt: Runtime, path: str) -> bool:
    """Whether the agent at ``path`` exists and has settled."""
    try:
        return rt.get(path).state is AgentState.COMPLETED
    except UnknownAgent:
        return False


def test_a_run_async_cancelled_after_its_answer_gives_it_back(
    open_runtime: OpenRuntime,
) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])

    async def scenario() -> None:
        running = asyncio.create_task(rt.run_async("worker", "t", name="a", timeout=30))
        # Answered (the completion handed over) before the task resumes: the cancel
        # must give it back.
        await asyncio.to_thread(wait_until, lambda: settled(rt, "/root/a"), what="the settle")
        await asyncio.to_thread(rt.wait_idle, PROMPT_S)
        running.cancel()
        try:
            got = await running
        except asyncio.CancelledError:
            again = await rt.wait_async("/root/a", timeout=PROMPT_S)
            assert (again.generation, again.path) == (1, "/root/a")
        else:  # the task had resumed with its answer before the cancel
            assert (got.generation, got.path) == (1, "/root/a")

    asyncio.run(scenario())


def test_a_retried_run_waits_on_the_agent_the_first_made(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    with pytest.raises(WaitTimeout) as caught:
        rt.run("worker", "t", idempotency_key="k", timeout=0.05)
    gate.release()
    done = rt.run("worker", "t", idempotency_key="k", timeout=PROMPT_S)
    assert done.path == caught.value.path and done.output == "released:t"
    assert len(rt.agents(include_closed=True)) == 1
    # The host has every completion: a third retry answers as a wait would.
    with pytest.raises(NothingToWaitFor):
        rt.run("worker", "t", idempotency_key="k", timeout=PROMPT_S)
    assert len(rt.agents(include_closed=True)) == 1


def test_a_leased_run_is_answered_again_with_its_lease(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    done = rt.run("worker", "t", idempotency_key="k", lease="L", timeout=PROMPT_S)
    assert rt.leases() == {"L": done}
    # The answer was lost: the same run (key and lease) gets the same completion.
    assert rt.run("worker", "t", idempotency_key="k", lease="L", timeout=PROMPT_S) == done
    assert rt.ack_lease("L") is True
    assert rt.leases() == {}
    assert len(rt.agents(include_closed=True)) == 1


def test_a_leased_run_survives_a_reopen(tmp_path: Path) -> None:
    profiles = [Profile("worker", runner=echo)]
    with Runtime.open(tmp_path / "s", profiles=profiles) as rt:
        done = rt.run("worker", "t", idempotency_key="k", lease="L", timeout=PROMPT_S)
    with Runtime.open(tmp_path / "s", profiles=profiles) as rt:
        assert rt.run("worker", "t", idempotency_key="k", lease="L", timeout=PROMPT_S) == done


def test_closing_the_agent_during_a_run_ends_it_as_a_wait(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    answers: list[object] = []

    def run() -> None:
        try:
            answers.append(rt.run("worker", "t", name="a", timeout=PROMPT_S))
        except Exception as exc:  # the test reads it below
            answers.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    wait_until(lambda: len(gate.turns) == 1, what="the turn to start")
    rt.close("/root/a")
    thread.join(PROMPT_S)
    assert len(answers) == 1
    answer = answers[0]
    # As a wait on an agent closed mid-turn: its interrupted completion, or AgentClosed.
    if isinstance(answer, AgentClosed):
        assert answer.path == "/root/a"
    else:
        assert getattr(answer, "status", None) is CompletionStatus.INTERRUPTED, answer


def test_closing_the_runtime_during_a_run_ends_it(tmp_path: Path, gate: Gate) -> None:
    rt = Runtime.open(tmp_path / "s", profiles=[Profile("worker", runner=gate)])
    answers: list[object] = []

    def run() -> None:
        try:
            answers.append(rt.run("worker", "t", name="a", timeout=PROMPT_S))
        except Exception as exc:  # the test reads it below
            answers.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    wait_until(lambda: len(gate.turns) == 1, what="the turn to start")
    rt.shutdown()
    thread.join(PROMPT_S)
    assert len(answers) == 1
    answer = answers[0]
    # As a wait when the runtime closes: the turn's interrupted completion (the close
    # interrupts it first), or RuntimeClosed.
    if not isinstance(answer, RuntimeClosed):
        assert getattr(answer, "status", None) is CompletionStatus.INTERRUPTED, answer
    with pytest.raises(RuntimeClosed):
        rt.run("worker", "t", timeout=PROMPT_S)


def test_a_run_refused_by_a_closing_runtime_spawns_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s"
    profiles = [Profile("worker", runner=echo)]
    rt = Runtime.open(store, profiles=profiles)
    rt.shutdown()
    with pytest.raises(RuntimeClosed):
        rt.run("worker", "t", name="a", timeout=PROMPT_S)
    with Runtime.open(store, profiles=profiles) as again:
        assert again.agents(include_closed=True) == []


def test_a_read_only_runtime_refuses_run(tmp_path: Path) -> None:
    store = tmp_path / "s"
    profiles = [Profile("worker", runner=echo)]
    with Runtime.open(store, profiles=profiles):
        pass
    with Runtime.open(store, profiles=profiles, readonly=True) as reader:
        with pytest.raises(StoreReadOnly):
            reader.run("worker", "t", timeout=PROMPT_S)
        with pytest.raises(StoreReadOnly):
            asyncio.run(reader.run_async("worker", "t", timeout=PROMPT_S))
        assert reader.agents(include_closed=True) == []


def test_a_turn_may_not_send_run(open_runtime: OpenRuntime) -> None:
    seen: list[BaseException] = []

    def sender(turn: Turn) -> str:
        try:
            turn.request(Run(turn._control.ref, "worker", "t"))
        except Exception as exc:  # the test reads it below
            seen.append(exc)
        return "done"

    rt = open_runtime([Profile("lead", runner=sender), Profile("worker", runner=echo)])
    done = rt.run("lead", "t", name="lead", timeout=PROMPT_S)
    assert done.output == "done"
    assert len(seen) == 1 and isinstance(seen[0], InvalidArgument)
    assert [a.path for a in rt.agents(include_closed=True)] == ["/root/lead"]
