"""Stateful property test: a hypothesis state machine drives a live runtime and checks its promises.

The machine opens a runtime with small caps on a real LMDB store and runs
deterministic, fast runners: ``echo`` (settles at once, or fails on purpose),
``gated`` (blocks on a gate the machine opens and closes, honouring
``turn.cancelled``), and coordinators ``boss`` -> ``lead`` -> ``mid`` that spawn
children with ``turn.spawn``, ``turn.run`` and ``turn.run_many``. Every runner
logs the turn it saw (its messages) and what it returned, so the model knows
which messages and completions each turn received.

Rules: spawn at the top or under any agent (valid and invalid names, permitted,
not permitted and unknown profiles, oversized tasks), send (duplicate and
over-long dedup keys, oversized content, full mailboxes), follow-up, resume,
interrupt, close, close-tree, host waits with tiny timeouts, opening and
closing the gate, and reopen (close the runtime, read the store, open it again).

Each call is checked against the model: it succeeds exactly when no rule
forbids it, and otherwise raises one of the typed errors the model allows
(never anything but a ``RetinueError``). After every step the machine waits
for quiescence (event-driven, no sleeps) and checks the invariants listed on
:meth:`RetinueMachine.settled_invariants` and :meth:`RetinueMachine.reopen`.

``run(max_examples, steps, seed)`` is the long search ``python -m stress`` can
call; ``tests/runtime/test_statemachine.py`` runs the same machine with CI
settings.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import hypothesis
import msgspec
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    get_state_machine_test,
    initialize,
    invariant,
    precondition,
    rule,
)

from retinue import AgentInfo, Limits, Profile, Runtime, Turn
from retinue.errors import (
    ActiveDescendants,
    AgentBusy,
    AgentClosed,
    AgentLimitExceeded,
    AgentStateError,
    CompletionBacklogFull,
    DedupKeyTooLong,
    DepthLimitExceeded,
    DuplicateAgentPath,
    FanoutLimitExceeded,
    InvalidAgentPath,
    MailboxFull,
    MessageTooLarge,
    NotPermitted,
    RetinueError,
    UnknownAgent,
    UnknownProfile,
    WaitTimeout,
)
from retinue.persistence.store import Store
from retinue.protocol.messages import (
    AgentState,
    Completion,
    CompletionStatus,
    Event,
    Message,
    TurnSettled,
)
from retinue.protocol.records import AgentRecord, CompletionRecord, MessageRecord

__all__ = ["LIMITS", "Harness", "RetinueMachine", "ci_settings", "run"]

LIMITS = Limits(
    depth_cap=3,
    fanout_cap=3,
    max_tree_agents=8,
    max_agents=20,
    max_active_turns=2,
    mailbox_capacity=3,
    pending_completions_per_agent=3,
    message_max_bytes=64,
    dedup_key_max_length=8,
    wait_default_s=5.0,
    compact_interval_s=3600.0,
)
RUN_TIMEOUT_S = 0.1  # how long a coordinator's turn.run / run_many waits for its children
SETTLE_S = 10.0  # quiescence must come within this; longer is a stuck agent
GATE_POLL_S = 0.005  # how often a gated runner looks at turn.cancelled
RUNNER_EXIT_S = 10.0  # runner threads must all end this soon after the runtime closes

BUSY = (AgentState.STARTING, AgentState.RUNNING)
SETTLED = (AgentState.COMPLETED, AgentState.FAILED, AgentState.INTERRUPTED)
HOST = "/root"

# The team: boss -> lead -> mid -> echo/gated is one edge deeper than depth_cap allows
# for a top-level boss, so the deepest spawns hit DepthLimitExceeded.
SUBAGENTS: dict[str, tuple[str, ...]] = {
    "boss": ("lead", "echo"),
    "lead": ("mid", "echo", "gated"),
    "mid": ("echo", "gated"),
    "echo": (),
    "gated": (),
}
WAKES = {"boss": True, "lead": True, "mid": False, "echo": True, "gated": True}
COORDINATORS = ("boss", "lead", "mid")
CHILD_TASK = {
    "boss": "echo",
    "lead": "spawn:mid",
    "mid": "spawn:echo",
    "echo": "tell",
    "gated": "hold",
}

MAX = LIMITS.message_max_bytes
KEY_MAX = LIMITS.dedup_key_max_length
TASKS = [
    "echo",
    "tell",
    "tell2",
    "fail",
    "bad",
    "spawn:echo",
    "spawn:echo:a",
    "spawn:gated",
    "spawn:mid",
    "spawn:lead",
    "spawn:ghost",
    "run:echo",
    "run:gated",
    "run:mid",
    "many",
    "many:gated",
    "many::wide",
    "x" * MAX,  # exactly at the bound: allowed
    "é" * (MAX // 2 + 1),  # few characters, too many bytes
]
CONTENTS = ["hi", "hi", "hello", "y" * MAX, "ü" * (MAX // 2 + 1), "z" * (MAX + 1)]
DEDUP_KEYS: list[str | None] = [None, None, "k1", "k2", "k3", "k" * KEY_MAX, "k" * (KEY_MAX + 1)]
VALID_NAMES = ["a", "b", "c"]
INVALID_NAMES = ["", "A", "a-b", "root", ".", "..", "a/b", "x" * 41, " a"]
PROFILES = ["boss", "lead", "mid", "echo", "gated", "ghost"]
NAMES = st.one_of(
    st.none(),
    st.none(),
    st.sampled_from(VALID_NAMES),
    st.sampled_from(VALID_NAMES),
    st.sampled_from(INVALID_NAMES),
)
REF_FORMS = ["live", "live", "busy", "busy", "id", "path", "relative", "unknown", "invalid"]
UNKNOWN_REF = "nobody"  # a valid name no agent ever gets
INVALID_REF = "/root/No-Such"
WAIT_TIMEOUTS = [0, 0.001, 0.01]
ON_PURPOSE = "failed on purpose"


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


def _seq(message: Message) -> int:
    """A message's arrival number (its id is ``<recipient id>:<seq>``)."""
    return int(message.id.rsplit(":", 1)[1])


