"""The state machine: one runtime per example, the rules mixed in, invariants after every step.

:class:`RetinueMachine` opens a runtime on a fresh store, mixes in the host's
rules (:mod:`~.rules`), the race rules (:mod:`~.races`), the invariants
(:mod:`~.invariants`) and the store check (:mod:`~.storecheck`), and owns
the steps every rule may take: bringing the model up to date once quiet
(``sync``) and reopening the runtime (``reopen``). Its own rules: the gate
and reopen.
"""

from __future__ import annotations

import shutil
import tempfile
import traceback
from collections import Counter
from pathlib import Path

import msgspec
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from retinue import AgentInfo, Runtime
from retinue.protocol.messages import AgentState, Message
from stress.statemachine.data import (
    HOST,
    INTERRUPT_ERRORS,
    LIMITS,
    NAMES,
    RUNNER_EXIT_S,
    SUBAGENTS,
)
from stress.statemachine.harness import Harness
from stress.statemachine.invariants import Invariants
from stress.statemachine.leftovers import LEFT_BEHIND
from stress.statemachine.model import Agent
from stress.statemachine.races import RaceRules
from stress.statemachine.rules import HostRules
from stress.statemachine.runners import team
from stress.statemachine.storecheck import StoreCheck, fixed, identity, read_store
from stress.statemachine.trace import STATS, TRACE, VIOLATIONS, fail, record_failures

__all__ = ["RetinueMachine"]


