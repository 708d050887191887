"""Completions exactly once under races: waits racing close, cancelled async waits,
many host threads and tasks at once, and runtime close from any caller.

Every completion id an agent's turns produce must be received exactly once by
the host's waits (these agents are top level, so the host is the recipient):
never twice, never lost, before and after a reopen. The randomised tests are
seeded and short; ``python -m stress --only soak_races`` runs the long search.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import PROMPT_S, OpenRuntime, wait_settled, wait_until

from retinue import (
    AgentClosed,
    AgentInfo,
    AgentState,
    Backlog,
    Completion,
    CompletionStatus,
    Limits,
    NothingToWaitFor,
    Profile,
    RetinueError,
    Runtime,
    RuntimeClosed,
    StoreLocked,
    Turn,
    TurnSettled,
    WaitTimeout,
)
from retinue.actors.system._system import CLOSE_GRACE_S
from retinue.persistence.lock import WriterLock
from retinue.testing import Gate, echo

Outcome = Completion | BaseException
FACES = ["async", "sync"]


def waits_racing(
    rt: Runtime, refs: list[str], action: Callable[[], object], face: str
) -> list[Outcome]:
    """Host waits on ``refs`` race ``action()``; return each wait's outcome, in ``refs`` order.

    ``async``: the waits are tasks on one loop and ``action`` runs on that loop's
    thread once every task has submitted its wait; the host's calls from one
    thread are served in the order made, so every wait is registered before
    ``action``: the race is staged, not left to chance. ``sync``: each wait
    blocks a thread of its own, started just before ``action``; either may reach
    the supervisor first, and the callers' assertions hold for both orders.
    """
    if face == "async":

        async def staged() -> list[Outcome]:
            tasks = [asyncio.create_task(rt.wait_async(r, timeout=PROMPT_S)) for r in refs]
            await asyncio.sleep(0)  # each task runs up to its first await: its wait is sent
            action()
            return list(await asyncio.gather(*tasks, return_exceptions=True))

        return asyncio.run(staged())
    outcomes: dict[int, Outcome] = {}

    def wait_on(index: int) -> None:
        try:
            outcomes[index] = rt.wait(refs[index], timeout=PROMPT_S)
        except Exception as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=wait_on, args=(i,)) for i in range(len(refs))]
    for thread in threads:
        thread.start()
    action()
    for thread in threads:
        thread.join(PROMPT_S)
    return [outcomes[i] for i in range(len(refs))]


def drain(rt: Runtime, agent_id: str) -> list[int]:
    """Receive every completion of ``agent_id`` the host has not received; return generations."""
    got: list[int] = []
    while True:
        try:
            got.append(rt.wait(agent_id, timeout=0).generation)
        except (WaitTimeout, AgentClosed):
            return got
        except RetinueError as exc:  # NothingToWaitFor and friends: nothing left
            if type(exc).__name__ == "NothingToWaitFor":
                return got
            raise


# -- close racing a blocked wait ------------------------------------------------------------


@pytest.mark.parametrize("face", FACES)
def test_close_while_the_host_waits_hands_the_completion_out_once(
    open_runtime: OpenRuntime, gate: Gate, store_path: Path, face: str
) -> None:
    rt = open_runtime([Profile("w", runner=gate)])
    a = rt.spawn("w", "t", name="a")
    gate.wait_started(1)
    got = waits_racing(rt, [a.id], lambda: rt.close(a.id), face)
    assert [(c.id, c.status) for c in got if isinstance(c, Completion)] == [
        (f"{a.id}:1", "interrupted")
    ]
    assert drain(rt, a.id) == []  # received once: nothing is handed out again
    rt.shutdown()
    with Runtime.open(store_path, profiles=[Profile("w", runner=gate)]) as again:
        assert drain(again, a.id) == []  # and not after a reopen either


@pytest.mark.parametrize("face", FACES)
def test_interrupt_while_the_host_waits_hands_the_completion_out_once(
    open_runtime: OpenRuntime, gate: Gate, store_path: Path, face: str
) -> None:
    rt = open_runtime([Profile("w", runner=gate)])
    a = rt.spawn("w", "t", name="a")
    gate.wait_started(1)
    got = waits_racing(rt, [a.id], lambda: (rt.interrupt(a.id), rt.close(a.id)), face)
    assert [c.generation for c in got if isinstance(c, Completion)] == [1]
    assert drain(rt, a.id) == []
    rt.shutdown()
    with Runtime.open(store_path, profiles=[Profile("w", runner=gate)]) as again:
        assert drain(again, a.id) == []


@pytest.mark.parametrize("face", FACES)
def test_close_tree_while_the_host_waits_on_each_member_hands_each_completion_out_once(
    open_runtime: OpenRuntime, gate: Gate, store_path: Path, face: str
) -> None:
    def lead(turn: Turn) -> str:
        turn.spawn("w", "child", name="c")
        return gate(turn)

    profiles = [Profile("lead", subagents=["w"], runner=lead), Profile("w", runner=gate)]
    rt = open_runtime(profiles)
    top = rt.spawn("lead", "t", name="top")
    gate.wait_started(2)
    child = wait_until(lambda: [i for i in rt.agents() if i.name == "c"], what="the child")[0]
    got: Counter[str] = Counter()
    for outcome in waits_racing(rt, [top.id, child.id], lambda: rt.close_tree(top.id), face):
        if isinstance(outcome, Completion):
            got[outcome.id] += 1
        else:  # the child's completion goes to its parent, closed with it: nothing to wait for
            assert isinstance(outcome, AgentClosed | NothingToWaitFor), outcome
    for ref in (top.id, child.id):
        for generation in drain(rt, ref):
            got[f"{ref}:{generation}"] += 1
    assert got[f"{top.id}:1"] == 1
    assert got[f"{child.id}:1"] == 1
    rt.shutdown()
    with Runtime.open(store_path, profiles=profiles) as again:
        assert drain(again, top.id) == [] and drain(again, child.id) == []


# -- cancelled async waits ----------------------------------------------------------------


def test_a_cancelled_wait_async_loses_nothing_when_a_later_completion_is_received_first(
    open_runtime: OpenRuntime, store_path: Path, gate: Gate
) -> None:
    """The wait is answered, a second waiter receives the next completion, then the first
    wait's task is cancelled before it resumed: its completion is given back, not lost."""
    profiles = [Profile("w", runner=lambda t: gate(t) if t.task == "1" else f"out:{t.task}")]
    rt = open_runtime(profiles)
    a = rt.spawn("w", "0", name="a")
    wait_settled(rt, a.id, 1)
    got: list[int] = []

    async def scenario() -> None:
        first = asyncio.create_task(rt.wait_async(a.id, timeout=5))
        await asyncio.sleep(0)  # its wait is registered and answered with generation 1
        # Block the loop (so the first task cannot resume) while another waiter
        # receives generation 2 (held running until that waiter blocks: a wait on
        # an idle agent with nothing left would raise NothingToWaitFor at once).
        rt.follow_up(a.id, "1")
        # Whether the other wait registers before generation 2 settles or after (and
        # finds it pending), it receives generation 2: both orders give one outcome.
        other = threading.Thread(target=lambda: got.append(rt.wait(a.id, timeout=5).generation))
        other.start()
        gate.release()
        other.join(PROMPT_S)
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            got.append((await first).generation)

    asyncio.run(scenario())
    assert got[0] == 2
    got.extend(drain(rt, a.id))
    rt.shutdown()
    with Runtime.open(store_path, profiles=profiles) as again:
        got.extend(drain(again, a.id))
    assert sorted(got) == [1, 2]