def _valid_name(name: str) -> bool:
    return (
        0 < len(name) <= 40
        and name != "root"
        and all(ch in "abcdefghijklmnopqrstuvwxyz0123456789_" for ch in name)
    )


def _error_text(exc: BaseException) -> str:
    """A runner's exception as the runtime reports it: ``"Type: message"``."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class Violation(AssertionError):
    """An invariant or a call's contract did not hold."""


TRACE: list[str] = []  # the current example's calls, newest last
VIOLATIONS: list[str] = []  # every violation seen, with its example's trace


def fail(message: str) -> NoReturn:
    """Record and raise a :class:`Violation` (recorded even if hypothesis cannot replay it)."""
    VIOLATIONS.append(message + "\n  after: " + "\n         ".join(TRACE[-30:]))
    raise Violation(message)


# -- the runners and what they saw ------------------------------------------------------------


@dataclass
class TurnLog:
    """One turn as its runner saw it, and how the runner ended."""

    agent_id: str
    generation: int
    profile: str
    reason: str
    task: str
    messages: list[tuple[str, str]]  # (kind, id) in the order the turn got them
    taken: list[str] = field(default_factory=list)  # completions received via run/run_many
    outcome: tuple[str, str | None] | None = None  # ("output"|"error"|"nonstr", text)


