"""The machine's world: its limits and team, the logging runners and their gate.

Every runner logs the turn it saw (its messages) and what it returned, so the
model knows which messages and completions each turn received. ``fail``
records a violation with the example's trace.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from hypothesis import strategies as st

from retinue import Limits, Profile, Runtime, Turn
from retinue.errors import (
    BlockingCallInAsyncRunner,
    MailboxFull,
    NotPermitted,
    RetinueError,
    WaitTimeout,
)
from retinue.protocol.messages import (
    AgentState,
    Completion,
    Event,
    Message,
    TurnSettled,
)

LIMITS = Limits(
    depth_cap=4,
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
# The error of an interrupted turn: queued (never ran) or running when interrupted.
INTERRUPT_ERRORS = ("interrupted before execution", "interrupted")
HOST = "/root"

# The team: boss -> lead -> mid -> echo/gated is exactly depth_cap deep for a
# top-level boss (the graph check counts as the runtime does), so no spawn the
# graph allows hits DepthLimitExceeded; the model still predicts it for any.
# ``alead`` and ``aecho`` are async runners (``async def``) on the runtime's event loop: an
# async coordinator awaiting spawn_async / run_async / wait_async / run_many_async, and an
# async leaf (echo, tell, hold on the gate without blocking the loop).
SUBAGENTS: dict[str, tuple[str, ...]] = {
    "boss": ("lead", "echo", "alead"),
    "lead": ("mid", "echo", "gated", "aecho"),
    "mid": ("echo", "gated"),
    "alead": ("echo", "gated", "aecho"),
    "echo": (),
    "gated": (),
    "aecho": (),
}
WAKES = {
    "boss": True,
    "lead": True,
    "mid": False,
    "alead": True,
    "echo": True,
    "gated": True,
    "aecho": True,
}
COORDINATORS = ("boss", "lead", "mid", "alead")
ASYNC_PROFILES = ("alead", "aecho")
CHILD_TASK = {
    "boss": "echo",
    "lead": "spawn:mid",
    "mid": "spawn:echo",
    "alead": "await:aecho",
    "echo": "tell",
    "gated": "hold",
    "aecho": "tell",
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
    "tellhost",  # message the host's inbox (/root): only a top-level agent may
    "aspawn:aecho",  # the async coordinator's verbs (a sync one just echoes them)
    "arun:aecho",
    "arun:gated",
    "await:aecho",
    "await:echo",
    "await:gated",
    "amany",
    "amany:gated",
    "many2",  # a batch with two real waits (sync), and its async twin
    "abatch",
    "twice:echo",  # a retried spawn with the same idempotency key: the same child
    "blocking",  # a blocking turn call from an async runner is refused
    "itree:gated",  # the async coordinator interrupts a child's subtree, then waits on it
    "itree:aecho",
    "x" * MAX,  # exactly at the bound: allowed
    "é" * (MAX // 2 + 1),  # few characters, too many bytes
]
CONTENTS = ["hi", "hi", "hello", "y" * MAX, "ü" * (MAX // 2 + 1), "z" * (MAX + 1)]
DEDUP_KEYS: list[str | None] = [None, None, "k1", "k2", "k3", "k" * KEY_MAX, "k" * (KEY_MAX + 1)]
# Hostile input the runtime must refuse at the boundary (InvalidArgument), changing nothing:
# blank text, and lone surrogates (what surrogateescape makes of a stray byte).
HOSTILE_TASKS = ["   ", "scan \ud800"]
HOSTILE_CONTENTS = ["", "hi \ud800"]
HOSTILE_KEYS: list[str | None] = ["k\ud800"]
VALID_NAMES = ["a", "b", "c"]
INVALID_NAMES = ["", "A", "a-b", "root", ".", "..", "a/b", "x" * 41, " a"]
PROFILES = ["boss", "lead", "mid", "alead", "echo", "gated", "aecho", "ghost"]
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
SHUTDOWN = "shutdown"  # an echo task that closes the runtime from its runner (race rules only)
# The hand-over race (race rules only): an ``alead`` turn waits (wait_async) on an ``echo``
# child held on the latch; an ``aecho`` turn blocks the event loop, the child settles (its
# completion is handed to the parent's wait, whose task cannot resume), then the blocker
# closes the runtime from the loop.
HANDOVER_TASK = "await:echo:latch"
BATCH_TASK = "abatch::latch"  # the same race with a batch: run_many_async's second wait
LATCH = "latch"
LOOP_SHUTDOWN = "loopshut"
TURN_KEY = "c"  # the idempotency key the async coordinator's "twice" task uses
PARK_S = 10.0  # how long the race rules' blocked calls may take (a close answers them)


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _hostile(text: str) -> bool:
    """True for text the runtime refuses to store: blank, or with a lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return not text.strip()


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


