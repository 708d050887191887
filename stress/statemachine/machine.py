"""The state machine: one runtime per example, rules mixed in, invariants after every step."""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from retinue import AgentInfo, Runtime
from retinue.protocol.messages import (
    AgentState,
    Completion,
    CompletionStatus,
    Message,
)
from stress.statemachine.harness import (
    BUSY,
    HOST,
    INTERRUPT_ERRORS,
    LIMITS,
    NAMES,
    RUNNER_EXIT_S,
    SETTLE_S,
    STATS,
    SUBAGENTS,
    TRACE,
    VIOLATIONS,
    WAKES,
    Harness,
    Violation,
    fail,
    team,
)
from stress.statemachine.model import Agent
from stress.statemachine.races import RaceRules
from stress.statemachine.rules import HostRules
from stress.statemachine.storecheck import StoreCheck, _fixed, _identity, read_store


class RetinueMachine(HostRules, RaceRules, StoreCheck, RuleBasedStateMachine):
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
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- model helpers --
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

    def reopen_closed(self, before: dict[str, AgentInfo]) -> None:
        """The runtime is closed (its store released): check the store, open it again.

        ``before`` is every agent as it was just before the close.
        """
        self.harness.wait_runners_exit(RUNNER_EXIT_S)
        expected: dict[str, AgentInfo] = {}
        for agent_id, info in before.items():
            if info.state in BUSY:
                info = msgspec.structs.replace(
                    info, state=AgentState.INTERRUPTED, output=None, error=None
                )
            expected[agent_id] = info
            self.agents[agent_id].info = info
        records, completions, messages = read_store(self.store_path)
        for agent_id, info in before.items():
            if info.state in BUSY:  # queued or running when the runtime closed: which one?
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
            if _fixed(info) != _fixed(expected[agent_id]):
                fail(f"reopen changed {info.path}: {expected[agent_id]} -> {info}")
        self.dormant = {
            c.completion.id: c.recipient_id for c in completions.values() if not c.delivered
        }

    # -- quiescence and invariants --

    def settle(self) -> list[AgentInfo]:
        """Wait (on events and runner activity) until nothing moves; return the agents.

        Quiet means: with the gate open, no agent is queued or running and no
        runner is inside a turn; with the gate closed, only gated turns are
        running (inside the gate), and anything else is queued or waiting
        only because gated turns hold every slot. Every running turn has
        entered its runner, and no runner is still inside a settled turn.
        """
        deadline = time.monotonic() + SETTLE_S
        while True:
            mark = self.harness.mark()
            infos = self.rt.agents(include_closed=True)
            reasons = self._restless(infos)
            if not reasons:
                return infos
            if time.monotonic() > deadline:
                fail(f"no quiescence after {SETTLE_S}s: {reasons}")
            self.harness.wait_activity(mark, 0.5)

    def _restless(self, infos: list[AgentInfo]) -> list[str]:
        h = self.harness
        with h._cond:
            in_gate, in_flight = set(h.in_gate), set(h.in_flight)
            logged = set(h.turns)
            gate_open = h.gate_open
        running = {(i.id, i.generation) for i in infos if i.state is AgentState.RUNNING}
        holding = running & in_gate
        slots_full = len(holding) >= LIMITS.max_active_turns
        reasons: list[str] = []
        for info in infos:
            key = (info.id, info.generation)
            if info.state is AgentState.RUNNING and key not in logged:
                reasons.append(f"{info.path} running but its runner has not started")
            if info.state in BUSY and not (not gate_open and (key in holding or slots_full)):
                reasons.append(f"{info.path} is {info.state} (gen {info.generation})")
        for key in in_flight - running:
            reasons.append(f"runner {key} still inside a turn that is over")
        return reasons

    @invariant()
    def settled_invariants(self) -> None:
        """After every step, once quiet: the tree, the caps, the logs and the backlogs hold.

        - only ``RetinueError`` ever came out of a runner's coordinator calls;
        - no turn ran twice, no turn settled twice;
        - every known agent is still there; id, path, name, profile, parent,
          depth and creation time never change; closed stays closed;
          generations never go back;
        - live paths are unique, and each resolves to its agent;
        - every live agent's parent is live; depth <= depth_cap and matches
          the path; live children <= fanout_cap; live agents per tree <=
          max_tree_agents; live agents <= max_agents;
        - a completed or failed agent shows what its runner returned; an
          interrupted one shows nothing;
        - each agent's turns received the host's messages in send order, each
          once; unread messages <= mailbox_capacity;
        - every completion reached at most one turn, and only a turn of an
          ancestor; unreceived completions per agent <= the backlog cap;
        - an idle (completed/failed) agent that wakes on completions has no
          completion waiting for it, unless its own backlog holds its wake
          or the completion was already waiting when the store was reopened.
        """
        STATS["steps"] += 1
        self.sync()
        live = self.live()
        STATS["live_agents_seen"] += len(live)
        STATS["busy_agents_seen"] += sum(a.busy for a in live)
        self._check_tree()
        self._check_logs()
        self._check_completions()

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
        if _identity(old) != _identity(new):
            fail(f"an agent's identity changed: {old} -> {new}")
        if old.state is AgentState.CLOSED and new.state is not AgentState.CLOSED:
            fail(f"{new.path} came back from closed: {new}")
        if new.generation < old.generation:
            fail(f"{new.path} went back from generation {old.generation} to {new.generation}")

    def _check_tree(self) -> None:
        live = self.live()
        paths = [a.info.path for a in live]
        if len(paths) != len(set(paths)):
            fail(f"live paths are not unique: {sorted(paths)}")
        if len(live) > LIMITS.max_agents:
            fail(f"{len(live)} live agents > max_agents")
        for agent in live:
            info = agent.info
            if agent.parent_id is not None and self.agents[agent.parent_id].closed:
                fail(f"{info.path} is live under a closed parent")
            if info.depth > LIMITS.depth_cap or info.depth != info.path.count("/") - 1:
                fail(f"{info.path} has depth {info.depth} (cap {LIMITS.depth_cap})")
            if info.path != f"{info.parent_path}/{info.name}":
                fail(f"{info.path} is not {info.parent_path}/{info.name}")
            if len(self.children(agent)) > LIMITS.fanout_cap:
                fail(f"{info.path} has {len(self.children(agent))} live children")
            if agent.parent_id is None and len(self.subtree(agent)) > LIMITS.max_tree_agents:
                fail(f"the tree of {info.path} has more than max_tree_agents live agents")
        for agent in live:  # every live path resolves to its agent
            got, error = self.call("get", lambda a=agent: self.rt.get(a.info.path))  # type: ignore[misc]
            if error is not None or got.id != agent.id:
                fail(f"get({agent.info.path!r}) gave {got or error}, not {agent.id}")

    def _check_logs(self) -> None:
        h = self.harness
        delivered = h.delivered_messages()
        for agent in self.agents.values():
            info = agent.info
            log = h.turns.get((info.id, info.generation))
            if info.state is AgentState.INTERRUPTED:
                if info.output is not None or info.error not in INTERRUPT_ERRORS:
                    fail(f"interrupted {info.path} shows a result or lacks its error: {info}")
            elif info.state in (AgentState.COMPLETED, AgentState.FAILED):
                status = CompletionStatus(str(info.state))
                as_completion = Completion(
                    id=f"{info.id}:{info.generation}",
                    agent_id=info.id,
                    path=info.path,
                    generation=info.generation,
                    status=status,
                    output=info.output,
                    error=info.error,
                )
                self.check_completion(as_completion, f"state of {info.path}")
            if log is not None and log.profile != info.profile:
                fail(f"{info.path} ran the {log.profile} runner, not {info.profile}")
            got = delivered.get(agent.id, [])
            inbox = [m.id for m in self.inbox(agent)]
            if not h.waited_any(agent.id):  # a turn's messages: every unread one, in order
                if got != inbox[: len(got)]:
                    fail(f"{info.path}: turns received messages {got}, but it was sent {inbox}")
            else:  # a wait takes one child's oldest message: in order per sender, each once
                senders = {m.id: m.sender_id for m in self.inbox(agent)}
                if len(set(got)) != len(got) or not set(got) <= set(inbox):
                    fail(f"{info.path}: turns received messages {got}; it was sent {inbox}")
                for sender in set(senders.values()):
                    mine = [i for i in inbox if senders[i] == sender]
                    seen = [i for i in got if senders[i] == sender]
                    if seen != mine[: len(seen)]:
                        fail(f"{info.path}: messages from {sender} received as {seen}, not {mine}")
            if len(inbox) - len(got) > LIMITS.mailbox_capacity:
                fail(f"{info.path} holds more than mailbox_capacity unread messages")
        self._check_host_inbox()

    def _check_host_inbox(self) -> None:
        """The host's inbox: read at most once each, bounded, full exactly when it refused."""
        twice = [i for i, n in self.host_inbox_ledger.items() if n > 1]
        if twice:
            fail(f"the host read inbox messages more than once: {twice}")
        unread = self.host_unread()
        if len(unread) > LIMITS.mailbox_capacity:
            fail(f"the host's inbox holds {len(unread)} unread messages > mailbox_capacity")
        with self.harness._cond:
            refused = self.harness.host_full
        if refused and len(unread) < LIMITS.mailbox_capacity:
            fail(
                f"{refused} sends to the host were refused MailboxFull, yet its inbox holds "
                f"only {len(unread)} unread (capacity {LIMITS.mailbox_capacity})"
            )

    def _check_completions(self) -> None:
        h = self.harness
        counts = h.delivered_completions()
        twice = [cid for cid, n in counts.items() if n > 1]
        if twice:
            fail(f"completions received by turns more than once: {twice}")
        with h._cond:
            logs = list(h.turns.values())
        for log in logs:
            receiver = self.agents.get(log.agent_id)
            for cid in [i for k, i in log.messages if k == "completion"] + log.taken:
                origin = self.agents.get(cid.rsplit(":", 1)[0])
                if origin is None or receiver is None or not self._below(origin, receiver):
                    fail(f"{cid} reached a turn of {log.agent_id}, which is not its ancestor")
        delivered = self.delivered()
        pending_for: dict[str | None, list[str]] = {}
        for agent in self.agents.values():
            backlog = self.undelivered(agent, delivered)
            # A completion a cancelled wait gave back may have let one wake through
            # while it counted as received: the backlog may then pass the cap by one.
            if len(backlog) > LIMITS.pending_completions_per_agent + agent.gave_back:
                fail(f"{agent.info.path} has {len(backlog)} completions unreceived")
            heir = self.heir(agent)
            for cid in backlog:
                if cid in self.quiet:  # interrupt_tree's, for a member: it wakes nobody
                    continue
                if self.dormant.get(cid, "absent") != heir:  # arrived since the last reopen
                    pending_for.setdefault(heir, []).append(cid)
        for agent in self.live():
            fresh = pending_for.get(agent.id)
            if (
                fresh
                and WAKES[agent.info.profile]
                and agent.info.state in (AgentState.COMPLETED, AgentState.FAILED)
                and len(self.undelivered(agent, delivered)) < LIMITS.pending_completions_per_agent
            ):
                fail(
                    f"{agent.info.path} is {agent.info.state} and wakes on completions, "
                    f"but {fresh} wait for it and it was not woken"
                )


def _recording(function: Callable[..., Any], name: str) -> Callable[..., Any]:
    """Wrap a rule so an exception other than a Violation is recorded with its traceback.

    Hypothesis may replace a failure it cannot replay (threads make replays
    differ) with ``FlakyStrategyDefinition``; the recorded text keeps the
    original error and the calls before it for the report.
    """

    @functools.wraps(function)
    def rule_body(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except Violation:
            raise
        except BaseException as exc:
            tail = "".join(traceback.format_exception(exc))[-2000:]
            VIOLATIONS.append(
                f"{name} raised {type(exc).__name__}: {exc}\n{tail}\n  after: "
                + "\n         ".join(TRACE[-30:])
            )
            raise

    return rule_body


for _name in dir(RetinueMachine):
    _marked = getattr(RetinueMachine, _name)
    for _marker in (
        "hypothesis_stateful_rule",
        "hypothesis_stateful_initialize_rule",
        "hypothesis_stateful_invariant",
    ):
        _spec = getattr(_marked, _marker, None)
        if _spec is not None and hasattr(_spec, "function"):
            # The rule records are frozen; the function is the one thing swapped.
            object.__setattr__(_spec, "function", _recording(_spec.function, _name))