class Harness:
    """The runners, their gate and their log; shared by every runtime one example opens.

    Every change (a runner entering or leaving, the gate, a published event)
    bumps :attr:`activity` and notifies, so the machine waits for quiescence
    on a condition rather than sleeping.
    """

    def __init__(self) -> None:
        """Create a harness with the gate open and an empty log."""
        self._cond = threading.Condition()
        self.activity = 0
        self.gate_open = True
        self.turns: dict[tuple[str, int], TurnLog] = {}
        self.in_flight: set[tuple[str, int]] = set()
        self.in_gate: set[tuple[str, int]] = set()
        self.problems: list[str] = []  # seen on runner or dispatcher threads
        self.agent_sent: dict[str, Message] = {}  # messages runners sent, by id
        self.agent_dedup: dict[tuple[str, str], Message] = {}  # (sender id, key) -> original
        self.settled_events: Counter[tuple[str, int]] = Counter()

    # -- activity --

    def _bump(self) -> None:
        self.activity += 1
        self._cond.notify_all()

    def mark(self) -> int:
        """Return the current activity count."""
        with self._cond:
            return self.activity

    def wait_activity(self, mark: int, timeout: float) -> None:
        """Block until something happened since ``mark`` (or ``timeout`` passed)."""
        with self._cond:
            self._cond.wait_for(lambda: self.activity != mark, timeout)

    def on_event(self, event: Event) -> None:
        """Event subscriber: count settled turns, wake the machine."""
        with self._cond:
            if isinstance(event, TurnSettled):
                key = (event.agent_id, event.generation)
                self.settled_events[key] += 1
                if self.settled_events[key] > 1:
                    self.problems.append(f"turn {key} settled twice (events)")
            self._bump()

    # -- the gate --

    def open_gate(self) -> None:
        """Let every gated turn return."""
        TRACE.append("open gate")
        with self._cond:
            self.gate_open = True
            self._bump()

    def close_gate(self) -> None:
        """Make gated turns block until the gate opens or they are cancelled."""
        TRACE.append("close gate")
        with self._cond:
            self.gate_open = False
            self._bump()

    # -- runners --

    def runner(self, profile: str) -> Callable[[Turn], str]:
        """Return the logging runner of ``profile``."""

        def body(turn: Turn, log: TurnLog) -> Any:
            if profile in COORDINATORS:
                return self._coordinate(turn, log)
            if profile == "gated":
                return self._gated(turn)
            return self._echo(turn)

        def run(turn: Turn) -> str:
            key = (turn.agent.id, turn.agent.generation)
            log = TurnLog(
                agent_id=key[0],
                generation=key[1],
                profile=profile,
                reason=turn.reason,
                task=turn.task,
                messages=[(m.kind, m.id) for m in turn.messages],
            )
            STATS[f"turns_{turn.reason}"] += 1
            with self._cond:
                if key in self.turns:
                    self.problems.append(f"turn {key} ran twice")
                self.turns[key] = log
                self.in_flight.add(key)
                self._bump()
            try:
                result = body(turn, log)
            except BaseException as exc:
                with self._cond:
                    log.outcome = ("error", _error_text(exc))
                    if not isinstance(exc, RetinueError) and str(exc) != ON_PURPOSE:
                        self.problems.append(
                            f"turn {key} of {turn.agent.path} raised {_error_text(exc)}"
                        )
                    self.in_flight.discard(key)
                    self._bump()
                raise
            with self._cond:
                log.outcome = ("output", result) if isinstance(result, str) else ("nonstr", None)
                self.in_flight.discard(key)
                self._bump()
            return result  # type: ignore[no-any-return]

        return run

    def _echo(self, turn: Turn) -> Any:
        if turn.task == "fail":
            raise ValueError(ON_PURPOSE)
        if turn.task == "bad":
            return 42  # not a string: the turn must fail
        if turn.task in ("tell", "tell2"):  # message the parent (the host is not an agent)
            self._tell(turn, "t" if turn.task == "tell" else None)
        return f"echo:{turn.task}:{len(turn.messages)}"

    def _tell(self, turn: Turn, key: str | None) -> None:
        me = turn.agent
        content = f"hello from {me.name}"
        try:
            message = turn.send(me.parent_path, content, dedup_key=key)
        except RetinueError:
            raise  # the turn fails with it
        except Exception as exc:
            with self._cond:
                self.problems.append(f"turn.send from {me.path} raised {_error_text(exc)}")
            raise
        with self._cond:
            original = None if key is None else self.agent_dedup.get((me.id, key))
            if original is not None:
                if message != original:
                    self.problems.append(
                        f"{me.path} re-sent dedup key {key!r}: got {message}, not {original}"
                    )
                return
            fields = (message.kind, message.sender, message.sender_id, message.recipient)
            if fields != ("message", me.path, me.id, me.parent_path) or message.content != content:
                self.problems.append(f"turn.send from {me.path} returned {message}")
            if message.id in self.agent_sent:
                self.problems.append(f"turn.send from {me.path} reused message id {message.id}")
            self.agent_sent[message.id] = message
            STATS["agent_messages"] += 1
            if key is not None:
                self.agent_dedup[(me.id, key)] = message

    def _gated(self, turn: Turn) -> str:
        key = (turn.agent.id, turn.agent.generation)
        with self._cond:
            self.in_gate.add(key)
            self._bump()
            while not self.gate_open and not turn.cancelled.is_set():
                self._cond.wait(GATE_POLL_S)
            self.in_gate.discard(key)
            self._bump()
        return f"gated:{turn.task}"

    def _coordinate(self, turn: Turn, log: TurnLog) -> str:
        if turn.reason == "wake":
            return f"woke:{len(turn.messages)}"
        verb, _, rest = turn.task.partition(":")
        profile, _, name = rest.partition(":")
        try:
            if verb == "spawn":
                info = turn.spawn(profile, CHILD_TASK.get(profile, "echo"), name=name or None)
                return f"spawned:{info.name}"
            if verb == "run":
                done = turn.run(profile, CHILD_TASK.get(profile, "echo"), timeout=RUN_TIMEOUT_S)
                with self._cond:
                    log.taken.append(done.id)
                return f"ran:{done.status}"
            if verb == "many":
                # One real wait per batch (the other entry is refused, or the batch is over
                # the fan-out cap): run_many that took one completion and then raised on the
                # next wait would hide what it took, and the model must know every receipt.
                batch = [(profile or "echo", "echo"), ("ghost", "x")]
                if name == "wide":
                    batch = [("echo", "echo")] * (LIMITS.fanout_cap + 1)
                results = turn.run_many(batch, timeout=RUN_TIMEOUT_S)
                with self._cond:
                    log.taken.extend(r.id for r in results if isinstance(r, Completion))
                return "many:" + ",".join(
                    str(r.status) if isinstance(r, Completion) else type(r).__name__
                    for r in results
                )
        except RetinueError:
            raise  # the turn fails with it, which the model checks
        except Exception as exc:
            with self._cond:
                self.problems.append(
                    f"turn {turn.task!r} of {turn.agent.path}: coordinator call raised "
                    f"non-retinue {type(exc).__name__}: {exc}"
                )
            raise
        if verb == "fail":
            raise ValueError(ON_PURPOSE)
        return f"did:{turn.task}:{len(turn.messages)}"

    # -- reads for the machine --

    def delivered_messages(self) -> dict[str, list[str]]:
        """Return the mailbox messages each agent's turns received, in generation order."""
        with self._cond:
            logs = sorted(self.turns.values(), key=lambda t: (t.agent_id, t.generation))
        out: dict[str, list[str]] = {}
        for log in logs:
            out.setdefault(log.agent_id, []).extend(i for k, i in log.messages if k == "message")
        return out

    def delivered_completions(self) -> Counter[str]:
        """Return how often each completion id reached an agent's turn."""
        with self._cond:
            logs = list(self.turns.values())
        seen: Counter[str] = Counter()
        for log in logs:
            seen.update(i for k, i in log.messages if k == "completion")
            seen.update(log.taken)
        return seen

    def wait_runners_exit(self, timeout: float) -> None:
        """Block until no runner is inside its turn."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self.in_flight, timeout):
                fail(f"runners still inside their turns after close: {sorted(self.in_flight)}")


def team(harness: Harness) -> list[Profile]:
    """The profiles the machine's runtimes run."""
    return [
        Profile(
            name,
            subagents=list(SUBAGENTS[name]),
            runner=harness.runner(name),
            wake_on_completion=WAKES[name],
        )
        for name in SUBAGENTS
    ]


