"""A hypothesis state machine over the journal of one step's tool calls, crashes anywhere.

Calls of every class run (their effect counted per key) in any order, a crash
can land between any call's effect and the step's record, each new turn
settles the calls in doubt (``report`` or ``approve``), a person approves or
denies the calls parked for them. Whatever the interleaving: an ``unsafe``
call never runs more often than once plus the reruns a person approved, a
call's key never changes, a read or idempotent call in doubt always runs
again, and a settled journal holds no call in doubt.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from retinue import AgentInfo, AgentState
from retinue.llm.turn._intents import intents, open_count, settle, started
from retinue.protocol.effects import EFFECTS, Effect
from retinue.protocol.records import ToolStep

AGENT = AgentInfo(
    id="a1",
    name="a",
    path="/root/a",
    profile="p",
    parent_path="/root",
    depth=1,
    state=AgentState.RUNNING,
    generation=1,
    task="t",
)


class JournalMachine(RuleBasedStateMachine):
    """One step's journal across crashes; effects counted by idempotency key."""

    def __init__(self) -> None:
        super().__init__()
        self.journal = ToolStep(generation=1, step=0)
        self.classes: dict[str, Effect] = {}
        self.keys: dict[str, str] = {}
        self.runs: Counter[str] = Counter()  # effects that happened, by key
        self.approved: Counter[str] = Counter()  # reruns a person approved, by key
        self.ran: set[tuple[str, int]] = set()  # (key, attempt) runs that took effect
        self.mode = "report"

    @initialize(
        classes=st.lists(st.sampled_from(EFFECTS), min_size=1, max_size=4),
        gated=st.sets(st.integers(0, 3), max_size=2),
        mode=st.sampled_from(["report", "approve"]),
    )
    def open_step(self, classes: list[Effect], gated: set[int], mode: str) -> None:
        calls = [
            {"id": f"c{i}", "type": "function", "function": {"name": f"t{i}", "arguments": "{}"}}
            for i in range(len(classes))
        ]
        self.classes = {f"t{i}": c for i, c in enumerate(classes)}
        gated_ids = {f"c{i}" for i in gated if i < len(classes)}
        self.journal = intents("a1", 1, 1, calls, {}, self.classes.__getitem__, gated_ids)
        self.keys = {c.call_id: c.key for c in self.journal.calls}
        self.mode = mode

    @precondition(lambda self: any(c.state == "waiting" for c in self.journal.calls))
    @rule(approve=st.lists(st.booleans(), min_size=4, max_size=4))
    def answer(self, approve: list[bool]) -> None:
        """A person answers every waiting call (the step's first approvals, or in doubt)."""
        denied = {}
        for i, call in enumerate(self.journal.calls):
            if call.state != "waiting":
                continue
            if approve[i % 4]:
                if call.in_doubt:
                    self.approved[call.key] += 1
            else:
                denied[call.call_id] = "denied"
        self.journal = started(self.journal, denied)

    @precondition(lambda self: any(c.state == "running" for c in self.journal.calls))
    @rule(which=st.sets(st.integers(0, 3)))
    def run_then_crash(self, which: set[int]) -> None:
        """Some running calls take effect; then the process dies before their results."""
        for i, call in enumerate(self.journal.calls):
            if call.state == "running" and i in which and (call.key, call.attempt) not in self.ran:
                self.ran.add((call.key, call.attempt))  # one run per attempt, as a turn runs it
                self.runs[call.key] += 1

    @rule()
    def new_turn(self) -> None:
        """A new turn loads the journal and settles its calls in doubt."""
        before = {c.call_id: c for c in self.journal.calls}
        self.journal, events = settle(self.journal, self.mode, AGENT)
        for event in events:
            effect = before[event.call_id].effect
            if effect in ("read", "idempotent"):
                assert event.action == "rerun"
            else:
                assert event.action == ("approval" if self.mode == "approve" else "reported")
            assert event.idempotency_key == self.keys[event.call_id]

    @invariant()
    def unsafe_runs_at_most_once_unless_approved(self) -> None:
        for call in self.journal.calls:
            if call.effect == "unsafe":
                assert self.runs[call.key] <= 1 + self.approved[call.key]

    @invariant()
    def keys_never_change(self) -> None:
        for call in self.journal.calls:
            assert call.key == self.keys[call.call_id]
            assert call.attempt >= 1

    @invariant()
    def what_is_open_is_counted(self) -> None:
        waiting_in_doubt = sum(1 for c in self.journal.calls if c.state == "waiting" and c.in_doubt)
        running = sum(1 for c in self.journal.calls if c.state == "running")
        assert open_count(self.journal) == running + waiting_in_doubt


TestJournalMachine = JournalMachine.TestCase
TestJournalMachine.settings = settings(
    max_examples=150, stateful_step_count=12, derandomize=True, deadline=None
)