def test_a_completion_given_back_by_a_cancelled_wait_survives_a_later_receipt(
    open_runtime: OpenRuntime, store_path: Path
) -> None:
    """Cancel a wait_async at every point of its hand-over while later turns are received.

    Whatever the point, each generation is received exactly once, in this
    runtime or (if it was still pending) after a reopen.
    """
    profiles = [Profile("w", runner=lambda t: f"out:{t.task}")]
    rt = open_runtime(profiles)
    a = rt.spawn("w", "0", name="a")
    received: Counter[int] = Counter()
    rng = random.Random(8)

    async def scenario() -> None:
        for n in range(1, 60):
            wait_settled(rt, a.id, n)
            first = asyncio.create_task(rt.wait_async(a.id, timeout=5))
            for _ in range(rng.randrange(8)):
                await asyncio.sleep(0)
            first.cancel()
            await rt.follow_up_async(a.id, str(n))  # the next generation settles at once
            second = asyncio.create_task(rt.wait_async(a.id, timeout=5))
            # The first wait may also be answered NothingToWaitFor before its cancel
            # lands (the host had received every completion): it took nothing.
            with contextlib.suppress(asyncio.CancelledError, NothingToWaitFor):
                received[(await first).generation] += 1
            with contextlib.suppress(asyncio.CancelledError):
                received[(await second).generation] += 1

    asyncio.run(scenario())
    wait_settled(rt, a.id, 60)
    for generation in drain(rt, a.id):
        received[generation] += 1
    rt.shutdown()
    with Runtime.open(store_path, profiles=profiles) as again:
        for generation in drain(again, a.id):
            received[generation] += 1
    assert {g: n for g, n in received.items() if n != 1} == {}
    assert sorted(received) == list(range(1, 61))