# -- the model --------------------------------------------------------------------------------


@dataclass
class Agent:
    """What the model knows of one agent: fixed facts and the last settled snapshot."""

    id: str
    parent_id: str | None
    info: AgentInfo
    host_received: int = 0
    sent: list[Message] = field(default_factory=list)  # host messages, in send order

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self.info.state is AgentState.CLOSED

    @property
    def busy(self) -> bool:
        """True while a turn is queued or running."""
        return self.info.state in BUSY


STATS: Counter[str] = Counter()


@dataclass
class Expect:
    """What a call may do: the errors it may raise (with why), and whether success is allowed."""

    errors: list[tuple[type[RetinueError], str]] = field(default_factory=list)

    def add(self, kind: type[RetinueError], why: str) -> None:
        """Allow (and, unless more is allowed, demand) ``kind``."""
        self.errors.append((kind, why))


class RetinueMachine(RuleBasedStateMachine):
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
        self.dormant: dict[str, str | None] = {}  # pending at the last reopen -> recipient
        self.rt = self._open()
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

    def delivered(self) -> set[str]:
        """Return every completion id its recipient has received."""
        return set(self.harness.delivered_completions()) | self.host_delivered

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
        with self.harness._cond:
            told = [m for m in self.harness.agent_sent.values() if m.recipient_id == agent.id]
        return sorted([*agent.sent, *told], key=_seq)

    def unread(self, agent: Agent) -> list[Message]:
        """Return the messages the agent's turns have not received."""
        got = set(self.harness.delivered_messages().get(agent.id, []))
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

    # -- rules: spawning --

    def _spawn_expect(
        self, parent: Agent | None, profile: str, task: str, name: str | None, expect: Expect
    ) -> None:
        if profile not in SUBAGENTS:
            expect.add(UnknownProfile, f"no profile {profile!r}")
        if _nbytes(task) > MAX:
            expect.add(MessageTooLarge, f"task of {_nbytes(task)} bytes")
        if name is not None and not _valid_name(name):
            expect.add(InvalidAgentPath, f"bad name {name!r}")
        if parent is not None:
            if parent.closed:
                expect.add(AgentClosed, f"parent {parent.info.path} is closed")
            if profile in SUBAGENTS and profile not in SUBAGENTS[parent.info.profile]:
                expect.add(NotPermitted, f"{parent.info.profile} may not spawn {profile}")
            if parent.info.depth + 1 > LIMITS.depth_cap:
                expect.add(DepthLimitExceeded, f"depth {parent.info.depth + 1}")
            if len(self.children(parent)) >= LIMITS.fanout_cap:
                expect.add(FanoutLimitExceeded, f"{parent.info.path} has full fan-out")
            in_tree = len(self.subtree(self.top(parent)))
            if in_tree >= LIMITS.max_tree_agents:
                expect.add(AgentLimitExceeded, f"tree of {self.top(parent).info.path} is full")
        parent_path = HOST if parent is None else parent.info.path
        if name is not None and _valid_name(name) and self.live_at(f"{parent_path}/{name}"):
            expect.add(DuplicateAgentPath, f"{parent_path}/{name} is live")
        if len(self.live()) >= LIMITS.max_agents:
            expect.add(AgentLimitExceeded, "max_agents live")

    def _spawned(self, info: AgentInfo, parent: Agent | None, profile: str, task: str) -> None:
        parent_path = HOST if parent is None else parent.info.path
        depth = 1 if parent is None else parent.info.depth + 1
        got = (info.parent_path, info.depth, info.profile, info.generation, info.task)
        if got != (parent_path, depth, profile, 1, task) or info.state not in BUSY:
            fail(f"spawn returned {info}; expected a starting agent under {parent_path}")
        if info.path != f"{parent_path}/{info.name}" or info.id in self.agents:
            fail(f"spawn returned a bad path or a reused id: {info}")
        self.agents[info.id] = Agent(
            id=info.id, parent_id=None if parent is None else parent.id, info=info
        )

    @initialize(profile=st.sampled_from(["boss", "lead", "mid"]), task=st.sampled_from(TASKS))
    def first_agent(self, profile: str, task: str) -> None:
        """Start every example with one top-level coordinator."""
        self._spawn_top(profile, task, None, False)

    @rule(
        profile=st.sampled_from(PROFILES),
        task=st.sampled_from(TASKS),
        name=NAMES,
        explicit_root=st.booleans(),
        repeat=st.integers(1, 3),
    )
    def spawn_top(
        self, profile: str, task: str, name: str | None, explicit_root: bool, repeat: int
    ) -> None:
        """The host spawns top-level agents, one after the other."""
        for n in range(repeat):
            if n:
                self.sync()
            self._spawn_top(profile, task, name, explicit_root)

    def _spawn_top(self, profile: str, task: str, name: str | None, explicit_root: bool) -> None:
        expect = Expect()
        self._spawn_expect(None, profile, task, name, expect)
        kwargs: dict[str, Any] = {"name": name}
        if explicit_root:
            kwargs["parent"] = HOST
        info, error = self.call("spawn", lambda: self.rt.spawn(profile, task, **kwargs))
        if self.judge(f"spawn({profile!r}, {task!r}, name={name!r})", error, expect):
            self._spawned(info, None, profile, task)

    @precondition(lambda self: self.live())
    @rule(
        index=st.integers(0, 63),
        form=st.sampled_from(REF_FORMS),
        profile=st.sampled_from(PROFILES),
        task=st.sampled_from(TASKS),
        name=NAMES,
        repeat=st.integers(1, 4),
        obey=st.booleans(),
    )
    def spawn_under(
        self,
        index: int,
        form: str,
        profile: str,
        task: str,
        name: str | None,
        repeat: int,
        obey: bool,
    ) -> None:
        """The host spawns agents, one after the other, under a live, closed or missing agent.

        With ``obey`` the profile is one the parent may spawn (when it may spawn any).
        """
        for n in range(repeat):
            if n:
                self.sync()
            coordinators = [a for a in self.live() if a.info.profile in COORDINATORS]
            if obey and coordinators:  # a coordinator parent and a profile it may spawn
                parent = coordinators[-1 - index % len(coordinators)]
                allowed = SUBAGENTS[parent.info.profile]
                profile = allowed[(PROFILES.index(profile) + n) % len(allowed)]
                self._spawn_under(-1 - self.live().index(parent), "live", profile, task, name)
            else:
                self._spawn_under(index, form, profile, task, name)

    def _spawn_under(
        self, index: int, form: str, profile: str, task: str, name: str | None
    ) -> None:
        ref, parent, expect = self.ref(index, form)
        if parent is not None:
            self._spawn_expect(parent, profile, task, name, expect)
        op = f"spawn({profile!r}, {task!r}, name={name!r}, parent={ref!r})"
        info, error = self.call(
            "spawn", lambda: self.rt.spawn(profile, task, name=name, parent=ref)
        )
        if self.judge(op, error, expect):
            self._spawned(info, parent, profile, task)

    # -- rules: mailboxes --

    @precondition(lambda self: self.live())
    @rule(
        index=st.integers(0, 63),
        form=st.sampled_from(REF_FORMS),
        content=st.sampled_from(CONTENTS),
        key=st.sampled_from(DEDUP_KEYS),
        repeat=st.integers(1, 4),
    )
    def send(self, index: int, form: str, content: str, key: str | None, repeat: int) -> None:
        """The host messages an agent (repeatedly), sometimes with a used or over-long dedup key."""
        for n in range(repeat):
            if n:
                self.sync()
            self._send(index, form, content, key if n == 0 else None)

    def _send(self, index: int, form: str, content: str, key: str | None) -> None:
        ref, target, expect = self.ref(index, form)
        original = None if key is None else self.dedup.get(key)
        if target is not None:
            if target.closed:
                expect.add(AgentClosed, f"{target.info.path} is closed")
            if _nbytes(content) > MAX:
                expect.add(MessageTooLarge, f"content of {_nbytes(content)} bytes")
            if key is not None and len(key) > KEY_MAX:
                expect.add(DedupKeyTooLong, f"key of {len(key)} characters")
            if original is None and len(self.unread(target)) >= LIMITS.mailbox_capacity:
                expect.add(MailboxFull, f"{target.info.path} has a full mailbox")
        op = f"send({ref!r}, {content[:8]!r}..., dedup_key={key!r})"
        message, error = self.call("send", lambda: self.rt.send(ref, content, dedup_key=key))
        if original is not None and error is None:
            if message != original:
                fail(f"{op} with a used dedup key returned {message}, not the original {original}")
            STATS["dedup_hits"] += 1
            return
        if not self.judge(op, error, expect):
            return
        assert target is not None
        if not (
            message.kind == "message"
            and message.recipient_id == target.id
            and message.content == content
            and message.sender == HOST
            and message.dedup_key == key
        ):
            fail(f"{op} returned {message}")
        every = {m.id for a in self.agents.values() for m in self.inbox(a)}
        if message.id in every:
            fail(f"{op} returned the id of another message: {message.id}")
        target.sent.append(message)
        if key is not None:
            self.dedup[key] = message
        if len(self.unread(target)) > LIMITS.mailbox_capacity:
            fail(f"{target.info.path} holds more than mailbox_capacity unread messages")

    # -- rules: turns --

    def _turn_expect(self, agent: Agent, expect: Expect) -> None:
        if agent.closed:
            expect.add(AgentClosed, f"{agent.info.path} is closed")
        if agent.busy:
            expect.add(AgentBusy, f"{agent.info.path} is {agent.info.state}")
        backlog = len(self.undelivered(agent))
        if backlog >= LIMITS.pending_completions_per_agent:
            expect.add(CompletionBacklogFull, f"{agent.info.path} has {backlog} unreceived")

    def _queued(self, op: str, info: AgentInfo, agent: Agent, task: str) -> None:
        before = agent.info
        if (info.id, info.generation, info.task) != (
            before.id,
            before.generation + 1,
            task,
        ) or info.state not in BUSY:
            fail(f"{op} returned {info}; expected generation {before.generation + 1} queued")

    @precondition(lambda self: self.live())
    @rule(
        index=st.integers(0, 63),
        form=st.sampled_from(REF_FORMS),
        task=st.sampled_from(TASKS),
        repeat=st.integers(1, 4),
    )
    def follow_up(self, index: int, form: str, task: str, repeat: int) -> None:
        """The host gives an agent follow-up turns, one after the other."""
        for n in range(repeat):
            if n:
                self.sync()
            self._follow_up(index, form, task)

    def _follow_up(self, index: int, form: str, task: str) -> None:
        ref, agent, expect = self.ref(index, form)
        if agent is not None:
            self._turn_expect(agent, expect)
            if _nbytes(task) > MAX:
                expect.add(MessageTooLarge, f"task of {_nbytes(task)} bytes")
        op = f"follow_up({ref!r}, {task!r})"
        info, error = self.call("follow_up", lambda: self.rt.follow_up(ref, task))
        if self.judge(op, error, expect):
            assert agent is not None
            self._queued(op, info, agent, task)

    @precondition(lambda self: self.live())
    @rule(index=st.integers(0, 63), form=st.sampled_from(REF_FORMS))
    def resume(self, index: int, form: str) -> None:
        """The host re-runs an interrupted agent's task."""
        ref, agent, expect = self.ref(index, form)
        if agent is not None:
            self._turn_expect(agent, expect)
            if agent.info.state is not AgentState.INTERRUPTED and not agent.closed:
                expect.add(AgentStateError, f"{agent.info.path} is {agent.info.state}")
        op = f"resume({ref!r})"
        info, error = self.call("resume", lambda: self.rt.resume(ref))
        if self.judge(op, error, expect):
            assert agent is not None
            self._queued(op, info, agent, agent.info.task)

    @precondition(lambda self: self.live())
    @rule(index=st.integers(0, 63), form=st.sampled_from(REF_FORMS))
    def interrupt(self, index: int, form: str) -> None:
        """The host interrupts an agent (queued, running, idle or closed)."""
        ref, agent, expect = self.ref(index, form)
        if agent is not None and agent.closed:
            expect.add(AgentClosed, f"{agent.info.path} is closed")
        op = f"interrupt({ref!r})"
        info, error = self.call("interrupt", lambda: self.rt.interrupt(ref))
        if not self.judge(op, error, expect):
            return
        assert agent is not None
        before = agent.info
        state = AgentState.INTERRUPTED if agent.busy else before.state
        if agent.busy:
            STATS[f"interrupted_{before.state}"] += 1
        if (info.id, info.generation, info.state) != (before.id, before.generation, state):
            fail(f"{op} returned {info}; before it was {before.state} at {before.generation}")
        if agent.busy and (info.output, info.error) != (None, None):
            fail(f"{op}: an interrupted turn kept an output: {info}")

    @precondition(lambda self: self.live())
    @rule(index=st.integers(0, 63), form=st.sampled_from(REF_FORMS))
    def close(self, index: int, form: str) -> None:
        """The host closes an agent."""
        ref, agent, expect = self.ref(index, form)
        if agent is not None:
            if agent.closed:
                expect.add(AgentClosed, f"{agent.info.path} is closed")
            elif self.children(agent):
                expect.add(ActiveDescendants, f"{agent.info.path} has live children")
        op = f"close({ref!r})"
        info, error = self.call("close", lambda: self.rt.close(ref))
        if self.judge(op, error, expect):
            assert agent is not None
            if agent.busy:
                STATS["closed_busy"] += 1
            if (info.id, info.state, info.generation) != (
                agent.id,
                AgentState.CLOSED,
                agent.info.generation,
            ):
                fail(f"{op} returned {info}")

    @precondition(lambda self: self.live())
    @rule(index=st.integers(0, 63), form=st.sampled_from(REF_FORMS))
    def close_tree(self, index: int, form: str) -> None:
        """The host closes a whole subtree."""
        ref, agent, expect = self.ref(index, form)
        if agent is not None and agent.closed:
            expect.add(AgentClosed, f"{agent.info.path} is closed")
        subtree = [] if agent is None or agent.closed else self.subtree(agent)
        op = f"close_tree({ref!r})"
        infos, error = self.call("close_tree", lambda: self.rt.close_tree(ref))
        if not self.judge(op, error, expect):
            return
        order = [i.id for i in infos]
        if sorted(order) != sorted(a.id for a in subtree) or len(set(order)) != len(order):
            fail(f"{op} closed {order}; the live subtree is {[a.id for a in subtree]}")
        if any(i.state is not AgentState.CLOSED for i in infos):
            fail(f"{op} returned agents that are not closed: {infos}")
        position = {agent_id: n for n, agent_id in enumerate(order)}
        for member in subtree:
            if member.parent_id in position and position[member.parent_id] < position[member.id]:
                fail(f"{op} closed a parent before its child {member.info.path}")

    # -- rules: waiting --

    @precondition(lambda self: self.live())
    @rule(
        index=st.integers(0, 63),
        form=st.sampled_from(REF_FORMS),
        timeout=st.sampled_from(WAIT_TIMEOUTS),
        repeat=st.integers(1, 4),
    )
    def wait(self, index: int, form: str, timeout: float, repeat: int) -> None:
        """The host waits (with a tiny timeout) for an agent's next unreceived completions."""
        for n in range(repeat):
            if n:
                self.sync()
            if not self._wait_once(index, form, timeout):
                return

    def _wait_once(self, index: int, form: str, timeout: float) -> bool:
        ref, agent, expect = self.ref(index, form)
        due: int | None = None
        if agent is not None:
            due = agent.host_received + 1
            if due not in self.completed_generations(agent):
                due = None
                if agent.closed:
                    expect.add(AgentClosed, f"{agent.info.path} is closed with nothing left")
                else:
                    expect.add(WaitTimeout, f"{agent.info.path} has nothing new")
        op = f"wait({ref!r}, timeout={timeout})"
        done, error = self.call("wait", lambda: self.rt.wait(ref, timeout=timeout))
        if not self.judge(op, error, expect):
            return False
        assert agent is not None and due is not None
        expected_id = f"{agent.id}:{due}"
        if (done.id, done.agent_id, done.generation) != (expected_id, agent.id, due):
            fail(f"{op} returned {done.id}; the oldest unreceived is {expected_id}")
        self.check_completion(done, op)
        agent.host_received = due
        if self.heir(agent) is None:
            self.host_delivered.add(done.id)
        return True

    def check_completion(self, done: Completion, where: str) -> None:
        """A completion must match what its runner returned (or be an interrupt)."""
        log = self.harness.turns.get((done.agent_id, done.generation))
        if done.status is CompletionStatus.INTERRUPTED:
            if (done.output, done.error) != (None, None):
                fail(f"{where}: interrupted completion {done.id} carries a result: {done}")
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

    def check_store(
        self,
        expected: dict[str, AgentInfo],
        records: dict[str, AgentRecord],
        completions: dict[tuple[str, int], CompletionRecord],
        messages: dict[str, MessageRecord],
    ) -> None:
        """Compare the closed store with the model (see :meth:`reopen`)."""
        if set(records) != set(expected):
            fail(f"store agents differ from the runtime's: {set(records) ^ set(expected)}")
        delivered = self.delivered()
        read = {i for ids in self.harness.delivered_messages().values() for i in ids}
        for agent_id, record in records.items():
            agent, info = self.agents[agent_id], expected[agent_id]
            got = (record.path, record.parent_id, record.state, record.generation, record.output)
            want = (info.path, agent.parent_id, info.state, info.generation, info.output)
            if got != want or record.error != info.error or record.task != info.task:
                fail(f"store has {record}; expected {info} (parent {agent.parent_id})")
            if record.host_received != agent.host_received:
                fail(
                    f"{record.path}: store says the host received generation "
                    f"{record.host_received}, the host received {agent.host_received}"
                )
            gens = sorted(g for a, g in completions if a == agent_id)
            if gens != list(range(1, record.generation + 1)):
                fail(f"{record.path}: completions {gens} for generation {record.generation}")
            for gen in gens:
                stored = completions[(agent_id, gen)]
                done = stored.completion
                if done.id != f"{agent_id}:{gen}" or done.agent_id != agent_id:
                    fail(f"completion stored under {agent_id}:{gen} is {done}")
                if stored.delivered != (done.id in delivered):
                    fail(
                        f"completion {done.id} delivered={stored.delivered} in the store, "
                        f"but the model says {done.id in delivered}"
                    )
                if not stored.delivered and stored.recipient_id != self.heir(agent):
                    fail(
                        f"pending completion {done.id} is routed to {stored.recipient_id}, "
                        f"not the nearest live ancestor {self.heir(agent)}"
                    )
                self.check_completion(done, "store")
            if gens and record.state in SETTLED:
                last = completions[(agent_id, gens[-1])].completion
                if str(last.status) != str(record.state):
                    fail(f"{record.path} is {record.state} but its last completion is {last}")
        sent = {m.id: m for a in self.agents.values() for m in self.inbox(a)}
        if set(messages) != set(sent):
            fail(f"store messages differ from the sent ones: {set(messages) ^ set(sent)}")
        for message_id, stored_message in messages.items():
            if stored_message.message != sent[message_id]:
                fail(f"message {message_id} changed in the store: {stored_message.message}")
            if stored_message.read != (message_id in read):
                fail(f"message {message_id} read={stored_message.read}; turns say otherwise")

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
                if (info.output, info.error) != (None, None):
                    fail(f"interrupted {info.path} shows a result: {info}")
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
            if got != inbox[: len(got)]:
                fail(f"{info.path}: turns received messages {got}, but it was sent {inbox}")
            if len(inbox) - len(got) > LIMITS.mailbox_capacity:
                fail(f"{info.path} holds more than mailbox_capacity unread messages")

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
            if len(backlog) > LIMITS.pending_completions_per_agent:
                fail(f"{agent.info.path} has {len(backlog)} completions unreceived")
            heir = self.heir(agent)
            for cid in backlog:
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

    def _below(self, agent: Agent, ancestor: Agent) -> bool:
        parent_id = agent.parent_id
        while parent_id is not None:
            if parent_id == ancestor.id:
                return True
            parent_id = self.agents[parent_id].parent_id
        return False


