"""Calls in doubt under a state machine: real model turns, host tools of each effect class,
crashes between an effect and its record.

Agents of two profiles (``shop`` reports an unsafe call in doubt to the model,
``asks`` has ``Profile(in_doubt="approve")``) run real model turns on an
offline model through litellm (:mod:`~stress.statemachine.journal_world`):
steps of calls to ``look`` (``read``), ``credit`` (``idempotent``) and
``refund`` (``unsafe``), whose every run is written to a ledger outside the
store, with call ids fresh, repeated within a step or repeated step after
step. Rules:

- ``spawn``: an agent runs its plan to the end; or its tool hangs after its
  effect (or before it) and the process "dies": a consistent copy of the store is taken
  (``rt.backup``, what a crash at that commit leaves) while the ledger moves
  to a new world, and the copy is opened while the old runtime is thrown
  away; or the host interrupts the agent while its tool hangs. The call (and
  its step's others) must be found in doubt;
- ``resume``: an agent with calls in doubt carries on, resumed or given a
  follow-up (reruns and reports, or approvals asked); or it crashes again,
  during a rerun or the next step, or while its approvals wait;
- ``answer``: a person approves or denies a call in doubt (an approved rerun
  may crash too);
  ``reopen``: a clean close and open;
- and at the end of every example, ``drain``: everything resumed and
  answered; nothing may stay in doubt.

The invariants (:mod:`~stress.statemachine.journal_checks`) hold after every
step: an unsafe call's effect count <= 1 per key (plus reruns a person
approved), an idempotent call's key never changes between its runs, no
``(key, attempt)`` runs twice, every call in doubt gets one action of its
class and one ``ToolCallInDoubt``, and nothing acknowledged (a spawn, a
completion, an approval's answer, a host's message) is lost by a crash; at the
end, the model read one true result per call and each host message once.
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
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from retinue import AgentState, Limits, Runtime
from retinue.protocol.messages import ToolCallInDoubt
from stress.statemachine.journal_checks import (
    Finding,
    check_agent,
    check_events,
    check_notes,
    check_runs,
)
from stress.statemachine.journal_world import EFFECTS, LEDGER, Hang, profiles, task
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["JournalMachine"]

SETTLE_S = 60.0
LIMITS = Limits(max_active_turns=4, wait_default_s=SETTLE_S, compact_interval_s=3600.0)
KINDS = ("shop", "asks")
STEPS = st.lists(
    st.lists(st.sampled_from(list(EFFECTS)), min_size=1, max_size=3), min_size=1, max_size=2
)
IDS = st.sampled_from(["fresh", "step", "across"])


@dataclass
class Agent:
    """What the model knows of an agent."""

    id: str
    tag: str
    kind: str
    output: str | None = None  # its completion, once seen
    notes: list[str] = field(default_factory=list)  # the host's messages to it (acknowledged)


class JournalMachine(RuleBasedStateMachine):
    """One runtime per example; agents' tool calls cut short by crashes."""

    def __init__(self) -> None:
        """Open a fresh runtime on a fresh store."""
        super().__init__()
        LEDGER.clear()
        TRACE.clear()
        self.dir = Path(tempfile.mkdtemp(prefix="retinue-journal-"))
        self.store = self.dir / "store-0"
        self.stores = 0
        self.agents: list[Agent] = []
        self.findings: dict[tuple[str, int], Finding] = {}
        self.events: list[ToolCallInDoubt] = []
        self.approved: Counter[str] = Counter()  # key -> reruns a person approved
        self.denied: dict[str, str] = {}  # key -> the reason a person gave
        self.answered: set[str] = set()  # approval request ids the host answered
        self.rt = self._open()

    def _open(self) -> Runtime:
        world = LEDGER.world
        rt = Runtime.open(self.store, profiles=profiles(world), limits=LIMITS)

        def seen(event: Any) -> None:
            if isinstance(event, ToolCallInDoubt) and world == LEDGER.world:
                self.events.append(event)

        rt.subscribe(seen)
        return rt

    def teardown(self) -> None:
        """Drain (every call is settled and checked), close the runtime, remove the stores."""
        try:
            self.drain()
        finally:
            LEDGER.disarm()
            try:
                self.rt.shutdown()
            finally:
                shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers -----------------------------------------------------------------------

    def _spawn(self, kind: str, steps: list[list[str]], ids: str) -> Agent:
        tag = f"o{len(self.agents)}"
        info = self.rt.spawn(kind, task(tag, steps, ids))
        agent = Agent(info.id, tag, kind)
        self.agents.append(agent)
        TRACE.append(f"spawn {kind} {tag} {steps} ids={ids} -> {info.id[:6]}")
        STATS[f"journal:ids:{ids}"] += 1
        return agent

    def _stopped(self, agent: Agent, hang: Hang) -> None:
        """Wait until ``hang`` hung, or ``agent`` stopped (done, or parked for a person)."""
        deadline = time.monotonic() + SETTLE_S
        while not hang.hung.wait(0.005):
            state = self.rt.get(agent.id).state
            if state is AgentState.AWAITING_APPROVAL or not state.busy:
                return
            if time.monotonic() > deadline:
                fail(f"{agent.tag} neither hung in {hang.tool} nor stopped")

    def _events_of(self, agent: Agent, count: int) -> None:
        """Wait until ``count`` in-doubt events of ``agent`` arrived (published once their
        commit is done: a crash after it must not lose their finding's event)."""
        deadline = time.monotonic() + SETTLE_S
        while sum(1 for e in self.events if e.agent_id == agent.id) < count:
            if time.monotonic() > deadline:
                fail(f"{agent.tag}: fewer than {count} ToolCallInDoubt events arrived")
            time.sleep(0.005)

    def _crash(self, hang: Hang | None) -> None:
        """Copy the running store (what a crash leaves), open the copy in a new world."""
        self.stores += 1
        copy = self.dir / f"store-{self.stores}"
        with LEDGER.lock:  # an effect is in the ledger exactly when it preceded the copy
            self.rt.backup(copy)
            LEDGER.world += 1
        old, self.store = self.rt, copy
        LEDGER.disarm()
        self.rt = self._open()
        old.shutdown()  # its later work is as lost as a killed process's
        self._after_open()
        self._cut_short(hang, "crash")

    def _interrupt(self, agent: Agent, hang: Hang) -> None:
        """Interrupt ``agent`` while its tool hangs; then let the tool return (a tool that
        hung before its effect does it now, after its turn ended: an abandoned runner)."""
        self.rt.interrupt(agent.id)
        LEDGER.disarm()
        self._settled()  # the abandoned runner returned
        self._after_open()
        self._cut_short(hang, "interrupt")

    def _cut_short(self, hang: Hang | None, how: str) -> None:
        """The call that hung (if one did) is found in doubt."""
        hung = hang is not None and hang.hung.is_set()
        if hung and hang is not None:
            doubt = {k for k, _ in self.findings}
            if hang.key not in doubt:
                fail(f"the call {hang.key} cut short in {hang.tool} is not in doubt: {doubt}")
            STATS[f"journal:{how}:{'before' if hang.before else 'after'}_effect"] += 1
        TRACE.append(f"{how} (hung: {hang.tool + ' ' + hang.key if hung and hang else 'no'})")
        STATS[f"journal:{how}"] += 1

    def _after_open(self) -> None:
        """Nothing acknowledged is lost; record the calls found in doubt."""
        for agent in self.agents:
            info = self.rt.get(agent.id)  # UnknownAgent: an acknowledged spawn was lost
            if agent.output is not None and info.output != agent.output:
                fail(f"{agent.tag} had completed with {agent.output!r}, now {info}")
            if info.in_doubt and info.state is not AgentState.AWAITING_APPROVAL:
                # (a parked turn carries on the step it parked on: its calls were acted on)
                for call in self.rt.inspect(agent.id).in_doubt:
                    finding = Finding(
                        call.idempotency_key,
                        call.attempt,
                        call.tool,
                        call.effect,
                        agent.kind,
                        agent.id,
                    )
                    if (finding.key, finding.attempt) not in self.findings:
                        self.findings[finding.key, finding.attempt] = finding
                        STATS[f"journal:found:{finding.effect}:{agent.kind}"] += 1
        now = {r.id for r in self.rt.approvals()}
        if now & self.answered:
            fail(f"answered approvals are pending again: {now & self.answered}")

    def _settled(self) -> None:
        self.rt.wait_idle(SETTLE_S)
        for agent in self.agents:
            info = self.rt.get(agent.id)
            if info.state is AgentState.COMPLETED:
                if info.output != f"done {agent.tag}":
                    fail(f"{agent.tag} completed with {info.output!r}")
                agent.output = info.output

    def _carry_on(self, agent: Agent, follow: bool) -> None:
        """Resume ``agent``, or (``follow``) send it a note and give it a follow-up: its next
        turn settles its calls in doubt before anything else, its input kept with them."""
        if follow:  # a message from the host first: the follow-up's turn is handed it
            note = self.rt.send(agent.id, f"note {agent.tag}.{len(agent.notes)}")
            agent.notes.append(str(note.content))
            self.rt.follow_up(agent.id, f"and carry on with {agent.tag}")
            STATS["journal:follow_up"] += 1
        else:
            self.rt.resume(agent.id)

    def _pick(self, index: int, want: AgentState, among: list[Agent] | None = None) -> Agent | None:
        agents = self.agents if among is None else among
        chosen = [a for a in agents if self.rt.get(a.id).state is want]
        return chosen[index % len(chosen)] if chosen else None

    # -- rules -------------------------------------------------------------------------

    @initialize(
        plans=st.tuples(STEPS, STEPS),
        ids=st.tuples(IDS, IDS),
        crash=st.tuples(st.integers(0, 8), st.booleans(), st.just(False)),
    )
    def crashed(
        self,
        plans: tuple[list[list[str]], list[list[str]]],
        ids: tuple[str, str],
        crash: tuple[int, bool, bool],
    ) -> None:
        """Start with one agent of each profile whose step a crash cut short (work for
        ``resume`` and ``answer`` from the first step)."""
        for kind, steps, mode in zip(KINDS, plans, ids, strict=True):
            self.spawn(kind, steps, mode, crash)

    @rule(
        kind=st.sampled_from(KINDS),
        steps=STEPS,
        ids=IDS,
        crash=st.none() | st.tuples(st.integers(0, 8), st.booleans(), st.booleans()),
    )
    def spawn(
        self,
        kind: str,
        steps: list[list[str]],
        ids: str,
        crash: tuple[int, bool, bool] | None,
    ) -> None:
        """An agent runs its plan to the end; or (``crash``: the call at, before, interrupt)
        the ``at``-th call's tool hangs after its effect (or before it) and the process dies
        (or, with ``interrupt``, the host interrupts the agent)."""
        self._settled()
        if crash is None:
            self._spawn(kind, steps, ids)
            self._settled()
            STATS["journal:spawn"] += 1
            return
        at, before, interrupt = crash
        calls = [t for s in steps for t in s]
        hang = LEDGER.arm(f"o{len(self.agents)}", calls[at % len(calls)], before=before)
        agent = self._spawn(kind, steps, ids)
        self._stopped(agent, hang)
        if interrupt:
            self._interrupt(agent, hang)
            return
        self._crash(hang)
        STATS["journal:crash_in_step"] += 1

    @rule(
        index=st.integers(0, 20),
        crash=st.none() | st.tuples(st.sampled_from(list(EFFECTS)), st.booleans()),
        follow=st.booleans(),
    )
    def resume(self, index: int, crash: tuple[str, bool] | None, follow: bool) -> None:
        """An agent with calls in doubt carries on (resumed, or with ``follow`` given a
        follow-up): each gets the action of its class; or (``crash``: the tool, before its
        effect) the process dies again, during a rerun or the next step, or while a
        person is asked."""
        self._settled()
        agent = self._pick(index, AgentState.INTERRUPTED)
        if agent is None:
            return
        owed = self.rt.get(agent.id).in_doubt
        TRACE.append(f"resume {agent.tag} ({owed} in doubt) crash={crash} follow={follow}")
        if crash is None:
            self._carry_on(agent, follow)
            self._settled()
            STATS["journal:resume"] += 1
            return
        had = sum(1 for e in self.events if e.agent_id == agent.id)
        hang = LEDGER.arm(agent.tag, crash[0], before=crash[1])
        self._carry_on(agent, follow)
        self._stopped(agent, hang)
        self._events_of(agent, had + owed)
        if self.rt.get(agent.id).state is AgentState.AWAITING_APPROVAL:
            STATS["journal:crash_while_asking"] += 1
        self._crash(hang)
        STATS["journal:crash_in_resume"] += 1

    @rule(  # (crashes drawn twice as often: they are what the machine is for)
        index=st.integers(0, 20),
        approve=st.sampled_from([True, False]),
        crash=st.sampled_from([True, True, False]),
    )
    def answer(self, index: int, approve: bool, crash: bool) -> None:
        """A person approves or denies a call in doubt; an approved rerun may crash (with
        ``crash``; with nothing to answer, an ``asks`` agent resumes to ask, and with
        ``crash`` and not ``approve`` the process dies while the person is asked)."""
        self._settled()
        pending = self.rt.approvals()
        if not pending:  # a person is asked once an ``asks`` agent with calls in doubt resumes
            asking = [a for a in self.agents if a.kind == "asks"]
            agent = self._pick(index, AgentState.INTERRUPTED, asking)
            if agent is None:
                return
            self.rt.resume(agent.id)
            self._settled()
            parked = self.rt.get(agent.id).state is AgentState.AWAITING_APPROVAL
            if crash and not approve and parked:
                self._crash(None)  # the process dies while a person is asked
                STATS["journal:crash_while_asking"] += 1
                return
            pending = self.rt.approvals()
            if not pending:
                return
        request = pending[index % len(pending)]
        if not request.in_doubt or request.idempotency_key is None:
            fail(f"{request} asks about a call that is not in doubt")
        agent = next(a for a in self.agents if a.id == request.agent_id)
        hang = LEDGER.arm(agent.tag, request.tool, before=False) if crash and approve else None
        if approve:
            self.rt.approve(request.id)
            self.approved[request.idempotency_key] += 1
        else:
            self.denied[request.idempotency_key] = f"no {len(self.denied)}"
            self.rt.deny(request.id, reason=self.denied[request.idempotency_key])
        self.answered.add(request.id)
        TRACE.append(f"{'approve' if approve else 'deny'} {request.idempotency_key}")
        STATS[f"journal:{'approved' if approve else 'denied'}"] += 1
        if hang is None:
            self._settled()
            LEDGER.disarm()
            return
        self._stopped(agent, hang)
        self._crash(hang)
        STATS["journal:crash_in_approved_rerun"] += int(hang.hung.is_set())

    @rule(index=st.integers(0, 20), resume=st.booleans())
    def reopen(self, index: int, resume: bool) -> None:
        """Close the runtime and open it again (with ``resume``, once an ``asks`` agent with
        calls in doubt resumed and settled or parked): parked approvals survive."""
        self._settled()
        asking = [a for a in self.agents if a.kind == "asks"]
        agent = self._pick(index, AgentState.INTERRUPTED, asking) if resume else None
        if agent is not None:
            self.rt.resume(agent.id)
            self._settled()
            parked = self.rt.get(agent.id).state is AgentState.AWAITING_APPROVAL
            STATS["journal:reopen_while_asking"] += int(parked)
        self.rt.shutdown()
        self.rt = self._open()
        self._after_open()
        TRACE.append("reopen")
        STATS["journal:reopen"] += 1

    def drain(self) -> None:
        """Resume and answer everything; nothing may stay in doubt; check every chat."""
        for _ in range(20):
            self._settled()
            stopped = [a for a in self.agents if self.rt.get(a.id).state.settled]
            waiting = [a for a in stopped if self.rt.get(a.id).state is AgentState.INTERRUPTED]
            pending = self.rt.approvals()
            if not waiting and not pending:
                break
            for agent in waiting:
                self.rt.resume(agent.id)
            for number, request in enumerate(pending):
                key = request.idempotency_key or ""
                if number % 2:
                    self.denied[key] = "drained"
                    self.rt.deny(request.id, reason="drained")
                else:
                    self.approved[key] += 1
                    self.rt.approve(request.id)
                self.answered.add(request.id)
        else:
            fail("the drain did not settle every agent")
        self._final_checks()
        STATS["journal:drain"] += 1

    def _final_checks(self) -> None:
        check_events(self.events, self.findings.values(), final=True)
        for agent in self.agents:
            info = self.rt.get(agent.id)
            if info.state is not AgentState.COMPLETED or info.in_doubt:
                fail(f"{agent.tag} ended {info.state} with {info.in_doubt} in doubt")
            unread = [str(m.content) for m in self.rt.inspect(agent.id).unread]
            check_agent(agent.id, agent.tag, self.findings.values(), self.denied)
            with LEDGER.lock:
                check_notes(LEDGER.chats.get(agent.tag, []), agent.notes, unread)

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def effects_hold(self) -> None:
        """The ledger keeps the effect rules; the events never exceed the findings."""
        check_runs(LEDGER.snapshot(), self.approved)
        check_events(self.events, self.findings.values(), final=False)