# -- many host threads and tasks --------------------------------------------------------------


def _worker(turn: Turn) -> str:
    if turn.task == "hold":  # until interrupted or closed
        turn.cancelled.wait(PROMPT_S)
    elif turn.task == "fail":
        raise ValueError("on purpose")
    return f"out:{turn.task}"


LEDGER_LIMITS: dict[str, Any] = {"max_active_turns": 8, "wait_default_s": 2.0}


class Ledger:
    """Every completion id the host's waits returned, with how often."""

    def __init__(self) -> None:
        """Start empty."""
        self.lock = threading.Lock()
        self.got: Counter[str] = Counter()
        self.agents: list[str] = []

    def add(self, done: Completion) -> None:
        """Count one receipt."""
        with self.lock:
            self.got[done.id] += 1

    def close_out(self, rt: Runtime, store_path: Path) -> None:
        """Interrupt what still runs, drain every agent, reopen and drain again; check."""
        for agent_id in self.agents:
            try:
                if rt.get(agent_id).state in (AgentState.STARTING, AgentState.RUNNING):
                    rt.interrupt(agent_id)
            except AgentClosed:
                pass
        expected: set[str] = set()
        for agent_id in self.agents:
            info = rt.get(agent_id)
            expected.update(f"{agent_id}:{g}" for g in range(1, info.generation + 1))
            for generation in drain(rt, agent_id):
                self.got[f"{agent_id}:{generation}"] += 1
        rt.shutdown()
        with Runtime.open(
            store_path, profiles=[Profile("w", runner=_worker)], limits=Limits(**LEDGER_LIMITS)
        ) as again:
            for agent_id in self.agents:
                for generation in drain(again, agent_id):
                    self.got[f"{agent_id}:{generation}"] += 1
        twice = sorted(cid for cid, n in self.got.items() if n > 1)
        lost = sorted(expected - set(self.got))
        assert (twice, lost) == ([], [])
        assert set(self.got) == expected


TASKS = ["quick", "quick", "fail", "hold"]