def _identity(info: AgentInfo) -> tuple[object, ...]:
    return (info.id, info.name, info.path, info.profile, info.parent_path, info.depth)


def _fixed(info: AgentInfo) -> tuple[object, ...]:
    return (
        *_identity(info),
        info.state,
        info.generation,
        info.task,
        info.output,
        info.error,
        info.created_at,
    )


def read_store(
    path: Path,
) -> tuple[
    dict[str, AgentRecord], dict[tuple[str, int], CompletionRecord], dict[str, MessageRecord]
]:
    """Read every agent, completion and message of a store no runtime holds."""
    store = Store(path, readonly=True)
    try:
        snap = store.snapshot(["agents", "completions", "messages"])
    finally:
        store.close()
    agents = msgspec.msgpack.Decoder(AgentRecord)
    completions = msgspec.msgpack.Decoder(CompletionRecord)
    messages = msgspec.msgpack.Decoder(MessageRecord)
    records = {r.id: r for r in (agents.decode(v) for _, v in snap.records["agents"])}
    done: dict[tuple[str, int], CompletionRecord] = {}
    for key, value in snap.records["completions"]:
        record = completions.decode(value)
        slot = (record.completion.agent_id, record.completion.generation)
        if slot in done:
            fail(f"two stored completions for {slot} (key {key!r})")
        done[slot] = record
    mail = {m.message.id: m for m in (messages.decode(v) for _, v in snap.records["messages"])}
    return records, done, mail


