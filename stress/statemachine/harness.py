"""The harness: what the runners saw, their gate, and the activity the machine waits on.

Every runner logs the turn it saw (its messages), what it received from waits
and what it returned (a :class:`TurnLog`), so the model knows which messages
and completions each turn received; the ``TurnSettled`` events say how each
turn ended (:attr:`Harness.outcomes`), so the model knows which turns kept
their inputs (the input rule: only a turn that completes). Every change (a runner entering or
leaving, the gate, a published event) bumps :attr:`Harness.activity` and
notifies :attr:`Harness.cond`, so the machine waits for quiescence on a
condition rather than sleeping. The runners themselves are in
:mod:`stress.statemachine.runners`; the race rules' events in
:attr:`Harness.latches`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from retinue import Runtime, Turn
from retinue.actors.turns._turn import control_of
from retinue.errors import RetinueError, TurnInterrupted
from retinue.protocol.messages import CompletionStatus, Event, Message, TurnSettled
from stress.statemachine.data import ASYNC_PROFILES, ON_PURPOSE, error_text
from stress.statemachine.latches import Latches
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["Harness", "Keeps", "TurnLog"]


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


Keeps = Callable[[TurnLog], bool]
"""Whether a logged turn kept its inputs: it completed, or it still runs (it holds them)."""


class Harness:
    """The runners' log, their gate and latches; shared by every runtime one example opens."""

    def __init__(self) -> None:
        """Create a harness with the gate open and an empty log."""
        self.cond = threading.Condition()  # guards everything below; notified on every change
        self.activity = 0
        self.gate_open = True
        self.turns: dict[tuple[str, int], TurnLog] = {}
        self.in_flight: set[tuple[str, int]] = set()
        self.in_gate: set[tuple[str, int]] = set()
        self.problems: list[str] = []  # seen on runner or dispatcher threads
        self.agent_sent: dict[str, Message] = {}  # messages runners sent, by id
        self.agent_dedup: dict[tuple[str, str], Message] = {}  # (sender id, key) -> original
        self.settled_events: Counter[tuple[str, int]] = Counter()
        self.outcomes: dict[tuple[str, int], CompletionStatus] = {}  # how each turn settled
        self.fail_wakes = False  # coordinators' wake turns fail (the input rule's rule)
        # A close whose Shutdown command failed is under way: it cancels async turns' tasks
        # it never interrupted (their runners see a CancelledError that is not their turn's).
        self.close_failing = False
        self.runtime: Runtime | None = None  # the open runtime (a runner may close it)
        # Sends to the host's inbox refused with MailboxFull since the host last read it.
        self.host_full = 0
        self.latches = Latches()

    # -- activity --

    def bump(self) -> None:
        """Count one change and wake whoever waits for activity (hold :attr:`cond`)."""
        self.activity += 1
        self.cond.notify_all()

    def mark(self) -> int:
        """Return the current activity count."""
        with self.cond:
            return self.activity

    def wait_activity(self, mark: int, timeout: float) -> None:
        """Block until something happened since ``mark`` (or ``timeout`` passed)."""
        with self.cond:
            self.cond.wait_for(lambda: self.activity != mark, timeout)

    def problem(self, text: str) -> None:
        """Record something a runner saw that must never happen (the machine fails on it)."""
        with self.cond:
            self.problems.append(text)

    def on_event(self, event: Event) -> None:
        """Event subscriber: count settled turns, wake the machine."""
        with self.cond:
            if isinstance(event, TurnSettled):
                key = (event.agent_id, event.generation)
                self.settled_events[key] += 1
                self.outcomes[key] = event.status
                if self.settled_events[key] > 1:
                    self.problems.append(f"turn {key} settled twice (events)")
            self.bump()

    def wait_settled_event(self, key: tuple[str, int], timeout: float) -> bool:
        """Wait for the ``TurnSettled`` event of turn ``key``; True if it came exactly once."""
        with self.cond:
            self.cond.wait_for(lambda: self.settled_events[key] > 0, timeout)
            return self.settled_events[key] == 1

    # -- the gate --

    def open_gate(self) -> None:
        """Let every gated turn return."""
        TRACE.append("open gate")
        with self.cond:
            self.gate_open = True
            self.bump()

    def close_gate(self) -> None:
        """Make gated turns block until the gate opens or they are cancelled."""
        TRACE.append("close gate")
        with self.cond:
            self.gate_open = False
            self.bump()

    # -- the log --

    def enter(self, turn: Turn, profile: str) -> TurnLog:
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
        # Below the API on purpose: a turn cancelled before its runner claimed it gave its
        # inputs back and must never run (claim_start refuses it; a cancel after the claim
        # is the interrupt of a running turn, so a cancelled turn here must have claimed).
        control = control_of(turn)
        unclaimed = turn.cancelled.is_set() and not control.runner_started
        with self.cond:
            if unclaimed:
                self.problems.append(f"turn {key} ran its runner, cancelled before it started")
            if key in self.turns:
                self.problems.append(f"turn {key} ran twice")
            self.turns[key] = log
            self.in_flight.add(key)
            self.bump()
        return log

    def leave(
        self, turn: Turn, log: TurnLog, *, result: Any = None, exc: BaseException | None = None
    ) -> None:
        """Log how a runner ended: its result, or the exception it raised."""
        key = (log.agent_id, log.generation)
        with self.cond:
            if exc is None:
                log.outcome = ("output", result) if isinstance(result, str) else ("nonstr", None)
            else:
                log.outcome = ("error", error_text(exc))
                # The turn's own interrupt reaches its runner as CancelledError (async) or,
                # in a wait it blocked in, as TurnInterrupted (a BaseException by design).
                stopped = isinstance(exc, asyncio.CancelledError | TurnInterrupted)
                cancelled = stopped and turn.cancelled.is_set()
                if cancelled:
                    STATS[
                        "async_cancelled"
                        if isinstance(exc, asyncio.CancelledError)
                        else "wait_interrupted"
                    ] += 1
                elif stopped and self.close_failing:
                    STATS["cancelled_by_failed_close"] += 1
                elif not isinstance(exc, RetinueError) and str(exc) != ON_PURPOSE:
                    self.problems.append(
                        f"turn {key} of {turn.agent.path} raised {error_text(exc)}"
                    )
            self.in_flight.discard(key)
            self.bump()

    # -- reads for the machine --

    def delivered_messages(self, keeps: Keeps) -> dict[str, list[str]]:
        """Return the mailbox messages each agent's turns that ``keeps`` them received, in
        generation order (a turn that gave its inputs back received nothing for good)."""
        with self.cond:
            logs = sorted(self.turns.values(), key=lambda t: (t.agent_id, t.generation))
        out: dict[str, list[str]] = {}
        for log in logs:
            if not keeps(log):
                continue
            got = out.setdefault(log.agent_id, [])
            got.extend(i for k, i in log.messages if k == "message")
            got.extend(log.waited)
        return out

    def waited_any(self, agent_id: str) -> bool:
        """True if a turn of ``agent_id`` received a message through a wait."""
        with self.cond:
            return any(t.waited for t in self.turns.values() if t.agent_id == agent_id)

    def delivered_completions(self, keeps: Keeps) -> Counter[str]:
        """Return how often each completion id reached an agent's turn that ``keeps`` it."""
        with self.cond:
            logs = [log for log in self.turns.values() if keeps(log)]
        seen: Counter[str] = Counter()
        for log in logs:
            seen.update(i for k, i in log.messages if k == "completion")
            seen.update(log.taken)
        return seen

    def wait_runners_exit(self, timeout: float) -> None:
        """Block until no runner is inside its turn."""
        with self.cond:
            if not self.cond.wait_for(lambda: not self.in_flight, timeout):
                fail(f"runners still inside their turns after close: {sorted(self.in_flight)}")
