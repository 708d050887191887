"""The model: what the machine knows of every agent, and how a call is judged against it.

:class:`Model` is mixed into the machine with the rules (``rules``, ``races``)
and the checks (``invariants``, ``storecheck``): lookups, expectations and
judging calls, and the machine's own steps every rule may take (``sync``,
``reopen``), which :class:`~stress.statemachine.machine.RetinueMachine`
provides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retinue import AgentInfo, Runtime
from retinue.errors import (
    AgentClosed,
    InternalError,
    InvalidAgentPath,
    RetinueError,
    UnknownAgent,
    WaitTimeout,
)
from retinue.protocol.messages import (
    AgentState,
    Completion,
    CompletionStatus,
    Message,
)
from stress.statemachine.data import (
    CUT_BY_CLOSE,
    HOST,
    INTERRUPT_ERRORS,
    INVALID_REF,
    UNKNOWN_REF,
    seq,
)
from stress.statemachine.harness import Harness, TurnLog
from stress.statemachine.leftovers import LEFT_BEHIND
from stress.statemachine.trace import STATS, TRACE, fail

NOTHING = (WaitTimeout, AgentClosed)


def nothing_left(outcome: object) -> bool:
    """True for the errors a host wait with nothing to receive may end with."""
    return isinstance(outcome, NOTHING) or type(outcome).__name__ == "NothingToWaitFor"


@dataclass
class Agent:
    """What the model knows of one agent: fixed facts and the last settled snapshot."""

    id: str
    parent_id: str | None
    info: AgentInfo
    host_got: set[int] = field(default_factory=set)  # generations the host's waits received
    gave_back: int = 0  # cancelled host waits that may have given a completion back
    sent: list[Message] = field(default_factory=list)  # host messages, in send order

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self.info.state is AgentState.CLOSED

    @property
    def busy(self) -> bool:
        """True while a turn is queued or running."""
        return self.info.state.has_turn


@dataclass
class Expect:
    """What a call may do: the errors it may raise (with why), and whether success is allowed."""

    errors: list[tuple[type[RetinueError], str]] = field(default_factory=list)

    def add(self, kind: type[RetinueError], why: str) -> None:
        """Allow (and, unless more is allowed, demand) ``kind``."""
        self.errors.append((kind, why))


class Model:
    """Model helpers mixed into the machine: lookups, expectations and judging calls."""

    agents: dict[str, Agent]
    harness: Harness
    dedup: dict[str, Message]  # host dedup key -> the original message
    host_delivered: set[str]
    host_ledger: Counter[str]
    host_inbox_ledger: Counter[str]  # every host-inbox message id the host's reads returned
    spawn_keys: dict[tuple[str | None, str], str]  # (parent id, idempotency key) -> agent id
    quiet: set[str]  # completions interrupt_tree made for a member: they wake nobody
    dormant: dict[str, str | None]  # completions pending at the last reopen -> recipient
    rt: Runtime
    dir: Path  # the example's folder (its store, and anything else a rule writes)
    store_path: Path  # the example's store (read while no runtime holds it)
    armed: str | None  # the command a fault is armed for during one host call (faults rules)
    rescued: set[tuple[str, int]]  # turns a failed command's rescue ended failed
    # Turns busy when a close's Shutdown command failed: the loop's close may cancel their
    # task before the runner ran (they end failed, NOT_BY_INTERRUPT, with no runner's log).
    cut_by_close: set[tuple[str, int]]

    # -- what the machine provides --

    def sync(self) -> None:
        """Wait for quiescence and update the model (the machine provides it)."""
        raise NotImplementedError

    def reopen(self) -> None:
        """Close the runtime, check the store and open it again (the machine provides it)."""
        raise NotImplementedError

    def reopen_closed(self, before: dict[str, AgentInfo]) -> None:
        """Check the closed store and open it again (the machine provides it)."""
        raise NotImplementedError

    def _parent_of(self, info: AgentInfo) -> str | None:
        """Return the id of the agent ``info`` was spawned under (the machine provides it)."""
        raise NotImplementedError

    def _open(self) -> Runtime:
        """Open the runtime on the example's store (the machine provides it)."""
        raise NotImplementedError

    @staticmethod
    def check_left_behind(where: str, *, full: bool = False) -> None:
        """Fail if ``where`` left a task or a call behind on the runtime's event loop: a
        turn started there and never reported (:mod:`~.leftovers`; ``full``: after a
        collection of every generation, not only the young ones)."""
        left = LEFT_BEHIND.take(full=full)
        if left:
            fail(f"{where} left work behind on the runtime's event loop: {left}")

    # -- lookups --

    def live(self) -> list[Agent]:
        """Return the live agents, oldest first."""
        return [a for a in self.agents.values() if not a.closed]

    def live_at(self, path: str) -> Agent | None:
        """Return the live agent holding ``path``."""
        for agent in self.agents.values():
            if not agent.closed and agent.info.path == path:
                return agent
        return None

    def children(self, agent: Agent) -> list[Agent]:
        """Return an agent's live children."""
        return [a for a in self.agents.values() if a.parent_id == agent.id and not a.closed]

    def subtree(self, agent: Agent) -> list[Agent]:
        """Return an agent's live subtree, itself included."""
        out = [agent]
        for child in self.children(agent):
            out.extend(self.subtree(child))
        return out

    def top(self, agent: Agent) -> Agent:
        """Return the top-level agent of an agent's tree."""
        while agent.parent_id is not None:
            agent = self.agents[agent.parent_id]
        return agent

    def heir(self, agent: Agent) -> str | None:
        """Return the nearest live ancestor's id (None: the host)."""
        parent_id = agent.parent_id
        while parent_id is not None:
            parent = self.agents[parent_id]
            if not parent.closed:
                return parent_id
            parent_id = parent.parent_id
        return None

    def completed_generations(self, agent: Agent) -> range:
        """Return the generations that must have a completion now."""
        last = agent.info.generation - (1 if agent.busy else 0)
        return range(1, last + 1)

    def host_due(self, agent: Agent) -> int | None:
        """Return the generation the host's next wait on ``agent`` must receive (None: none)."""
        left = set(self.completed_generations(agent)) - agent.host_got
        return min(left) if left else None

    def host_received(
        self, agent: Agent, done: Completion, where: str, *, routed: bool, oldest: bool = True
    ) -> None:
        """Book one completion a host wait returned; it must be new and the agent's oldest.

        ``routed``: the completion was routed to the host when it was received,
        so the receipt also delivers it. ``oldest=False``: any unreceived one
        will do (a cancelled wait racing it may have given an older one back).
        """
        due = self.host_due(agent)
        if done.agent_id == agent.id and done.generation in agent.host_got:
            fail(f"{where}: the host received {done.id} again (it was received before)")
        if not oldest and done.agent_id == agent.id:
            due = done.generation if done.generation in self.completed_generations(agent) else due
        if (done.agent_id, done.generation) != (agent.id, due):
            fail(f"{where} returned {done.id}; the oldest unreceived is {agent.id}:{due}")
        self.host_ledger[done.id] += 1
        if self.host_ledger[done.id] > 1:
            fail(f"{where}: the host received {done.id} {self.host_ledger[done.id]} times")
        self.check_completion(done, where)
        agent.host_got.add(done.generation)
        if routed:
            self.host_delivered.add(done.id)

    def keeps_inputs(self, log: TurnLog) -> bool:
        """Whether the turn of ``log`` kept its inputs: it completed, or it still runs.

        The input rule: any other turn (failed, interrupted, closed under)
        gave them back, so they count as received only once a turn that
        completes receives them (or the host does).
        """
        key = (log.agent_id, log.generation)
        if self.harness.outcomes.get(key) is CompletionStatus.COMPLETED:
            return True
        agent = self.agents.get(log.agent_id)
        return (
            agent is not None
            and agent.info.state is AgentState.RUNNING
            and agent.info.generation == log.generation
        )

    def received_completions(self) -> Counter[str]:
        """Return how often each completion id reached a turn that kept it."""
        return self.harness.delivered_completions(self.keeps_inputs)

    def received_messages(self) -> dict[str, list[str]]:
        """Return the messages each agent's turns that kept them received, in order."""
        return self.harness.delivered_messages(self.keeps_inputs)

    def delivered(self) -> set[str]:
        """Return every completion id its recipient has received (for good)."""
        return set(self.received_completions()) | self.host_delivered

    def undelivered(self, agent: Agent, delivered: set[str] | None = None) -> list[str]:
        """Return the agent's completion ids its recipient has not received."""
        seen = self.delivered() if delivered is None else delivered
        return [
            f"{agent.id}:{g}"
            for g in self.completed_generations(agent)
            if f"{agent.id}:{g}" not in seen
        ]

    def inbox(self, agent: Agent) -> list[Message]:
        """Return every message sent to the agent (by the host or agents), in arrival order."""
        with self.harness.cond:
            told = [m for m in self.harness.agent_sent.values() if m.recipient_id == agent.id]
        return sorted([*agent.sent, *told], key=seq)

    def host_inbox(self) -> list[Message]:
        """Return every message top-level agents sent to the host, in arrival order."""
        with self.harness.cond:
            told = [m for m in self.harness.agent_sent.values() if m.recipient == HOST]
        return sorted(told, key=seq)

    def host_unread(self) -> list[Message]:
        """Return the host-inbox messages no host read has returned, in arrival order."""
        return [m for m in self.host_inbox() if m.id not in self.host_inbox_ledger]

    def host_read(self, got: list[Message], where: str) -> None:
        """Book one host read: exactly the unread host messages, in order, each new."""
        want = self.host_unread()
        if [m.id for m in got] != [m.id for m in want] or got != want:
            fail(
                f"{where} returned {[m.id for m in got]}; the unread host messages are "
                f"{[m.id for m in want]}"
            )
        for message in got:
            self.host_inbox_ledger[message.id] += 1
        with self.harness.cond:
            self.harness.host_full = 0  # the inbox has room again
        STATS["host_inbox_read"] += len(got)

    def unread(self, agent: Agent) -> list[Message]:
        """Return the messages the agent's turns have not received."""
        got = set(self.received_messages().get(agent.id, []))
        return [m for m in self.inbox(agent) if m.id not in got]

    def pick(self, index: int, *, live_only: bool = False, busy: bool = False) -> Agent | None:
        """Return the (live, busy) agent at ``index`` (modulo), newest first; None with none.

        Newest first, because hypothesis favours index 0: closing the newest
        agent trims a leaf, where closing the oldest would empty the runtime.
        ``busy`` falls back to any live agent when none is busy.
        """
        agents = self.live() if live_only or busy else list(self.agents.values())
        if busy:
            agents = [a for a in agents if a.busy] or agents
        if not agents:
            return None
        return agents[-1 - index % len(agents)]

    def ref(self, index: int, form: str) -> tuple[str, Agent | None, Expect]:
        """Return a reference of ``form`` to a known agent, what it resolves to, and its errors."""
        expect = Expect()
        agent = self.pick(index, live_only=form == "live", busy=form == "busy")
        if form == "invalid":
            expect.add(InvalidAgentPath, f"{INVALID_REF} is not a valid path")
            return INVALID_REF, None, expect
        if form == "unknown" or agent is None:
            expect.add(UnknownAgent, f"no agent {UNKNOWN_REF}")
            return UNKNOWN_REF, None, expect
        if form in ("id", "live", "busy"):
            return agent.id, agent, expect
        path = agent.info.path
        text = path if form == "path" else path.removeprefix(HOST + "/")
        holder = self.live_at(path)
        if holder is None:
            expect.add(UnknownAgent, f"no live agent at {path}")
        return text, holder, expect

    # -- calling --

    def call(self, op: str, fn: Callable[[], Any]) -> tuple[Any, RetinueError | None]:
        """Run one host call; only a ``RetinueError`` may come out of it."""
        STATS[f"call:{op}"] += 1
        try:
            return fn(), None
        except RetinueError as exc:
            STATS[f"raised:{type(exc).__name__}"] += 1
            return None, exc
        except Exception as exc:
            fail(f"{op} raised {type(exc).__name__} (not a RetinueError): {exc!r}")

    def judge(self, op: str, error: RetinueError | None, expect: Expect) -> bool:
        """Check a call's outcome against what the model allows; return True on success."""
        TRACE.append(f"{op} -> {'ok' if error is None else type(error).__name__}")
        if isinstance(error, InternalError) and error.command == self.armed:
            return False  # the injected fault fired: the call changed nothing
        if error is None:
            if expect.errors:
                fail(f"{op} succeeded, but the model expected one of {expect.errors}")
            return True
        allowed = tuple(kind for kind, _ in expect.errors)
        if not allowed or not isinstance(error, allowed):
            fail(
                f"{op} raised {type(error).__name__}: {error}; "
                f"the model allowed {expect.errors or 'only success'}"
            )
        return False

    def check_completion(self, done: Completion, where: str) -> None:
        """A completion must match what its runner returned (or be an interrupt)."""
        log = self.harness.turns.get((done.agent_id, done.generation))
        if (done.agent_id, done.generation) in self.rescued:  # a failed command's rescue
            if done.status is not CompletionStatus.FAILED or not (done.error or "").startswith(
                "InternalError: "
            ):
                fail(f"{where}: turn {done.id} was rescued but its completion is {done}")
            return
        if done.status is CompletionStatus.INTERRUPTED:
            if done.output is not None or done.error not in INTERRUPT_ERRORS:
                fail(f"{where}: interrupted completion {done.id} has the wrong result: {done}")
            return
        if log is None and (done.agent_id, done.generation) in self.cut_by_close:
            if done.status is not CompletionStatus.FAILED or done.error != CUT_BY_CLOSE:
                fail(f"{where}: turn {done.id}, cut by a failed close unrun, ended {done}")
            return
        if log is None or log.outcome is None:
            fail(f"{where}: completion {done.id} is {done.status} but its runner never finished")
            return
        kind, text = log.outcome
        if done.status is CompletionStatus.COMPLETED:
            if (kind, text) != ("output", done.output) or done.error is not None:
                fail(
                    f"{where}: completion {done.id} is {done}; the runner ended with {kind} {text}"
                )
        elif kind == "nonstr":
            if done.output is not None or not (done.error or "").startswith("TypeError"):
                fail(f"{where}: a non-string result gave {done}")
        elif (kind, text) != ("error", done.error) or done.output is not None:
            fail(f"{where}: completion {done.id} is {done}; the runner ended with {kind} {text}")

    def _below(self, agent: Agent, ancestor: Agent) -> bool:
        parent_id = agent.parent_id
        while parent_id is not None:
            if parent_id == ancestor.id:
                return True
            parent_id = self.agents[parent_id].parent_id
        return False