STATS: Counter[str] = Counter()


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
    taken: list[str] = field(default_factory=list)  # completions received via run/wait
    waited: list[str] = field(default_factory=list)  # messages received via wait / wait_async
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
        self.runtime: Runtime | None = None  # the open runtime (a runner may close it)
        self.closed_by_runner = threading.Event()
        self.shutdown_armed = threading.Event()  # the next SHUTDOWN turn closes the runtime
        # Sends to the host's inbox refused with MailboxFull since the host last read it.
        self.host_full = 0
        # The hand-over race (see HANDOVER_TASK): armed by the rule, one turn each.
        self.handover_armed = threading.Event()
        self.latch = threading.Event()  # open (set) unless the hand-over rule holds it
        self.latch.set()
        self.handover_waiting = threading.Event()  # the parent is about to await its child
        self.handover_parent: tuple[str, int] | None = None
        self.loop_held = threading.Event()  # the blocker holds the event loop
        self.loop_free = threading.Event()  # the blocker may close the runtime

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

    def wait_settled_event(self, key: tuple[str, int], timeout: float) -> bool:
        """Wait for the ``TurnSettled`` event of turn ``key``; True if it came exactly once."""
        with self._cond:
            self._cond.wait_for(lambda: self.settled_events[key] > 0, timeout)
            return self.settled_events[key] == 1

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

    def runner(self, profile: str) -> Callable[[Turn], Any]:
        """Return the logging runner of ``profile`` (``async def`` for the async profiles)."""

        def body(turn: Turn, log: TurnLog) -> Any:
            if profile in COORDINATORS:
                return self._coordinate(turn, log)
            if profile == "gated":
                return self._gated(turn)
            return self._echo(turn)

        async def abody(turn: Turn, log: TurnLog) -> Any:
            if profile == "alead":
                return await self._acoordinate(turn, log)
            return await self._aecho(turn)

        def run(turn: Turn) -> str:
            log = self._enter(turn, profile)
            try:
                result = body(turn, log)
            except BaseException as exc:
                self._leave(turn, log, exc=exc)
                raise
            self._leave(turn, log, result=result)
            return result  # type: ignore[no-any-return]

        async def arun(turn: Turn) -> str:
            log = self._enter(turn, profile)
            try:
                result = await abody(turn, log)
            except BaseException as exc:
                self._leave(turn, log, exc=exc)
                raise
            self._leave(turn, log, result=result)
            return result  # type: ignore[no-any-return]

        return arun if profile in ASYNC_PROFILES else run

    def _enter(self, turn: Turn, profile: str) -> TurnLog:
        """Log a turn as its runner starts (what it was given)."""
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
        if profile in ASYNC_PROFILES:
            STATS["turns_async"] += 1
        with self._cond:
            if key in self.turns:
                self.problems.append(f"turn {key} ran twice")
            self.turns[key] = log
            self.in_flight.add(key)
            self._bump()
        return log

    def _leave(
        self, turn: Turn, log: TurnLog, *, result: Any = None, exc: BaseException | None = None
    ) -> None:
        """Log how a runner ended: its result, or the exception it raised."""
        key = (log.agent_id, log.generation)
        with self._cond:
            if exc is None:
                log.outcome = ("output", result) if isinstance(result, str) else ("nonstr", None)
            else:
                log.outcome = ("error", _error_text(exc))
                cancelled = isinstance(exc, asyncio.CancelledError) and turn.cancelled.is_set()
                if cancelled:
                    STATS["async_cancelled"] += 1
                elif not isinstance(exc, RetinueError) and str(exc) != ON_PURPOSE:
                    self.problems.append(
                        f"turn {key} of {turn.agent.path} raised {_error_text(exc)}"
                    )
            self.in_flight.discard(key)
            self._bump()

    def _echo(self, turn: Turn) -> Any:
        if turn.task == "fail":
            raise ValueError(ON_PURPOSE)
        if turn.task == "bad":
            return 42  # not a string: the turn must fail
        if turn.task == SHUTDOWN and self.runtime is not None and self.shutdown_armed.is_set():
            self.shutdown_armed.clear()  # once: a resumed or woken turn only echoes
            self.runtime.shutdown()  # close the runtime from this runner
            self.closed_by_runner.set()
            return "closed the runtime"
        if turn.task == LATCH:  # held until the hand-over rule lets it go (or cancelled)
            while not self.latch.wait(GATE_POLL_S) and not turn.cancelled.is_set():
                pass
        if turn.task in ("tell", "tell2", "tellhost"):  # message the parent (or the host)
            to = HOST if turn.task == "tellhost" else turn.agent.parent_path
            key = "t" if turn.task == "tell" else None
            try:
                message = turn.send(to, self._content(turn), dedup_key=key)
            except BaseException as exc:
                self._refused(turn, to, exc)
                raise
            self._told(turn, to, key, message)
        return f"echo:{turn.task}:{len(turn.messages)}"

    async def _aecho(self, turn: Turn) -> Any:
        if turn.task == "fail":
            raise ValueError(ON_PURPOSE)
        if turn.task == "bad":
            return 42
        if turn.task == "hold":  # the gate, awaited: the loop stays free
            return await self._agated(turn)
        if turn.task == LOOP_SHUTDOWN and self.runtime is not None and self.handover_armed.is_set():
            self.handover_armed.clear()
            self.loop_held.set()
            self.loop_free.wait(PARK_S)  # blocks the runtime's event loop on purpose
            self.runtime.shutdown()  # close the runtime from its own event loop
            self.closed_by_runner.set()
            return "closed the runtime from the loop"
        if turn.task in ("tell", "tell2", "tellhost"):
            to = HOST if turn.task == "tellhost" else turn.agent.parent_path
            key = "t" if turn.task == "tell" else None
            try:
                message = await turn.send_async(to, self._content(turn), dedup_key=key)
            except BaseException as exc:
                self._refused(turn, to, exc)
                raise
            self._told(turn, to, key, message)
        return f"aecho:{turn.task}:{len(turn.messages)}"

    @staticmethod
    def _content(turn: Turn) -> str:
        return f"hello from {turn.agent.name}"

    def _refused(self, turn: Turn, to: str, exc: BaseException) -> None:
        """A runner's send was refused: only as the mailbox rules say (the turn fails with it)."""
        me = turn.agent
        with self._cond:
            if not isinstance(exc, RetinueError):
                if not isinstance(exc, asyncio.CancelledError):
                    self.problems.append(f"send from {me.path} raised {_error_text(exc)}")
                return
            if to != HOST:
                return
            STATS[f"host_send_refused:{type(exc).__name__}"] += 1
            if isinstance(exc, NotPermitted) and me.depth == 1:
                self.problems.append(f"top-level {me.path} may not message the host: {exc}")
            if isinstance(exc, MailboxFull):
                self.host_full += 1
            if me.depth > 1 and not isinstance(exc, NotPermitted | MailboxFull):
                self.problems.append(f"{me.path} messaging the host got {exc!r}, not NotPermitted")

    def _told(self, turn: Turn, to: str, key: str | None, message: Message) -> None:
        """Book a message a runner sent (to its parent, or to the host's inbox)."""
        me = turn.agent
        with self._cond:
            if to == HOST and me.depth > 1:
                self.problems.append(f"{me.path} (depth {me.depth}) messaged the host: {message}")
            original = None if key is None else self.agent_dedup.get((me.id, key))
            if original is not None:
                if message != original:
                    self.problems.append(
                        f"{me.path} re-sent dedup key {key!r}: got {message}, not {original}"
                    )
                return
            fields = (message.kind, message.sender, message.sender_id, message.recipient)
            if fields != ("message", me.path, me.id, to) or message.content != self._content(turn):
                self.problems.append(f"turn.send from {me.path} returned {message}")
            if message.id in self.agent_sent:
                self.problems.append(f"turn.send from {me.path} reused message id {message.id}")
            self.agent_sent[message.id] = message
            STATS["agent_messages"] += 1
            if to == HOST:
                STATS["host_inbox_sent"] += 1
            if key is not None:
                self.agent_dedup[(me.id, key)] = message

    async def _agated(self, turn: Turn) -> str:
        key = (turn.agent.id, turn.agent.generation)
        with self._cond:
            self.in_gate.add(key)
            self._bump()
        try:
            while True:
                with self._cond:
                    if self.gate_open:
                        break
                await asyncio.sleep(GATE_POLL_S)  # cancelled here when interrupted
        finally:
            with self._cond:
                self.in_gate.discard(key)
                self._bump()
        return f"agated:{turn.task}"

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
            if verb == "many2":
                results = turn.run_many(
                    [("echo", "echo"), ("gated", "hold")], timeout=RUN_TIMEOUT_S
                )
                with self._cond:
                    log.taken.extend(r.id for r in results if isinstance(r, Completion))
                return "many2:" + ",".join(
                    str(r.status) if isinstance(r, Completion) else type(r).__name__
                    for r in results
                )
            if verb == "many":
                # One real wait per batch (the other entry is refused, or the batch is over
                # the fan-out cap): run_many that took one completion and then raised on the
                # next wait would hide what it took, and the model must know every receipt.
                # Two real waits ("many2"): a batch that ends in an error gives back what it
                # had received, so the runner sees the batch's completions all or none.
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

    async def _acoordinate(self, turn: Turn, log: TurnLog) -> str:
        """The async coordinator: every verb awaits the turn's ``*_async`` twins."""
        if turn.reason == "wake":
            return f"woke:{len(turn.messages)}"
        verb, _, rest = turn.task.partition(":")
        profile, _, arg = rest.partition(":")
        profile = profile or "aecho"
        try:
            if verb == "aspawn":
                info = await turn.spawn_async(profile, CHILD_TASK.get(profile, "echo"))
                return f"spawned:{info.name}"
            if verb == "arun":
                done = await turn.run_async(
                    profile, CHILD_TASK.get(profile, "echo"), timeout=RUN_TIMEOUT_S
                )
                with self._cond:
                    log.taken.append(done.id)
                return f"ran:{done.status}"
            if verb == "await":
                return await self._await_child(turn, log, profile, arg)
            if verb == "amany":  # one real wait per batch, as for the sync run_many
                batch = [(profile, "echo"), ("ghost", "x")]
                results = await turn.run_many_async(batch, timeout=RUN_TIMEOUT_S)
                with self._cond:
                    log.taken.extend(r.id for r in results if isinstance(r, Completion))
                return "amany:" + ",".join(
                    str(r.status) if isinstance(r, Completion) else type(r).__name__
                    for r in results
                )
            if verb == "abatch":  # two real waits; with the latch, the hand-over race's batch
                return await self._abatch(turn, log, arg)
            if verb == "twice":  # a retried spawn with the same key makes no second child
                first = await turn.spawn_async(profile, "echo", idempotency_key=TURN_KEY)
                again = await turn.spawn_async(profile, "echo", idempotency_key=TURN_KEY)
                STATS["idempotent_turn_spawns"] += 1
                if again.id != first.id:
                    with self._cond:
                        self.problems.append(
                            f"{turn.agent.path}: a retried spawn with key {TURN_KEY!r} made "
                            f"{again.path} besides {first.path}"
                        )
                return f"twice:{first.name}"
            if verb == "itree":  # interrupt a child's subtree from the turn, then wait on it
                child = await turn.spawn_async(profile, "hold")
                infos = await turn.interrupt_tree_async(child.id)
                STATS["turn_interrupt_tree"] += 1
                if [i.id for i in infos] != [child.id] or infos[0].state not in (
                    AgentState.INTERRUPTED,
                    AgentState.COMPLETED,
                ):
                    with self._cond:
                        self.problems.append(
                            f"{turn.agent.path}: interrupt_tree_async({child.path}) gave {infos}"
                        )
                event = await turn.wait_async(child.id, timeout=RUN_TIMEOUT_S)
                with self._cond:
                    if isinstance(event, Completion):
                        log.taken.append(event.id)
                    else:
                        log.waited.append(event.id)
                return f"itree:{event.kind if isinstance(event, Message) else event.status}"
            if verb == "blocking":
                try:
                    turn.spawn("echo", "echo")  # a blocking call on the event loop
                except BlockingCallInAsyncRunner:
                    STATS["blocking_refused"] += 1
                    return "refused"
                with self._cond:
                    self.problems.append(f"{turn.agent.path}: a blocking spawn ran on the loop")
                return "blocked the loop"
        except RetinueError:
            raise  # the turn fails with it, which the model checks
        except Exception as exc:
            with self._cond:
                self.problems.append(
                    f"turn {turn.task!r} of {turn.agent.path}: async coordinator call raised "
                    f"non-retinue {type(exc).__name__}: {exc}"
                )
            raise
        if verb == "fail":
            raise ValueError(ON_PURPOSE)
        return f"adid:{turn.task}:{len(turn.messages)}"

    async def _abatch(self, turn: Turn, log: TurnLog, arg: str) -> str:
        """``run_many_async`` of an ``echo`` and a second child (held on the latch, if armed)."""
        timeout = RUN_TIMEOUT_S
        if arg == LATCH:
            with self._cond:
                if self.handover_armed.is_set() and self.handover_parent is None:
                    self.handover_parent = (turn.agent.id, turn.agent.generation)
                    timeout = PARK_S
            self.handover_waiting.set()
        second = ("echo", LATCH) if arg == LATCH else ("aecho", "echo")
        results = await turn.run_many_async([("echo", "echo"), second], timeout=timeout)
        with self._cond:
            log.taken.extend(r.id for r in results if isinstance(r, Completion))
            STATS["async_batches"] += 1
        return "abatch:" + ",".join(
            str(r.status) if isinstance(r, Completion) else type(r).__name__ for r in results
        )

    async def _await_child(self, turn: Turn, log: TurnLog, profile: str, arg: str) -> str:
        """Spawn a child, then ``wait_async`` on it: its messages, then its completion."""
        timeout = RUN_TIMEOUT_S
        task = CHILD_TASK.get(profile, "echo")
        armed = False
        if arg == LATCH:
            task = LATCH
            with self._cond:
                if self.handover_armed.is_set() and self.handover_parent is None:
                    armed = True
                    self.handover_parent = (turn.agent.id, turn.agent.generation)
                    timeout = PARK_S
        child = await turn.spawn_async(profile, task)
        for _ in range(3):
            if armed:  # the wait is submitted in this same loop step, before the blocker runs
                self.handover_waiting.set()
            try:
                event = await turn.wait_async(child.id, timeout=timeout)
            except WaitTimeout:
                return "await:timeout"
            with self._cond:
                if isinstance(event, Completion):
                    log.taken.append(event.id)
                    STATS["async_wait_completions"] += 1
                    return f"await:{event.status}"
                log.waited.append(event.id)
                STATS["async_wait_messages"] += 1
        return "await:messages"

    # -- reads for the machine --

    def delivered_messages(self) -> dict[str, list[str]]:
        """Return the mailbox messages each agent's turns received, in generation order."""
        with self._cond:
            logs = sorted(self.turns.values(), key=lambda t: (t.agent_id, t.generation))
        out: dict[str, list[str]] = {}
        for log in logs:
            got = out.setdefault(log.agent_id, [])
            got.extend(i for k, i in log.messages if k == "message")
            got.extend(log.waited)
        return out

    def waited_any(self, agent_id: str) -> bool:
        """True if a turn of ``agent_id`` received a message through a wait."""
        with self._cond:
            return any(t.waited for t in self.turns.values() if t.agent_id == agent_id)

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
