"""The picture a rolled-back command is compared against holds only what commands change.

A fault test (``retinue.testing.faults``) checks that a failed command left
the supervisor's memory exactly as before by comparing two pictures of it
(:func:`retinue.actors._journal.snapshot`). A runner's thread claims its turn
(``Turn.claim_start``) whenever the executor gets to it, concurrently with
any command: had the picture held that flag, a command that failed while
another agent's runner started would be reported as not rolled back (the
restart machine's fault rule met it). The supervisor only reads the flag.
"""

from __future__ import annotations

from support import OpenRuntime

from retinue import Profile
from retinue.actors._journal import snapshot
from retinue.testing import Gate


def test_a_turns_picture_does_not_change_when_its_runner_claims_it(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("held", runner=gate)])
    agent = rt.spawn("held", "hold")
    gate.wait_started(1)
    core = rt._system.core  # type: ignore[union-attr]
    assert core is not None
    turn = core.scheduler.turns[agent.id].turn
    turn.runner_started = False  # the moment before the executor claims it
    before = snapshot(turn)
    assert turn.claim_start()  # what the runner's thread does, whatever command runs
    assert snapshot(turn) == before
    gate.release()
    rt.wait(agent.id, timeout=30)