# -- entry points -------------------------------------------------------------------------------


def ci_settings(max_examples: int = 25, steps: int = 30) -> settings:
    """Settings for a short, derandomized run (what the test suite uses).

    No shrinking: a failure is reported at once, as the full program, well
    inside the suite's 60 s watchdog; ``run()`` (``python -m stress``) shrinks.
    """
    return settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def _describe(exc: BaseException) -> list[str]:
    """Return the text of an exception, and of each one inside an exception group."""
    text = ["".join(traceback.format_exception_only(exc)).strip()]
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            text.extend(_describe(inner))
    return text


def run(
    max_examples: int = 200, steps: int = 50, seed: int = 1, *, durability: str = "full"
) -> dict[str, Any]:
    """Search with ``max_examples`` runs of up to ``steps`` steps from ``seed``; return a row.

    The row has the counts of examples, steps, reopens and typed errors the
    runtime raised, the seconds taken, and ``problems``: empty, or the
    falsifying program hypothesis printed and the violated invariant.
    """
    STATS.clear()
    VIOLATIONS.clear()
    RetinueMachine.durability = durability
    config = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    machine_test = get_state_machine_test(RetinueMachine, settings=config)  # type: ignore[no-untyped-call]
    test = hypothesis.seed(seed)(machine_test)
    t0 = time.perf_counter()
    problems: list[str] = []
    try:
        test()
    except Exception as exc:
        problems.extend(_describe(exc))
        problems.extend(f"violation seen: {v}" for v in dict.fromkeys(VIOLATIONS))
    finally:
        RetinueMachine.durability = "full"
    raised = {k.removeprefix("raised:"): v for k, v in sorted(STATS.items()) if k[:7] == "raised:"}
    covered = (
        "reopens",
        "spawned_by_runners",
        "turns_wake",
        "turns_resume",
        "interrupted_running",
        "interrupted_starting",
        "closed_busy",
        "dedup_hits",
        "agent_messages",
    )
    return {
        "examples": STATS["examples"],
        "steps": STATS["steps"],
        "coverage": {key: STATS[key] for key in covered},
        "errors_raised": raised,
        "problems": problems,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _main(argv: Iterable[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m stress.statemachine")
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--durability", choices=["full", "buffered"], default="full")
    args = parser.parse_args(None if argv is None else list(argv))
    row = run(args.examples, args.steps, args.seed, durability=args.durability)
    for key, value in row.items():
        print(f"  {key:<20}  {value}")
    return 1 if row["problems"] else 0


if __name__ == "__main__":
    import sys

    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(_main())
