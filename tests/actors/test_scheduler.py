"""Turn slots, fairness, many host threads at once, and virtual actors."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from support import OpenRuntime, Script, act, wait_settled, wait_until

from retinue import (
    AgentInfo,
    AgentState,
    Completion,
    DuplicateAgentPath,
    NothingToWaitFor,
    Profile,
    Turn,
)
from retinue.actors.turns import control_of
from retinue.testing import Gate, echo

HOST_THREADS = 32
IDLE_THREAD_ALLOWANCE = 2


def test_max_active_turns_keeps_the_extra_turn_starting_until_a_slot_frees(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)], max_active_turns=2)
    a, b, c = (rt.spawn("worker", t, name=t) for t in "abc")
    gate.wait_started(2)
    assert gate.tasks() == ["a", "b"]
    assert [rt.get(x.id).state for x in (a, b, c)] == [
        AgentState.RUNNING,
        AgentState.RUNNING,
        AgentState.STARTING,
    ]
    # A refused or idle call does not free a slot; only a settled turn does.
    rt.send(c.id, "still waiting")
    assert rt.get(c.id).state is AgentState.STARTING

    gate.release("a")
    rt.wait(a.id, timeout=5)
    gate.wait_started(3)
    assert gate.tasks() == ["a", "b", "c"]
    assert rt.get(c.id).state is AgentState.RUNNING
    assert rt.get(b.id).state is AgentState.RUNNING
    gate.release()
    assert [rt.wait(x.id, timeout=5).output for x in (b, c)] == ["released:b", "released:c"]


def test_waiting_turns_start_first_come_first_served(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)], max_active_turns=1)
    names = [f"n{i}" for i in range(6)]
    agents = [rt.spawn("worker", n, name=n) for n in names]
    gate.wait_started(1)
    assert all(rt.get(x.id).state is AgentState.STARTING for x in agents[1:])
    gate.release()
    for agent in agents:
        rt.wait(agent.id, timeout=5)
    assert gate.tasks() == names


def test_a_slow_runner_delays_no_other_agent(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("slow", runner=gate), Profile("fast", runner=echo)])
    slow = rt.spawn("slow", "s")
    (slow_turn,) = gate.wait_started(1)
    # The supervisor keeps answering while a runner blocks, so runners are off its thread.
    for i in range(5):
        fast = rt.spawn("fast", f"f{i}")
        assert rt.wait(fast.id, timeout=5).output == f"done:f{i}"
    assert rt.get(slow.id).state is AgentState.RUNNING
    assert gate.threads[0] is not threading.main_thread()
    assert not slow_turn.cancelled.is_set()
    gate.release()
    assert rt.wait(slow.id, timeout=5).output == "released:s"


def test_every_turn_runs_on_its_own_actor_thread(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    for i in range(3):
        rt.spawn("worker", f"t{i}")
    gate.wait_started(3)
    threads = gate.threads
    assert len({t.ident for t in threads}) == 3
    assert threading.main_thread() not in threads
    gate.release()


def test_32_host_threads_spawn_and_wait_concurrently(open_runtime: OpenRuntime) -> None:
    calls: Counter[tuple[str, int]] = Counter()
    lock = threading.Lock()

    def counted(turn: Turn) -> str:
        with lock:
            calls[(turn.agent.id, turn.agent.generation)] += 1
        return f"done:{turn.task}"

    rt = open_runtime([Profile("worker", runner=counted)])
    barrier = threading.Barrier(HOST_THREADS)
    rounds = 3

    def host(i: int) -> list[tuple[AgentInfo, Completion]]:
        barrier.wait()
        out = []
        for r in range(rounds):
            info = rt.spawn("worker", f"t{i}.{r}", name=f"h{i}_{r}")
            ref = info.id if r % 2 == 0 else info.path
            out.append((info, rt.wait(ref, timeout=10)))
        return out

    with ThreadPoolExecutor(HOST_THREADS) as pool:
        results = [pair for chunk in pool.map(host, range(HOST_THREADS)) for pair in chunk]

    assert len(results) == HOST_THREADS * rounds
    for info, done in results:
        i, r = info.name[1:].split("_")
        assert done.agent_id == info.id
        assert (done.generation, done.status, done.output) == (1, "completed", f"done:t{i}.{r}")
    assert len({done.id for _, done in results}) == len(results)
    assert len(calls) == len(results)
    assert set(calls.values()) == {1}  # each turn ran exactly once
    agents = rt.agents()
    assert len(agents) == len(results)
    assert all(a.state is AgentState.COMPLETED for a in agents)


def test_concurrent_spawns_of_one_name_have_exactly_one_winner(
    open_runtime: OpenRuntime,
) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    threads = 16
    for round_ in range(5):
        barrier = threading.Barrier(threads)
        name = f"same_{round_}"

        def attempt(i: int, name: str = name, barrier: threading.Barrier = barrier) -> object:
            barrier.wait()
            try:
                return rt.spawn("worker", f"try {i}", name=name)
            except DuplicateAgentPath as exc:
                return exc

        with ThreadPoolExecutor(threads) as pool:
            outcomes = list(pool.map(attempt, range(threads)))
        winners = [o for o in outcomes if isinstance(o, AgentInfo)]
        assert len(winners) == 1, outcomes
        assert sum(isinstance(o, DuplicateAgentPath) for o in outcomes) == threads - 1
        live = [a for a in rt.agents() if a.name == name]
        assert [a.id for a in live] == [winners[0].id]


def test_concurrent_waiters_never_receive_one_completion_twice(
    open_runtime: OpenRuntime,
) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "t0").id
    wait_settled(rt, a, 1)
    for generation in range(2, 5):
        rt.follow_up(a, f"t{generation - 1}")
        wait_settled(rt, a, generation)
    barrier = threading.Barrier(8)

    def waiter(_: int) -> object:
        barrier.wait()
        try:
            return rt.wait(a, timeout=1.0)
        except NothingToWaitFor as exc:  # the agent is idle: the rest find nothing left
            return exc

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(waiter, range(8)))
    got = sorted(o.generation for o in outcomes if isinstance(o, Completion))
    assert got == [1, 2, 3, 4]
    assert sum(isinstance(o, NothingToWaitFor) for o in outcomes) == 4


def test_concurrent_host_sends_keep_each_senders_order(
    open_runtime: OpenRuntime, script: Script
) -> None:
    rt = open_runtime([Profile("worker", runner=script)])
    a = rt.spawn("worker", "start").id
    wait_settled(rt, a)
    barrier = threading.Barrier(8)

    def sender(i: int) -> None:
        barrier.wait()
        for j in range(10):
            rt.send(a, f"{i}:{j}")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(sender, range(8)))
    act(rt, a, "read")
    seen = [m.content for m in script.turns_of(a)[-1].messages]
    assert len(seen) == 80
    for i in range(8):
        assert [s for s in seen if s.startswith(f"{i}:")] == [f"{i}:{j}" for j in range(10)]
    act(rt, a, "read")
    assert script.turns_of(a)[-1].messages == []


def test_idle_agents_hold_no_threads(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    warm = rt.spawn("worker", "warm-up")
    rt.wait(warm.id, timeout=5)
    baseline = set(threading.enumerate())
    agents = [rt.spawn("worker", f"t{i}") for i in range(200)]
    for agent in agents:
        rt.wait(agent.id, timeout=10)

    def extra_threads() -> list[str]:
        return [t.name for t in threading.enumerate() if t not in baseline]

    # Once their turns are over, 200 idle agents keep no thread each (a runtime may
    # start a helper or two of its own meanwhile).
    wait_until(
        lambda: len(extra_threads()) <= IDLE_THREAD_ALLOWANCE,
        what="idle agents to give their threads back",
    )
    assert len(rt.agents()) == 201


@pytest.mark.parametrize("max_active_turns", [1, 3])
def test_a_parent_waiting_on_children_does_not_starve_them(
    open_runtime: OpenRuntime, max_active_turns: int
) -> None:
    def lead(turn: Turn) -> str:
        results = turn.run_many([("worker", f"w{i}") for i in range(4)], timeout=10)
        return ",".join(str(r.output) for r in results if isinstance(r, Completion))

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=echo)],
        max_active_turns=max_active_turns,
    )
    leads = [rt.spawn("lead", f"l{i}") for i in range(max_active_turns)]
    for lead_info in leads:
        assert rt.wait(lead_info.id, timeout=10).output == "done:w0,done:w1,done:w2,done:w3"


def test_only_a_model_runners_turn_is_handed_its_stored_model_state(
    open_runtime: OpenRuntime,
) -> None:
    """The scheduler builds ``llm_state`` (transcript reader, usages) for model runners only:
    a Python runner's turn starts without it, one with a ``host_tools`` mapping gets it."""
    seen: dict[str, bool] = {}

    def python(turn: Turn) -> str:
        seen[turn.agent.profile] = control_of(turn).llm_state is not None
        return "done"

    class ModelLike:
        """A runner shaped like a model runner (``host_tools``), answering by itself."""

        def __init__(self) -> None:
            self.host_tools: dict[str, object] = {}

        def __call__(self, turn: Turn) -> str:
            return python(turn)

    rt = open_runtime([Profile("py", runner=python), Profile("model", runner=ModelLike())])
    for profile in ("py", "model"):
        rt.wait(rt.spawn(profile, "go").id, timeout=10)
    assert seen == {"py": False, "model": True}


def test_a_runner_says_it_is_a_model_runner_with_its_marker(open_runtime: OpenRuntime) -> None:
    """``model_runner`` decides, whatever the runner's shape: True hands a turn its stored
    model state without a ``host_tools`` mapping, False keeps it from one that has one."""
    seen: dict[str, bool] = {}

    class Marked:
        """A runner that says what it is (``model_runner``), answering by itself."""

        def __init__(self, marker: bool) -> None:
            self.model_runner = marker
            if not marker:
                self.host_tools: dict[str, object] = {}

        def __call__(self, turn: Turn) -> str:
            seen[turn.agent.profile] = control_of(turn).llm_state is not None
            return "done"

    rt = open_runtime([Profile("yes", runner=Marked(True)), Profile("no", runner=Marked(False))])
    for profile in ("yes", "no"):
        rt.wait(rt.spawn(profile, "go").id, timeout=10)
    assert seen == {"yes": True, "no": False}
