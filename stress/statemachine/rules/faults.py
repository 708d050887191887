"""Faults injected into the supervisor: a command is one transaction, whole or not at all.

:meth:`FaultRules.faulty_host_call` arms a fault at a random change point of
the next command of one kind and makes one host call of that kind (spawn,
send, follow-up, resume, interrupt, interrupt-tree, close, close-tree, wait):
if the fault fires, the call must raise ``InternalError`` naming the command,
the supervisor must find its memory exactly as before the command, and the
model changes nothing (the machine's invariants, the store check at reopen
and quiescence then prove nothing was half applied).

:meth:`FaultRules.faulty_turn_end` arms a fault in the next settle, turn
timeout or due restart, whichever turn it hits: that turn must end
``failed`` with the InternalError as its one completion (the model accepts
it for exactly the turns the supervisor reports it rescued), and quiescence
proves no agent was left busy with nothing to carry it on.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from retinue.testing.faults import disarm, faults_seen, inject_fault
from stress.statemachine.data import DEDUP_KEYS, REF_FORMS, TASKS, WAIT_TIMEOUTS
from stress.statemachine.rules.delivery import DeliveryRules
from stress.statemachine.rules.lifecycle import TurnRules
from stress.statemachine.rules.spawning import SpawnRules
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["FAULTY_CALLS", "FaultRules"]

FAULTY_CALLS = {
    "spawn_top": "Spawn",
    "spawn_under": "Spawn",
    "send": "Send",
    "follow_up": "FollowUp",
    "resume": "Resume",
    "interrupt": "Interrupt",
    "interrupt_tree": "InterruptTree",
    "close": "Close",
    "close_tree": "CloseTree",
    "wait": "Wait",
}
"""The host calls a fault is injected into, and the command each one sends."""


class FaultRules(SpawnRules, TurnRules, DeliveryRules):
    """Host calls whose command fails at a random point; turn ends whose command fails."""

    armed: str | None = None  # the command a fault is armed for, during one host call
    rescued: set[tuple[str, int]]  # turns a failed command's rescue ended failed

    @precondition(lambda self: self.live())
    @rule(
        call=st.sampled_from(sorted(FAULTY_CALLS)),
        at=st.integers(1, 12),
        index=st.integers(0, 63),
        form=st.sampled_from(REF_FORMS),
        task=st.sampled_from(TASKS),
        key=st.sampled_from(DEDUP_KEYS),
        timeout=st.sampled_from(WAIT_TIMEOUTS),
    )
    def faulty_host_call(
        self,
        call: str,
        at: int,
        index: int,
        form: str,
        task: str,
        key: str | None,
        timeout: float,
    ) -> None:
        """One host call whose command raises at its ``at``-th change: all of it, or none."""
        command = FAULTY_CALLS[call]
        TRACE.append(f"fault armed: {command} at change {at}")
        seen = len(faults_seen(self.rt))
        inject_fault(self.rt, command, at=at)
        self.armed = command
        try:
            if call == "spawn_top":
                self.spawn_top("echo", task, None, False, 1)
            elif call == "spawn_under":
                self.spawn_under(index, form, "echo", task, None, 1, True)
            elif call == "send":
                self.send(index, form, "hi", key, 1)
            elif call == "follow_up":
                self.follow_up(index, form, task, 1)
            elif call in ("resume", "interrupt", "close", "close_tree"):
                getattr(self, call)(index, form)
            elif call == "interrupt_tree":
                self.interrupt_tree(index, form, 0)
            else:
                self.wait(index, form, timeout, 1)
        finally:
            self.armed = None
            fired = not disarm(self.rt)
        if fired:
            new = faults_seen(self.rt)[seen:]
            if [(c, exact) for c, exact, _ in new] != [(command, True)]:
                fail(f"a fault in {command} left memory changed, or fired elsewhere: {new}")
            STATS[f"fault:{command}"] += 1

    @rule(command=st.just("Settle"), at=st.integers(1, 12))
    def faulty_turn_end(self, command: str, at: int) -> None:
        """The next settle (or timeout, or due restart) fails at a random change: its turn
        ends ``failed`` with the InternalError, once; nothing is left stranded.

        The gate opens first (as ``release_gate`` does): gated turns holding every
        turn slot would keep the new turn from running, and no settle would come.
        ``at`` stays within the changes of the shortest settle (an echo's makes 14).
        """
        if not self.harness.gate_open:
            self.harness.open_gate()
        TRACE.append(f"fault armed for the next {command} at change {at}")
        inject_fault(self.rt, command, at=at)
        self.spawn_top("echo", "faulted", None, False, 1)  # a turn that will end
        self.sync()  # quiet: every turn that could end has ended (a fault may have fired)
        if disarm(self.rt):
            STATS["fault_turn_end_not_fired"] += 1
            return  # no such command came: nothing was injected
        STATS[f"fault:{command}"] += 1
        for name, exact, rescued in faults_seen(self.rt)[-1:]:
            if name != command or not exact:
                fail(f"a fault in {command} left memory changed: {(name, exact)}")
            self.rescued.update(rescued)
            STATS["rescued_turns"] += len(rescued)
