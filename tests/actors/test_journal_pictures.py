"""The picture a rolled-back command is compared against holds only what commands change.

A fault test (``retinue.testing.faults``) checks that a failed command left
the supervisor's memory exactly as before by comparing two pictures of it
(:func:`retinue.actors.tree._journal.snapshot`). A runner's thread claims its turn
(``TurnControl.claim_start``) whenever the executor gets to it, concurrently with
any command: had the picture held that flag, a command that failed while
another agent's runner started would be reported as not rolled back (the
restart machine's fault rule met it). The supervisor only reads the flag.
"""

from __future__ import annotations

from support import OpenRuntime

from retinue import Profile
from retinue.actors.tree._journal import snapshot
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


def test_the_kept_generations_picture_does_not_change_when_a_commit_completes(
    open_runtime: OpenRuntime,
) -> None:
    """The writes of settled generations are held until their commit is done; the commit's
    future resolves on the writer's thread, concurrently with any command (the restart
    machine's fault rule met it: a rolled-back settle reported as not exact)."""
    import concurrent.futures

    from retinue.testing import echo

    rt = open_runtime([Profile("echo", runner=echo)])
    rt.wait(rt.spawn("echo", "once").id, timeout=30)
    core = rt._system.core  # type: ignore[union-attr]
    assert core is not None
    history = core.world.history
    pending: concurrent.futures.Future[None] = concurrent.futures.Future()
    history.unconfirmed[b"k"] = (None, pending)  # a write whose commit is still running
    before = snapshot(history)
    pending.set_result(None)  # the writer's thread, whatever command runs
    assert snapshot(history) == before