def test_host_threads_racing_waits_interrupts_and_closes_receive_each_completion_once(
    open_runtime: OpenRuntime, store_path: Path
) -> None:
    rt = open_runtime([Profile("w", runner=_worker)], **LEDGER_LIMITS)
    ledger = Ledger()
    ledger.agents = [rt.spawn("w", "quick", name=f"a{i}").id for i in range(8)]
    problems: list[str] = []

    def host(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(40):
            agent_id = rng.choice(ledger.agents)
            op = rng.choice(["wait", "wait", "wait", "follow", "follow", "interrupt", "send"])
            try:
                if op == "wait":
                    ledger.add(rt.wait(agent_id, timeout=rng.choice([0, 0.001, 0.05])))
                elif op == "follow":
                    rt.follow_up(agent_id, rng.choice(TASKS))
                elif op == "interrupt":
                    rt.interrupt(agent_id)
                else:
                    rt.send(agent_id, "hi")
            except RetinueError:
                pass
            except Exception as exc:  # anything else is a bug
                problems.append(f"{op}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=host, args=(seed,)) for seed in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PROMPT_S * 3)
    # Close half of them while other threads wait on them.
    closers = []
    for agent_id in ledger.agents[::2]:
        closers.append(threading.Thread(target=lambda a=agent_id: _wait_into(rt, a, ledger)))
        closers[-1].start()
    for agent_id in ledger.agents[::2]:
        rt.close(agent_id)
    for t in closers:
        t.join(PROMPT_S)
    assert problems == []
    ledger.close_out(rt, store_path)


def _wait_into(rt: Runtime, agent_id: str, ledger: Ledger) -> None:
    with contextlib.suppress(RetinueError):
        ledger.add(rt.wait(agent_id, timeout=1))


def test_async_tasks_with_cancelled_waits_receive_each_completion_once(
    open_runtime: OpenRuntime, store_path: Path
) -> None:
    rt = open_runtime([Profile("w", runner=_worker)], **LEDGER_LIMITS)
    ledger = Ledger()
    ledger.agents = [rt.spawn("w", "quick", name=f"a{i}").id for i in range(8)]
    problems: list[str] = []

    async def one(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(6):
            agent_id = rng.choice(ledger.agents)
            op = rng.choice(["wait", "wait", "cancel", "cancel", "follow", "interrupt", "close"])
            try:
                if op == "wait":
                    ledger.add(await rt.wait_async(agent_id, timeout=rng.choice([0, 0.01])))
                elif op == "cancel":
                    task = asyncio.ensure_future(rt.wait_async(agent_id, timeout=1))
                    for _ in range(rng.randrange(6)):
                        await asyncio.sleep(0)
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        ledger.add(await task)
                elif op == "follow":
                    await rt.follow_up_async(agent_id, rng.choice(TASKS))
                elif op == "close" and rng.random() < 0.1:
                    await rt.close_async(agent_id)
                else:
                    await rt.interrupt_async(agent_id)
            except RetinueError:
                pass
            except Exception as exc:
                problems.append(f"{op}: {type(exc).__name__}: {exc}")

    async def everyone() -> None:
        await asyncio.gather(*(one(seed) for seed in range(120)))

    asyncio.run(everyone())
    assert problems == []
    ledger.close_out(rt, store_path)


# -- runtime close: returns only once the store is released ----------------------------------------


def test_a_second_close_returns_only_once_the_store_is_released(
    open_runtime: OpenRuntime, store_path: Path, make_gate: Any
) -> None:
    stubborn: Gate = make_gate(honour_cancel=False)  # ignores the interrupt: close waits for it
    profiles = [Profile("w", runner=stubborn)]
    rt = open_runtime(profiles)
    rt.spawn("w", "t")
    stubborn.wait_started(1)
    first = threading.Thread(target=rt.shutdown)
    first.start()
    wait_until(lambda: rt.state.value != "open", what="the first close to begin")
    outcome: list[str] = []
    overlapped: list[bool] = []

    def second() -> None:
        overlapped.append(first.is_alive())  # the first close has not returned yet
        rt.shutdown()
        try:
            Runtime.open(store_path, profiles=profiles).shutdown()
            outcome.append("reopened")
        except RetinueError as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")

    closer = threading.Thread(target=second)
    closer.start()
    # The first close waits for the stubborn runner until it is released (or its grace
    # of CLOSE_GRACE_S runs out): the second close starts while the first is under way.
    # Whether it reaches its wait before the release or during the first close's
    # tear-down, it must return only once the store is released: "reopened".
    wait_until(lambda: overlapped, what="the second close to start")
    stubborn.release()
    first.join(PROMPT_S)
    closer.join(PROMPT_S)
    assert overlapped == [True]
    assert outcome == ["reopened"]


def test_a_runner_closing_the_runtime_does_not_leave_the_host_a_locked_store(
    open_runtime: OpenRuntime, store_path: Path
) -> None:
    holder: list[Runtime] = []
    closed_by_runner = threading.Event()

    def closer(turn: Turn) -> str:
        holder[0].shutdown()
        closed_by_runner.set()
        return "closed"

    profiles = [Profile("w", runner=closer)]
    rt = open_runtime(profiles)
    holder.append(rt)
    rt.spawn("w", "close it")
    wait_until(lambda: rt.closed, what="the runner to close the runtime")
    rt.shutdown()  # returns once the store is released, whoever closes it
    Runtime.open(store_path, profiles=[Profile("w", runner=lambda t: "x")]).shutdown()
    assert closed_by_runner.wait(PROMPT_S)  # the runner's own close returned too


def test_closing_the_runtime_twice_from_many_threads_releases_the_store_for_each(
    open_runtime: OpenRuntime, store_path: Path, gate: Gate
) -> None:
    profiles = [Profile("w", runner=gate)]
    rt = open_runtime(profiles)
    for i in range(4):
        rt.spawn("w", f"t{i}")
    gate.wait_started(4)
    barrier = threading.Barrier(6)
    outcome: list[str] = []
    lock = threading.Lock()

    def close_then_probe() -> None:
        barrier.wait()
        rt.shutdown()
        with lock:  # the writer lock is free the moment any close returns
            try:
                WriterLock(store_path).release()
                outcome.append("released")
            except StoreLocked as exc:
                outcome.append(f"StoreLocked: {exc}")

    threads = [threading.Thread(target=close_then_probe) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PROMPT_S)
    assert outcome == ["released"] * 6
    Runtime.open(store_path, profiles=profiles).shutdown()
    with pytest.raises(RuntimeClosed):
        rt.spawn("w", "late")


# -- async turns: a cancelled wait or a turn cancelled before its runner ran --------------------


def test_a_cancelled_wait_async_in_a_turn_gives_the_childs_completion_back(
    open_runtime: OpenRuntime,
) -> None:
    async def parent(turn: Turn) -> str:
        child = await turn.spawn_async("leaf", "x")
        await asyncio.to_thread(wait_settled, holder[0], child.id)
        waiting = asyncio.create_task(turn.wait_async(child.id, timeout=PROMPT_S))
        await asyncio.sleep(0)  # the wait is registered and answered (the child is done)
        time.sleep(0.2)  # block the loop: the answer lands while the task cannot resume
        waiting.cancel()
        try:
            got = await waiting
        except asyncio.CancelledError:
            got = await turn.wait_async(child.id, timeout=PROMPT_S)
        return f"{got.id}"

    holder: list[Runtime] = []
    rt = open_runtime(
        [Profile("p", subagents=["leaf"], runner=parent), Profile("leaf", runner=lambda t: "leaf")]
    )
    holder.append(rt)
    p = rt.spawn("p", "go")
    done = rt.wait(p.id, timeout=PROMPT_S)
    child = next(i for i in rt.agents() if i.parent_path == p.path)
    assert (done.status, done.output) == ("completed", f"{child.id}:1")


class BlockedLoopTeam:
    """A parent ``p`` with one settled child, and a ``blocker`` that holds the event loop.

    ``ready(rt)`` spawns both and returns once the loop is held, so a turn of
    ``p`` queued next cannot run until ``loop_free`` is set (or ``hold_s`` ends).
    ``received()`` lists the completion ids the parent's runners saw.
    """

    def __init__(self, hold_s: float) -> None:
        """Build the profiles; the blocker holds the loop for at most ``hold_s``."""
        self.loop_free = threading.Event()
        self.loop_held = threading.Event()
        self.seen: list[list[str]] = []

        async def blocker(turn: Turn) -> str:
            self.loop_held.set()
            self.loop_free.wait(hold_s)  # blocks the runtime's event loop on purpose
            return "unblocked"

        async def parent(turn: Turn) -> str:
            self.seen.append([m.id for m in turn.messages if m.kind == "completion"])
            if turn.task == "spawn":
                await turn.spawn_async("leaf", "x")
            return "ok"

        self.profiles = [
            Profile("p", subagents=["leaf"], runner=parent, wake_on_completion=False),
            Profile("leaf", runner=lambda t: "leaf"),
            Profile("blocker", runner=blocker),
        ]

    def ready(self, rt: Runtime) -> tuple[AgentInfo, AgentInfo]:
        """Spawn ``p`` (its child settles) and the blocker; return ``(p, child)``."""
        p = rt.spawn("p", "spawn", name="p")
        rt.wait(p.id, timeout=PROMPT_S)
        child = next(i for i in rt.agents() if i.parent_path == p.path)
        wait_settled(rt, child.id)
        rt.spawn("blocker", "b")
        assert self.loop_held.wait(PROMPT_S)
        return p, child

    def received(self) -> list[str]:
        """Every completion id the parent's runners were handed, in order."""
        return [cid for turn_ids in self.seen for cid in turn_ids]


def test_an_async_turn_cancelled_before_its_runner_ran_hands_its_completions_on(
    open_runtime: OpenRuntime,
) -> None:
    team = BlockedLoopTeam(PROMPT_S)
    rt = open_runtime(team.profiles)
    p, child = team.ready(rt)
    rt.follow_up(p.id, "read")  # this turn gets the child's completion ...
    rt.interrupt(p.id)  # ... and is interrupted before its runner can run
    team.loop_free.set()
    rt.wait(p.id, timeout=PROMPT_S)  # the interrupted turn
    rt.follow_up(p.id, "read again")
    rt.wait(p.id, timeout=PROMPT_S)
    assert team.received() == [f"{child.id}:1"]


def test_a_turn_the_runtime_closes_before_its_runner_ran_keeps_its_completions(
    tmp_path: Path,
) -> None:
    """Shutdown cancels a turn still waiting for the (blocked) loop: its inputs survive a reopen."""
    # The loop stays blocked past the close's grace for running turns (until the turn
    # is settled interrupted, however long a loaded machine takes to get there), so the
    # supervisor stops before the parent's turn could run.
    team = BlockedLoopTeam(CLOSE_GRACE_S + PROMPT_S)
    store = tmp_path / "store"
    rt = Runtime.open(store, profiles=team.profiles)
    p, child = team.ready(rt)
    interrupted = threading.Event()

    def on_event(event: object) -> None:
        if (
            isinstance(event, TurnSettled)
            and event.agent_id == p.id
            and event.status is CompletionStatus.INTERRUPTED
        ):
            interrupted.set()

    rt.subscribe(on_event)
    rt.follow_up(p.id, "read")  # this turn is handed the child's completion ...
    closer = threading.Thread(target=rt.shutdown)
    closer.start()  # ... and the runtime closes before its runner can run
    assert interrupted.wait(PROMPT_S)
    team.loop_free.set()  # the turn is settled interrupted: its runner must never run now
    closer.join(CLOSE_GRACE_S + PROMPT_S)
    assert not closer.is_alive()
    with Runtime.open(store, profiles=team.profiles) as again:
        # The host has not received the interrupted turn's completion yet: a wait takes it
        # first (a wait after the follow-up could return it before the new turn ran, and
        # close_tree then interrupt that turn before its runner saw anything).
        assert again.wait("/root/p", timeout=PROMPT_S).status is CompletionStatus.INTERRUPTED
        again.follow_up("/root/p", "read again")
        assert again.wait("/root/p", timeout=PROMPT_S).status is CompletionStatus.COMPLETED
        again.close_tree("/root/p")
    assert team.received() == [f"{child.id}:1"]


class HandedOverTeam:
    """A parent ``p`` whose ``wait_async`` on its child is answered while the loop is held.

    The child (a sync runner) settles only once ``child_go`` is set; the
    ``blocker`` holds the runtime's event loop until ``loop_free`` is set and
    then runs ``then()`` from the loop itself. So the parent's wait is handed
    the completion while its task cannot resume to receive it.
    """

    def __init__(self) -> None:
        """Build the profiles."""
        self.child_go = threading.Event()
        self.loop_free = threading.Event()
        self.loop_held = threading.Event()
        self.then: Any = lambda: None
        self.seen: list[str] = []  # completion ids the parent's runners received

        async def parent(turn: Turn) -> str:
            self.seen += [m.id for m in turn.messages if m.kind == "completion"]
            if turn.task == "wait":
                child = await turn.spawn_async("leaf", "x", name="c")
                event = await turn.wait_async(child.id, timeout=PROMPT_S)
                self.seen.append(event.id)
            return "ok"

        def leaf(turn: Turn) -> str:
            self.child_go.wait(PROMPT_S)
            return "leaf"

        async def blocker(turn: Turn) -> str:
            self.loop_held.set()
            self.loop_free.wait(PROMPT_S)  # blocks the runtime's event loop on purpose
            self.then()
            return "unblocked"

        self.profiles = [
            Profile("p", subagents=["leaf"], runner=parent, wake_on_completion=False),
            Profile("leaf", runner=leaf),
            Profile("blocker", runner=blocker),
        ]

    def hand_over(self, rt: Runtime) -> str:
        """Start ``p`` waiting, hold the loop, let the child settle; return the child's id."""
        p = rt.spawn("p", "wait", name="p")
        wait_until(lambda: any(i.parent_path == p.path for i in rt.agents()))
        child = next(i for i in rt.agents() if i.parent_path == p.path)
        wait_until(lambda: rt.get(child.id).state is AgentState.RUNNING)
        time.sleep(0.05)  # the parent's task reaches its wait
        rt.spawn("blocker", "b")
        assert self.loop_held.wait(PROMPT_S)
        self.child_go.set()
        wait_settled(rt, child.id)  # its completion is now handed to the parent's wait
        return child.id


def test_a_completion_handed_to_an_async_wait_survives_a_close_from_the_blocked_loop(
    tmp_path: Path,
) -> None:
    """An async runner closes the runtime while another turn's wait holds an unseen completion.

    The waiting task cannot resume while the loop runs the close, so the
    close takes the completion back: after a reopen the parent's next turn
    receives it, once.
    """
    team = HandedOverTeam()
    store = tmp_path / "store"
    rt = Runtime.open(store, profiles=team.profiles)
    closed = threading.Event()

    def close_from_the_loop() -> None:
        rt.shutdown()
        closed.set()

    team.then = close_from_the_loop
    child_id = team.hand_over(rt)
    team.loop_free.set()
    assert closed.wait(CLOSE_GRACE_S + PROMPT_S)
    assert team.seen == []  # the parent's task never resumed
    with Runtime.open(store, profiles=team.profiles) as again:
        again.follow_up("/root/p", "read")
        again.wait("/root/p", timeout=PROMPT_S)
    assert team.seen == [f"{child_id}:1"]


def test_a_completion_handed_to_an_async_wait_survives_an_interrupt_while_the_loop_is_held(
    open_runtime: OpenRuntime,
) -> None:
    """An interrupt takes back what a wait was handed but its task never received."""
    team = HandedOverTeam()
    rt = open_runtime(team.profiles)
    child_id = team.hand_over(rt)
    rt.interrupt("/root/p")
    team.loop_free.set()
    rt.wait("/root/p", timeout=PROMPT_S)
    rt.follow_up("/root/p", "read")
    rt.wait("/root/p", timeout=PROMPT_S)
    assert team.seen == [f"{child_id}:1"]


@pytest.mark.parametrize("cancelled", [False, True])
def test_a_completion_handed_to_a_host_wait_async_survives_a_close_before_its_task_resumes(
    tmp_path: Path, cancelled: bool
) -> None:
    """The host's loop is busy while its wait is answered and another thread closes the runtime.

    The close takes the completion back (the task could not give it back to a
    stopped supervisor if it were cancelled next): the task's wait ends with
    ``RuntimeClosed`` and the completion is received once, after a reopen.
    """
    gate = Gate()
    profiles = [Profile("w", runner=gate)]
    store = tmp_path / "store"
    rt = Runtime.open(store, profiles=profiles)
    agent = rt.spawn("w", "x")
    loop_busy, loop_free = threading.Event(), threading.Event()
    outcome: list[object] = []

    async def host() -> None:
        task = asyncio.ensure_future(rt.wait_async(agent.id, timeout=PROMPT_S))
        await asyncio.sleep(0.05)  # the wait is registered
        loop_busy.set()
        loop_free.wait(PROMPT_S)  # blocks this loop: the task cannot resume meanwhile
        if cancelled:
            task.cancel()
        try:
            outcome.append(await task)
        except (RetinueError, asyncio.CancelledError) as exc:
            outcome.append(type(exc))

    loop = threading.Thread(target=asyncio.run, args=(host(),))
    loop.start()
    assert loop_busy.wait(PROMPT_S)
    gate.release()
    wait_settled(rt, agent.id)  # the host's wait is answered now
    rt.shutdown()
    loop_free.set()
    loop.join(PROMPT_S)
    assert outcome == [asyncio.CancelledError if cancelled else RuntimeClosed]
    with Runtime.open(store, profiles=profiles) as again:
        assert again.wait(agent.id, timeout=0).id == f"{agent.id}:1"


@pytest.mark.parametrize("use_async", [False, True])
def test_run_many_receives_a_child_closed_while_it_waited_as_its_interrupted_completion(
    open_runtime: OpenRuntime, gate: Gate, use_async: bool
) -> None:
    """A child closed under the batch settles ``interrupted``: that completion takes its place."""
    outcome: list[list[str]] = []

    def names(results: list[Any]) -> list[str]:
        return [
            type(r).__name__ if isinstance(r, RetinueError) else r.output or r.error
            for r in results
        ]

    def parent(turn: Turn) -> str:
        outcome.append(names(turn.run_many([("leaf", "quick"), ("leaf", "hold")], PROMPT_S)))
        return "ok"

    async def aparent(turn: Turn) -> str:
        results = await turn.run_many_async([("leaf", "quick"), ("leaf", "hold")], PROMPT_S)
        outcome.append(names(results))
        return "ok"

    gate.release("quick")
    rt = open_runtime(
        [
            Profile("p", subagents=["leaf"], runner=aparent if use_async else parent),
            Profile("leaf", runner=gate),
        ]
    )
    p = rt.spawn("p", "batch", name="p")
    gate.wait_started(2)
    hold = next(t.agent for t in gate.turns if t.task == "hold")
    rt.close(hold.id)
    assert rt.wait(p.id, timeout=PROMPT_S).output == "ok"
    assert outcome == [["released:quick", "interrupted"]]


@pytest.mark.parametrize("use_async", [False, True])
def test_run_many_timeout_keeps_a_late_child_in_place_and_its_completion_for_later(
    open_runtime: OpenRuntime, gate: Gate, use_async: bool
) -> None:
    """The batch's budget runs out: the done child's completion is taken, the late one's is not.

    The late child keeps its place as ``WaitTimeout``; when it settles, its
    completion waits for the parent and its next turn receives it, once.
    """
    outcome: list[list[str]] = []
    seen: list[str] = []

    def names(results: list[Any]) -> list[str]:
        return [type(r).__name__ if isinstance(r, RetinueError) else r.id for r in results]

    def parent(turn: Turn) -> str:
        seen.extend(m.id for m in turn.messages if m.kind == "completion")
        if turn.task == "batch":
            outcome.append(names(turn.run_many([("leaf", "quick"), ("leaf", "hold")], 0.3)))
        return "ok"

    async def aparent(turn: Turn) -> str:
        seen.extend(m.id for m in turn.messages if m.kind == "completion")
        if turn.task == "batch":
            results = await turn.run_many_async([("leaf", "quick"), ("leaf", "hold")], 0.3)
            outcome.append(names(results))
        return "ok"

    gate.release("quick")
    rt = open_runtime(
        [
            Profile(
                "p",
                subagents=["leaf"],
                runner=aparent if use_async else parent,
                wake_on_completion=False,
            ),
            Profile("leaf", runner=gate),
        ]
    )
    p = rt.spawn("p", "batch", name="p")
    assert rt.wait(p.id, timeout=PROMPT_S).output == "ok"
    quick = next(t.agent for t in gate.turns if t.task == "quick")
    hold = next(t.agent for t in gate.turns if t.task == "hold")
    assert outcome == [[f"{quick.id}:1", "WaitTimeout"]]
    gate.release("hold")
    wait_settled(rt, hold.id)
    rt.follow_up(p.id, "read")
    wait_settled(rt, p.id, generation=2)
    assert seen == [f"{hold.id}:1"]


# -- found by the review -----------------------------------------------------------------


def test_a_cancelled_wait_async_gives_a_handed_over_completion_back(tmp_path: Path) -> None:
    """A completion claimed for a wait whose task is then cancelled goes to the next wait.

    The race is staged, not left to chance: the event loop is held (a blocking
    call on its own thread) from the moment the wait is submitted until the
    supervisor has handed the completion over (the host's backlog is empty), so
    the task is cancelled after the handover and before it could receive it.

    Found by the code review (was ``tests/runtime/test_regressions.py``).
    """
    with Runtime.open(tmp_path / "s", profiles=[Profile("w", runner=lambda t: t.task)]) as rt:
        a = rt.spawn("w", "result", name="a")
        rt.wait_idle(PROMPT_S)  # settled, its completion routed to the host, not received
        assert rt.backlog().host_pending_completions == 1

        async def scenario() -> tuple[str, str, str]:
            task = asyncio.create_task(rt.wait_async(a.id, timeout=PROMPT_S))
            await asyncio.sleep(0)  # the task submits its wait and awaits the answer
            # Hold the loop until the supervisor has handed the completion to the wait:
            # the answer cannot reach the task before it is cancelled.
            wait_until(lambda: rt.backlog().host_pending_completions == 0, what="the handover")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            again = await rt.wait_async(a.id, timeout=PROMPT_S)  # given back: the next wait
            with pytest.raises(NothingToWaitFor):  # and only once
                await rt.wait_async(a.id, timeout=0)
            return again.id, again.output or "", str(again.status)

        assert asyncio.run(scenario()) == (f"{a.id}:1", "result", str(CompletionStatus.COMPLETED))
    with Runtime.open(tmp_path / "s", profiles=[Profile("w", runner=echo)]) as again:
        assert again.backlog() == Backlog()  # received once, durably: nothing comes back