class RetinueMachine(HostRules, RaceRules, Invariants, StoreCheck, RuleBasedStateMachine):
    """Drives one runtime per example and checks it against a model after every step."""

    durability = "full"

    def __init__(self) -> None:
        """Open a fresh runtime on a fresh store."""
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="retinue-sm-"))
        self.store_path = self.dir / "store"
        self.harness = Harness()
        self.agents: dict[str, Agent] = {}  # creation order
        self.dedup: dict[str, Message] = {}  # host dedup key -> the original message
        self.host_delivered: set[str] = set()  # host-routed completions the host received
        self.host_ledger: Counter[str] = Counter()  # every completion id host waits returned
        self.dormant: dict[str, str | None] = {}  # pending at the last reopen -> recipient
        self.host_inbox_ledger: Counter[str] = Counter()  # host-inbox messages the host read
        self.spawn_keys: dict[tuple[str | None, str], str] = {}  # idempotency keys -> agent
        self.quiet: set[str] = set()  # interrupt_tree's completions for members: no wake
        self.armed: str | None = None  # the command a fault is armed for (rules.faults)
        self.rescued: set[tuple[str, int]] = set()  # turns a failed command's rescue failed
        self.cut_by_close: set[tuple[str, int]] = set()  # busy as a close's Shutdown failed
        LEFT_BEHIND.install()
        LEFT_BEHIND.take()  # what an earlier example left was reported by its teardown
        try:
            self.rt = self._open()
        except BaseException as exc:  # recorded: a replay that differs would hide it
            tail = "".join(traceback.format_exception(exc))[-2000:]
            VIOLATIONS.append(f"opening a fresh runtime raised {type(exc).__name__}: {exc}\n{tail}")
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        STATS["examples"] += 1
        TRACE.clear()

    def _open(self) -> Runtime:
        rt = Runtime.open(
            self.store_path,
            profiles=team(self.harness),
            limits=LIMITS,
            durability=self.durability,
        )
        rt.subscribe(self.harness.on_event)
        self.harness.runtime = rt
        return rt

    def teardown(self) -> None:
        """Close the runtime, let every runner go, remove the store."""
        try:
            self.harness.open_gate()
            self.rt.shutdown()
            self.harness.wait_runners_exit(RUNNER_EXIT_S)
            self.check_left_behind("the last close")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- rules: the gate and reopen --

    @rule(
        index=st.integers(0, 63),
        top=st.booleans(),
        name=NAMES,
        repeat=st.integers(1, 3),
    )
    def hold(self, index: int, top: bool, name: str | None, repeat: int) -> None:
        """Close the gate and spawn gated agents (top-level or under a lead or mid).

        Two of them hold both turn slots, so a third waits ``starting``.
        """
        self.harness.close_gate()
        for n in range(repeat):
            if n:
                self.sync()
            parents = [a for a in self.live() if "gated" in SUBAGENTS[a.info.profile]]
            if top or not parents:
                self._spawn_top("gated", "hold", name, False)
            else:
                parent = parents[-1 - index % len(parents)]
                self._spawn_under(-1 - self.live().index(parent), "live", "gated", "hold", name)

    @precondition(lambda self: self.harness.gate_open)
    @rule()
    def hold_gate(self) -> None:
        """From now on gated turns block (until released, interrupted or closed)."""
        self.harness.close_gate()

    @precondition(lambda self: not self.harness.gate_open)
    @rule()
    def release_gate(self) -> None:
        """Let every gated turn return."""
        self.harness.open_gate()

    @rule()
    def toggle_failing_wakes(self) -> None:
        """From now on coordinators' wake turns fail after receiving their children's
        completions (or, again, they report them): the input rule gives them back."""
        with self.harness.cond:
            self.harness.fail_wakes = not self.harness.fail_wakes
            TRACE.append(f"fail wakes: {self.harness.fail_wakes}")
            self.harness.bump()

    @precondition(lambda self: len(self.live()) <= LIMITS.max_agents - 2)
    @rule(profile=st.sampled_from(["lead", "alead"]), follow=st.booleans())
    def failing_wake(self, profile: str, follow: bool) -> None:
        """A coordinator woken with its child's completion fails (``alead``: with a
        ``CancelledError`` of its own); the invariants check the completion went back and
        woke nothing. With ``follow`` the host gives it a follow-up, whose turn gets it."""
        task = "spawn:echo" if profile == "lead" else "aspawn:aecho"
        TRACE.append(f"failing_wake({profile}, follow={follow})")
        h, was = self.harness, self.harness.fail_wakes
        h.open_gate()
        self.sync()
        with h.cond:
            h.fail_wakes = True
        try:
            self._spawn_top(profile, task, None, False)
            self.sync()  # spawned its child, which settled; its wake failed
        finally:
            with h.cond:
                h.fail_wakes = was
        STATS["failing_wake"] += 1
        top = [a for a in self.live() if a.parent_id is None and a.info.task == task]
        if follow and top and top[-1].info.state is AgentState.FAILED:
            self._follow_up(-1 - self.live().index(top[-1]), "live", "echo")

    @rule()
    def reopen(self) -> None:
        """Close the runtime, check the store, open it again: everything must be there.

        Checked in the store while no runtime holds it: every agent, with its
        path, parent, generation and result (queued or running ones now
        ``interrupted``); completions exactly for generations 1..n, each routed
        to the nearest live ancestor while undelivered, delivered exactly when
        the model saw it received; host receipts; every message, read exactly
        when a turn received it. Then the reopened runtime shows the same tree
        with no diagnostics.
        """
        STATS["reopens"] += 1
        TRACE.append("reopen")
        before = {i.id: i for i in self.rt.agents(include_closed=True)}
        self.rt.shutdown()
        self.reopen_closed(before)

    # -- the steps every rule may take --

    def reopen_closed(self, before: dict[str, AgentInfo]) -> None:
        """The runtime is closed (its store released): check the store, open it again.

        ``before`` is every agent as it was just before the close.
        """
        self.harness.wait_runners_exit(RUNNER_EXIT_S)
        self.check_left_behind("the close")
        expected: dict[str, AgentInfo] = {}
        for agent_id, info in before.items():
            if info.state.has_turn:
                info = msgspec.structs.replace(
                    info, state=AgentState.INTERRUPTED, output=None, error=None
                )
            expected[agent_id] = info
            self.agents[agent_id].info = info
        records, completions, messages = read_store(self.store_path)
        for agent_id, info in before.items():
            if info.state.has_turn:  # queued or running when the runtime closed: which one?
                error = records[agent_id].error if agent_id in records else None
                if error not in INTERRUPT_ERRORS:
                    fail(f"{info.path} was interrupted by close but its error is {error!r}")
                expected[agent_id] = msgspec.structs.replace(expected[agent_id], error=error)
                self.agents[agent_id].info = expected[agent_id]
        self.check_store(expected, records, completions, messages)
        self.rt = self._open()
        if self.rt.diagnostics:
            fail(f"reopen reported diagnostics: {self.rt.diagnostics}")
        after = {i.id: i for i in self.rt.agents(include_closed=True)}
        if set(after) != set(expected):
            fail(f"reopen lost or invented agents: {set(expected) ^ set(after)}")
        for agent_id, info in after.items():
            if fixed(info) != fixed(expected[agent_id]):
                fail(f"reopen changed {info.path}: {expected[agent_id]} -> {info}")
        self.dormant = {
            c.completion.id: c.recipient_id for c in completions.values() if not c.delivered
        }

    def sync(self) -> None:
        """Wait for quiescence, then bring the model up to date with what the runtime shows."""
        infos = self.settle()
        h = self.harness
        if h.problems:
            fail("; ".join(h.problems))
        seen = {i.id: i for i in infos}
        missing = set(self.agents) - set(seen)
        if missing:
            fail(f"agents vanished: {missing}")
        for info in infos:  # oldest first, so parents are known before children
            agent = self.agents.get(info.id)
            if agent is None:
                agent = Agent(id=info.id, parent_id=self._parent_of(info), info=info)
                self.agents[info.id] = agent
                STATS["spawned_by_runners"] += 1
            else:
                self._check_transition(agent.info, info)
            agent.info = info

    def _parent_of(self, info: AgentInfo) -> str | None:
        if info.parent_path == HOST:
            return None
        holders = [
            a
            for a in self.agents.values()
            if a.info.path == info.parent_path and a.info.created_at <= info.created_at
        ]
        if not holders:
            fail(f"{info.path} appeared with no parent at {info.parent_path}")
        return max(holders, key=lambda a: a.info.created_at).id

    def _check_transition(self, old: AgentInfo, new: AgentInfo) -> None:
        if identity(old) != identity(new):
            fail(f"an agent's identity changed: {old} -> {new}")
        if old.state is AgentState.CLOSED and new.state is not AgentState.CLOSED:
            fail(f"{new.path} came back from closed: {new}")
        if new.generation < old.generation:
            fail(f"{new.path} went back from generation {old.generation} to {new.generation}")


record_failures(RetinueMachine)
