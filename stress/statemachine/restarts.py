"""Restarts under a state machine: every task ends in exactly one completion, whatever its attempts.

Agents run ``flaky`` turns whose task carries a plan, one letter per attempt
(``F`` fails, ``P`` fails for good, ``S`` succeeds: ``plan:FFS`` completes on
attempt 3), under the restart policies of :mod:`stress.statemachine.restart_plans`
(``quick``, ``held`` in quarter-second backoffs, ``stubborn`` that restarts
permanent failures too). Rules spawn, give follow-ups, interrupt and close
(racing due restarts), reopen the runtime cleanly, and crash it: a crash is a
consistent copy of the store taken while the runtime runs (``rt.backup``,
what a crash at that commit leaves), which the machine opens while the old
runtime is thrown away. ``reopen_bare`` opens the store (after a clean close
or a crash) with no profiles, as ``retinue compact`` does: it must end no
supervised work and decide nothing (a lost turn becomes a pending restart,
its loss counted, a pending restart stays pending, nothing runs), and the
runtime with the profiles opened after it decides as if it had been there
(``max_lost`` and the intensity, :mod:`~stress.statemachine.restart_bare`)
and carries everything else on. ``faulty_turn_end`` makes the next settle,
turn timeout or due restart fail at a random change point
(:mod:`~stress.statemachine.restart_faults`): its turn ends ``failed`` with
the InternalError, once. ``drain`` waits for quiescence and receives every
completion as the host.

The model knows each agent's tasks and their plans, and predicts for each
task: one completion, its status, attempt and ``error_type`` (the first
``S`` of the plan, the first ``P`` unless the profile restarts permanent
failures, or ``RestartLimitExceeded`` after :data:`MAX_RESTARTS` restarts); a
task a crash hit may have lost attempts (it ends on an attempt its plan
allows, at the limit, or as a ``CrashLoop``), and one an interrupt, close or
clean reopen hit may end ``interrupted``; a turn a failed command's rescue
ended is ``failed`` with ``InternalError``, and only such a turn. Across all tasks, the completions'
generations (``generation - attempt + 1 .. generation``) cover the agent's
generations exactly once, and no completion reaches the host twice.

The host also messages agents (``send``): each message is consumed by
exactly one attempt that completed, or is still unread, and an attempt that
failed hands its messages to the next (:mod:`~stress.statemachine.restart_inputs`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from retinue import Limits, Runtime
from retinue.errors import (
    AgentBusy,
    AgentClosed,
    NothingToWaitFor,
    RetinueError,
    WaitTimeout,
)
from retinue.protocol.messages import AgentInfo, AgentState, Completion
from stress.parts import Options, Part, Result
from stress.statemachine.restart_bare import check_bare, check_decided
from stress.statemachine.restart_faults import RestartFaults, judge_rescued
from stress.statemachine.restart_inputs import RUNS, check_inputs, profiles
from stress.statemachine.restart_plans import (
    ATTEMPTS,
    KINDS,
    MAX_RESTARTS,
    PLANS,
    TIMED,
    Task,
    judge,
)
from stress.statemachine.storecheck import read_store
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["MAX_RESTARTS", "RestartMachine"]

SETTLE_S = 30.0
LIMITS = Limits(max_active_turns=3, wait_default_s=5.0, compact_interval_s=3600.0)


@dataclass
class Agent:
    """What the model knows of an agent."""

    id: str
    kind: str
    tasks: list[Task] = field(default_factory=list)
    closed: bool = False
    got: list[Completion] = field(default_factory=list)  # what host waits received, in order
    sent: list[str] = field(default_factory=list)  # the ids of the host's messages to it


class RestartMachine(RestartFaults, RuleBasedStateMachine):
    """One runtime per example; restarts raced by interrupts, closes, reopens, crashes and
    faults."""

    def __init__(self) -> None:
        """Open a fresh runtime on a fresh store."""
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="retinue-restarts-"))
        self.store = self.dir / "store-0"
        self.stores = 0
        self.agents: list[Agent] = []
        self.ledger: Counter[str] = Counter()
        self.world = 0  # a crash starts a new one: the old runtime's later runs are not ours
        self.rescued: set[tuple[str, int]] = set()  # turns a failed command's rescue failed
        RUNS.clear()
        self.rt = self._open(self.store)
        TRACE.clear()

    def _open(self, store: Path) -> Runtime:
        return Runtime.open(store, profiles=profiles(self.world), limits=LIMITS)

    def teardown(self) -> None:
        """Drain (every task of the example is checked), close the runtime, remove the stores."""
        try:
            self.drain()
        finally:
            self._close()

    def _close(self) -> None:
        try:
            self.rt.shutdown()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _pick(self, index: int) -> Agent | None:
        live = [a for a in self.agents if not a.closed]
        return live[index % len(live)] if live else None

    # -- rules -------------------------------------------------------------------------

    @rule(plan=PLANS, kind=st.sampled_from(KINDS))
    def spawn(self, plan: str, kind: str) -> None:
        """Spawn a flaky agent on a planned task."""
        info = self.rt.spawn(kind, f"plan:{plan}#{len(self.agents)}")
        self.agents.append(Agent(info.id, kind, [Task(plan, kind)]))
        TRACE.append(f"spawn {plan} {kind} -> {info.id[:6]}")
        STATS["restart:spawn"] += 1

    @precondition(lambda self: self.agents)
    @rule(index=st.integers(0, 20), plan=PLANS, notes=st.integers(0, 2))
    def follow_up(self, index: int, plan: str, notes: int) -> None:
        """Give an agent a new planned task (refused while its task is still going), after
        ``notes`` messages: its attempts are handed them until one completes."""
        agent = self._pick(index)
        if agent is None:
            return
        for _ in range(notes):
            self.send(index)
        try:
            self.rt.follow_up(agent.id, f"plan:{plan}#f")
        except AgentBusy:
            TRACE.append(f"follow_up {agent.id[:6]} -> busy")
            return
        agent.tasks.append(Task(plan, agent.kind))
        TRACE.append(f"follow_up {agent.id[:6]} {plan}")
        STATS["restart:follow_up"] += 1

    @precondition(lambda self: self.agents)
    @rule(index=st.integers(0, 20))
    def send(self, index: int) -> None:
        """The host messages an agent: its next attempt that completes consumes it."""
        agent = self._pick(index)
        if agent is None:
            return
        try:
            message = self.rt.send(agent.id, f"note {len(agent.sent)}")
        except RetinueError as exc:  # a full mailbox: the model knows no more of it
            TRACE.append(f"send {agent.id[:6]} -> {type(exc).__name__}")
            return
        agent.sent.append(message.id)
        TRACE.append(f"send {agent.id[:6]} -> {message.id}")
        STATS["restart:send"] += 1

    @precondition(lambda self: self.agents)
    @rule(index=st.integers(0, 20))
    def interrupt(self, index: int) -> None:
        """Interrupt an agent: a pending restart (or running turn) ends ``interrupted``."""
        agent = self._pick(index)
        if agent is None:
            return
        before = self.rt.get(agent.id).state
        info = self.rt.interrupt(agent.id)
        if info.state is AgentState.INTERRUPTED:
            agent.tasks[-1].may_interrupt = True
        TRACE.append(f"interrupt {agent.id[:6]} ({before}) -> {info.state}")
        STATS[f"restart:interrupt:{before}"] += 1

    @rule(
        rest=st.text(alphabet="FS", min_size=ATTEMPTS - 1, max_size=ATTEMPTS - 1),
        shut=st.booleans(),
    )
    def stop_in_backoff(self, rest: str, shut: bool) -> None:
        """A held agent fails its first attempt; interrupt or close it during the backoff."""
        agent = self._in_backoff(rest)
        info = self.rt.get(agent.id)
        agent.tasks[-1].may_interrupt = True
        if shut:
            self._collect(agent)
            self.rt.close(info.id)
            agent.closed = True
        elif self.rt.interrupt(info.id).state is not AgentState.INTERRUPTED:
            fail(f"interrupting {info.id} in its backoff left it running")
        TRACE.append(f"stop_in_backoff F{rest} close={shut}")
        STATS[f"restart:{'close' if shut else 'interrupt'}:restarting"] += 1

    def _in_backoff(self, rest: str) -> Agent:
        """Spawn a held agent whose first attempt fails; return it once it is restarting."""
        info = self.rt.spawn("held", f"plan:F{rest}#{len(self.agents)}")
        agent = Agent(info.id, "held", [Task("F" + rest, "held")])
        self.agents.append(agent)
        deadline = time.monotonic() + SETTLE_S
        while self.rt.get(info.id).state is not AgentState.RESTARTING:
            if time.monotonic() > deadline:
                fail(f"{info.id} never entered its backoff")
            time.sleep(0.002)
        return agent

    def _running(self, plan: str) -> Agent:
        """Spawn a timed agent whose first attempt runs until its deadline; return it while
        that attempt (or a later one) runs, or once its task ended (a loaded machine's
        poll may miss every running attempt: then nothing is lost at the crash)."""
        info = self.rt.spawn(TIMED, f"plan:{plan}#{len(self.agents)}")
        agent = Agent(info.id, TIMED, [Task(plan, TIMED)])
        self.agents.append(agent)
        deadline = time.monotonic() + SETTLE_S
        while (state := self.rt.get(info.id).state) is not AgentState.RUNNING and state.busy:
            if time.monotonic() > deadline:
                fail(f"{info.id} never ran")
            time.sleep(0.002)
        return agent

    @precondition(lambda self: self.agents)
    @rule(index=st.integers(0, 20))
    def close(self, index: int) -> None:
        """Close an agent; its pending task ends ``interrupted``."""
        agent = self._pick(index)
        if agent is None:
            return
        self._collect(agent)  # the host's completions first: a closed agent keeps them
        before = self.rt.get(agent.id)
        self.rt.close(agent.id)
        agent.tasks[-1].may_interrupt = True
        agent.closed = True
        TRACE.append(f"close {agent.id[:6]} (was {before.state})")
        STATS[f"restart:close:{before.state}"] += 1

    @rule()
    def reopen(self) -> None:
        """Close the runtime and open it again: pending restarts survive, turns are interrupted."""
        states = [self.rt.get(a.id).state for a in self.agents if not a.closed]
        for agent in self.agents:
            if agent.tasks:
                agent.tasks[-1].may_interrupt = True
        self.rt.shutdown()
        self.rt = self._open(self.store)
        TRACE.append("reopen")
        STATS["restart:reopen"] += 1
        STATS["restart:reopen_restarting"] += states.count(AgentState.RESTARTING)

    @rule()
    def crash(self) -> None:
        """Crash: open a consistent copy of the running store; the old runtime is lost."""
        self.stores += 1
        copy = self.dir / f"store-{self.stores}"
        self.rt.backup(copy)
        old = self.rt
        for agent in self.agents:
            if agent.tasks:
                agent.tasks[-1].crashed = True
        self.store = copy
        self.world += 1
        self.rt = self._open(copy)
        old.shutdown()  # its later work is as lost as a killed process's
        restarting = sum(1 for a in self.rt.agents() if a.state is AgentState.RESTARTING)
        TRACE.append(f"crash ({restarting} restarting after it)")
        STATS["restart:crash"] += 1
        STATS["restart:crash_restarting"] += restarting

    @rule(
        crashed=st.booleans(),
        pending=st.booleans(),
        running=st.booleans(),
        rest=st.text(alphabet="FPST", min_size=ATTEMPTS - 1, max_size=ATTEMPTS - 1),
    )
    def reopen_bare(self, crashed: bool, pending: bool, running: bool, rest: str) -> None:
        """Open the store with no profiles (as ``retinue compact`` does), then with them.

        After a clean close or a crash (a copy of the running store), the bare
        open ends no supervised work and decides nothing (:func:`check_bare`);
        then the runtime with the profiles gives up what its policy would not
        have restarted (:func:`check_decided`) and carries everything else on.
        With ``pending``, a held agent is in its backoff first (a restart
        pending, or due, at the open); with ``running`` (and ``crashed``), a
        timed agent's ``T`` attempt runs at the crash, so the bare open finds it lost.
        """
        if pending:
            self._in_backoff("S" * (ATTEMPTS - 1))
        if running and crashed:
            self._running("T" + rest)
        old = self.rt
        for agent in self.agents:
            if agent.tasks:
                agent.tasks[-1].crashed |= crashed
                agent.tasks[-1].may_interrupt |= not crashed
        if crashed:
            self.stores += 1
            self.store = self.dir / f"store-{self.stores}"
            old.backup(self.store)
            self.world += 1  # the old runtime's later runs are another world's
        old.shutdown()  # a crash: its later work is as lost as a killed process's
        before, done_before, _ = read_store(self.store)
        bare = Runtime.open(self.store, profiles=[], limits=LIMITS)
        try:
            bare.wait_idle(SETTLE_S)  # nothing can run here: it must be idle at once
            after = {a.id: a for a in bare.agents()}
        finally:
            bare.shutdown()
        left, done_after, _ = read_store(self.store)
        check_bare(before, after, left, done_before, done_after)
        for agent in self.agents:
            if agent.tasks and agent.id in before and before[agent.id].state.has_turn:
                agent.tasks[-1].deferred = True  # a loss recorded: the next open decides
        self.rt = self._open(self.store)
        now = {a.id: a for a in self.rt.agents()}
        ran = {(r.agent_id, r.generation) for r in RUNS.of_world(self.world)}
        check_decided(left, now, ran)
        TRACE.append(f"reopen_bare crashed={crashed}")
        STATS["restart:reopen_bare"] += 1

    @rule()
    def drain(self) -> None:
        """Wait for quiescence, receive every completion, check every task against the model."""
        self.rt.wait_idle(SETTLE_S)
        for agent in self.agents:
            self._collect(agent)
            self._check(agent, self.rt.get(agent.id))
            unread = None if agent.closed else {m.id for m in self.rt.inspect(agent.id).unread}
            check_inputs(agent.id, agent.sent, agent.got, unread)
        STATS["restart:drain"] += 1

    # -- the model ----------------------------------------------------------------------

    def _collect(self, agent: Agent) -> None:
        """Receive every completion of ``agent`` the host has not received yet."""
        while True:
            try:
                done = self.rt.wait(agent.id, timeout=0)
            except (NothingToWaitFor, AgentClosed, WaitTimeout):
                return
            except RetinueError as exc:
                fail(f"host wait on {agent.id} raised {type(exc).__name__}: {exc}")
            self.ledger[done.id] += 1
            if self.ledger[done.id] > 1:
                fail(f"completion {done.id} reached the host {self.ledger[done.id]} times")
            agent.got.append(done)

    def _check(self, agent: Agent, info: AgentInfo) -> None:
        """Each task has its one completion, as its plan predicts; generations covered once."""
        if info.state.busy:
            fail(f"{agent.id} is {info.state} after quiescence")
        got = sorted(agent.got, key=lambda c: c.generation)
        if len(got) != len(agent.tasks):
            fail(f"{agent.id}: {len(agent.tasks)} tasks made {len(got)} completions: {got}")
        covered: list[int] = []
        for task, done in zip(agent.tasks, got, strict=True):
            covered += range(done.generation - done.attempt + 1, done.generation + 1)
            self._judge(agent, task, done)
        if covered != list(range(1, info.generation + 1)):
            fail(f"{agent.id}: completions cover {covered} of {info.generation} generations")

    def _judge(self, agent: Agent, task: Task, done: Completion) -> None:
        STATS[f"restart:outcome:{done.status}:{done.attempt}"] += 1
        STATS[f"restart:error_type:{done.error_type}"] += 1
        rescued = judge_rescued(self.rescued, done)
        if rescued is not None:
            if not rescued:
                fail(f"{agent.id}: task {task} ended {done}; rescued turns: {self.rescued}")
        elif not judge(task, done):
            fail(f"{agent.id}: task {task} (ends at attempt {task.end()}) ended {done}")


def run(max_examples: int = 200, steps: int = 40) -> dict[str, Any]:
    """The long search (``python -m stress --only restarts``): a row with the problems found."""
    import hypothesis
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    STATS.clear()
    config = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    problems: list[str] = []
    try:
        run_state_machine_as_test(RestartMachine, settings=config)
    except (AssertionError, hypothesis.errors.HypothesisException) as exc:
        problems.append(f"{type(exc).__name__}: {exc}"[:4000])
    outcomes = {k.split(":", 2)[2]: v for k, v in STATS.items() if k.startswith("restart:outcome")}
    return {
        "examples": max_examples,
        "steps": steps,
        "crashes": STATS["restart:crash"],
        "restarting_after_crash": STATS["restart:crash_restarting"],
        "opens_without_profiles": STATS["restart:reopen_bare"],
        "restarts_kept_by_them": STATS["restart:bare:kept:restarting"],
        "losses_recorded_by_them": STATS["restart:bare:lost:restarting"],
        "decided_after_them": STATS["restart:decided:CrashLoop"]
        + STATS["restart:decided:RestartLimitExceeded"],
        "faults": sum(v for k, v in STATS.items() if k.startswith("restart:fault:")),
        "rescued_turns": STATS["restart:rescued_turns"],
        "outcomes": dict(sorted(outcomes.items())),
        "problems": problems,
    }


def _part(options: Options) -> Result:
    """The restart machine (CI runs it derandomized in tests/runtime/test_restart_machine.py)."""
    found = run(30 if options.quick else 200, 40)
    title = (
        "restarts machine: every task one completion across interrupts, reopens, crashes, "
        "opens without profiles"
    )
    return Result.row(title, found, list(found.pop("problems")))


PART = Part("restarts", _part, check=True, in_quick=False)
