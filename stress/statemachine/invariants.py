"""Quiescence and the invariants the machine checks after every step.

:meth:`Invariants.settle` waits (on events and runner activity, no sleeps)
until nothing moves; :meth:`Invariants.settled_invariants` then checks the
tree, the caps, the runners' logs, the host's inbox and the completions'
backlogs against the model (the list is on the method).
"""

from __future__ import annotations

import functools
import itertools
import time

from hypothesis.stateful import invariant

from retinue import AgentInfo
from retinue.protocol.messages import AgentState, Completion, CompletionStatus
from stress.statemachine.data import (
    INTERRUPT_ERRORS,
    LIMITS,
    SETTLE_S,
    WAKES,
)
from stress.statemachine.harness import TurnLog
from stress.statemachine.model import Agent, Model
from stress.statemachine.trace import STATS, fail

__all__ = ["Invariants"]


class Invariants(Model):
    """Quiescence, and the checks of a quiet runtime against the model."""

    def settle(self) -> list[AgentInfo]:
        """Wait (on events and runner activity) until nothing moves; return the agents.

        Quiet means: with the gate open, no agent is queued or running and no
        runner is inside a turn; with the gate closed, only gated turns are
        running (inside the gate), and anything else is queued or waiting
        only because gated turns hold every slot. Every running turn has
        entered its runner, and no runner is still inside a settled turn.
        Every event published so far was handed to the harness (how each
        settled turn ended is known).
        """
        deadline = time.monotonic() + SETTLE_S
        while True:
            mark = self.harness.mark()
            infos = self.rt.agents(include_closed=True)
            reasons = self._restless(infos)
            if not reasons:
                self.rt._flush_events(deadline)  # the settles before that answer were published
                return infos
            if time.monotonic() > deadline:
                fail(f"no quiescence after {SETTLE_S}s: {reasons}")
            self.harness.wait_activity(mark, 0.5)

    def _restless(self, infos: list[AgentInfo]) -> list[str]:
        h = self.harness
        with h.cond:
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
            if info.state.has_turn and not (not gate_open and (key in holding or slots_full)):
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
        - the input rule: every completion is received exactly once, by a
          turn that completed (or still runs, holding it) or by the host, and
          only by a turn of an ancestor; a turn that failed or was
          interrupted gave its inputs (messages and completions, at its start
          and from its waits) back, and the agent's next turn received them;
          unreceived completions per agent <= the backlog cap;
        - an idle (completed/failed) agent that wakes on completions has no
          completion waiting for it, unless its own backlog holds its wake,
          the completion was already waiting when the store was reopened, or
          its failed turn gave it back (that wakes nothing on its own).
        """
        STATS["steps"] += 1
        self.sync()
        live = self.live()
        STATS["live_agents_seen"] += len(live)
        STATS["busy_agents_seen"] += sum(a.busy for a in live)
        self._check_tree()
        self._check_logs()
        self._check_completions()
        self._check_inputs_handed_on()

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
            got, error = self.call("get", functools.partial(self.rt.get, agent.info.path))
            if error is not None or got.id != agent.id:
                fail(f"get({agent.info.path!r}) gave {got or error}, not {agent.id}")

    def _check_logs(self) -> None:
        h = self.harness
        delivered = self.received_messages()
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
        with self.harness.cond:
            refused = self.harness.host_full
        if refused and len(unread) < LIMITS.mailbox_capacity:
            fail(
                f"{refused} sends to the host were refused MailboxFull, yet its inbox holds "
                f"only {len(unread)} unread (capacity {LIMITS.mailbox_capacity})"
            )

    def _check_completions(self) -> None:
        h = self.harness
        counts = self.received_completions()
        twice = [cid for cid, n in counts.items() if n > 1]
        if twice:
            fail(f"completions received by more than one turn that completed (or runs): {twice}")
        with h.cond:
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
            fresh = [c for c in pending_for.get(agent.id, []) if c not in self._gave_back(agent)]
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

    def _gave_back(self, agent: Agent) -> set[str]:
        """The completions a failed agent's last turn gave back (they wake nothing alone)."""
        log = self.harness.turns.get((agent.id, agent.info.generation))
        if agent.info.state is not AgentState.FAILED or log is None:
            return set()
        return set(_inputs(log))

    def _check_inputs_handed_on(self) -> None:
        """A turn that did not keep its inputs gave them back: the agent's next turn got them."""
        with self.harness.cond:
            logs = sorted(self.harness.turns.values(), key=lambda t: (t.agent_id, t.generation))
        for before, after in itertools.pairwise(logs):
            if before.agent_id != after.agent_id or self.keeps_inputs(before):
                continue
            inputs = _inputs(before) + before.waited
            if not inputs:
                continue
            handed = {i for _, i in after.messages}
            missing = [i for i in inputs if i not in handed]
            if missing:
                fail(
                    f"turn {before.generation} of {before.agent_id} ended without completing, "
                    f"but its next turn ({after.generation}) was not handed {missing} back"
                )
            STATS["inputs_handed_on"] += 1


def _inputs(log: TurnLog) -> list[str]:
    """What a turn received: its starting messages and completions, and what its waits took."""
    return [i for _, i in log.messages] + log.taken
