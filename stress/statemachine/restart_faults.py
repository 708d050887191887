"""Faults in the restart machine: a turn's last word fails, the turn ends once, nothing strands.

:meth:`RestartFaults.faulty_turn_end` arms a fault (:func:`retinue.testing.faults.inject_fault`)
at a random change point of the next :data:`TURN_ENDS` command (a settle, a
turn's timeout, a due restart's firing; one of them or any), spawns a ``timed`` task (whose
``T`` attempts end by the turn's deadline, so timeouts happen) and waits for
quiescence. A command that fails so is rolled back whole and its turn ends
``failed`` with the InternalError as its one completion (the supervisor's
second transition, :mod:`retinue.actors.supervisor._rescue`): :func:`faults_seen` names
those turns, and the machine's judge accepts an ``InternalError`` for
exactly them. A stale settle (a timed-out attempt's runner reporting late)
that fails is rolled back and its runner still counts as returned. The
rule's own wait and the drain's quiescence then prove no agent was left
busy (a ``restarting`` agent without a due timer, a turn without a runner)
and nothing waits for a command that will not come.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import rule

from retinue.protocol.messages import Completion
from retinue.runtime import Runtime
from retinue.testing.faults import disarm, faults_seen, inject_fault
from stress.statemachine.restart_plans import TIMED, TIMED_PLANS
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["TURN_ENDS", "RestartFaults", "judge_rescued"]

TURN_ENDS = ("FireRestarts", "Settle", "ExpireTurn")
"""The commands that are the last word on a turn, which the rule makes fail."""
SETTLE_S = 30.0


def judge_rescued(rescued: set[tuple[str, int]], done: Completion) -> bool | None:
    """Judge ``done`` against the rescues: None if neither it nor its turn was rescued,
    else whether it is the rescue's ``failed`` InternalError."""
    hit = (done.agent_id, done.generation) in rescued
    if not hit and done.error_type != "InternalError":
        return None
    ok = (
        hit
        and str(done.status) == "failed"
        and done.error_type == "InternalError"
        and (done.error or "").startswith("InternalError: ")
    )
    if ok:
        STATS["restart:rescued_completions"] += 1
    return ok


class RestartFaults:
    """The restart machine's fault rule (mixed into :class:`RestartMachine`)."""

    rt: Runtime
    rescued: set[tuple[str, int]]  # turns a failed command's rescue ended failed

    def spawn(self, plan: str, kind: str) -> None:
        """Spawn an agent of ``kind`` on a planned task (the machine's rule)."""
        raise NotImplementedError

    @rule(
        commands=st.sampled_from([TURN_ENDS, *((c,) for c in TURN_ENDS)]),
        at=st.integers(1, 16),
        plan=TIMED_PLANS,
    )
    def faulty_turn_end(self, commands: tuple[str, ...], at: int, plan: str) -> None:
        """The next of ``commands`` (a settle, timeout or due restart) fails at its ``at``-th
        change: its turn ends ``failed`` with the InternalError, once; nothing strands."""
        TRACE.append(f"fault armed for the next {'/'.join(commands)} at change {at}: {plan}")
        seen = len(faults_seen(self.rt))
        inject_fault(self.rt, *commands, at=at)
        try:
            self.spawn(plan, TIMED)  # a task whose attempts end (restarts, timeouts)
            self.rt.wait_idle(SETTLE_S)  # quiet: whatever could end has (a fault may have fired)
        finally:
            armed = disarm(self.rt)
        if armed:
            return  # no such command came with that many changes: nothing was injected
        for command, exact, turns in faults_seen(self.rt)[seen:]:
            if command not in TURN_ENDS or not exact:
                fail(f"a fault in {command} left memory changed (exact={exact}), or hit elsewhere")
            self.rescued.update(turns)
            STATS[f"restart:fault:{command}"] += 1
            STATS["restart:rescued_turns"] += len(turns)
