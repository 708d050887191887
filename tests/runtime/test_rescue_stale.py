"""A failed command's rescue leaves nothing waiting for a command that will not come.

A runner that ignores cancellation reports back after its turn timed out: its
settle is stale (the turn already ended). If that settle fails (a fault, a
bug), the command is rolled back; but its runner has returned all the same,
so the runtime must count it as returned, or it never becomes quiet
(``wait_idle`` would wait forever for a runner that is gone). And a wait for
quiescence already waiting when a rescue makes the runtime quiet is answered
by the rescue's transition, as any command's would answer it. Found while
writing the restart machine's fault rule (``stress/statemachine/restart_faults.py``),
whose stale settles of timed-out turns reach this case.
"""

from __future__ import annotations

from support import PROMPT_S, OpenRuntime, wait_until

from retinue import AgentState, Profile, Runtime
from retinue.actors.commands import HOST, Idle
from retinue.testing import Gate
from retinue.testing.faults import faults_seen, inject_fault
from retinue.testing.gate import DEFAULT_TIMEOUT_S


def _timed_out(open_runtime: OpenRuntime) -> tuple[Runtime, Gate, str]:
    """A runtime whose one turn timed out while its runner runs on, ignoring the cancel."""
    gate = Gate(honour_cancel=False)
    rt = open_runtime([Profile("slow", runner=gate, turn_timeout_s=0.05)])
    agent = rt.spawn("slow", "hang")
    assert rt.wait(agent.id, timeout=PROMPT_S).error_type == "TurnTimeout"
    return rt, gate, agent.id


def test_a_stale_settle_that_fails_still_counts_its_runner_as_returned(
    open_runtime: OpenRuntime,
) -> None:
    rt, gate, agent_id = _timed_out(open_runtime)
    inject_fault(rt, "Settle", at=1)
    gate.release()  # the abandoned runner returns: its stale settle fails
    wait_until(lambda: faults_seen(rt), what="the stale settle served")
    rt.wait_idle(PROMPT_S)  # before the fix: never quiet, the runner counted as running
    assert faults_seen(rt) == [("Settle", True, ())]  # rolled back; no turn to rescue
    assert rt.get(agent_id).state is AgentState.FAILED
    again = rt.follow_up(agent_id, "once more")
    gate.release()
    assert rt.wait(again.id, timeout=PROMPT_S).status == "completed"


def test_a_wait_for_quiescence_is_answered_by_the_rescue_that_makes_it_quiet(
    open_runtime: OpenRuntime,
) -> None:
    rt, gate, _ = _timed_out(open_runtime)
    idle = rt._engine.submit(Idle(HOST))  # queued before the settle: it waits for the runner
    inject_fault(rt, "Settle", at=1)
    gate.release()  # the stale settle fails; its rescue makes the runtime quiet
    assert idle.result(timeout=DEFAULT_TIMEOUT_S) is None
