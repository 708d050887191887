"""An open without an agent's profile decides nothing: it records a loss, the profile's decides.

``retinue compact`` (a writer with no profiles) or ``Runtime.open(store,
profiles=[])`` on a store a SIGKILL left finds a turn lost under a stored
``"lost"`` policy. It only records the loss (the lost count, a pending restart
with its due time); the give-up decisions (``max_lost``: ``CrashLoop``; the
intensity: ``RestartLimitExceeded``) wait for the first open that defines the
profile, which applies them as if it had made that restart. The loops are
real: a child process runs the turn and is killed with SIGKILL while it runs.
"""

from __future__ import annotations

from pathlib import Path

from cliutil import retinue_cli
from persistence import Child, completions_of, decode_db

from retinue import AgentState, Completion, Profile, Restart, Runtime, Turn
from retinue.protocol.records import AgentRecord
from retinue.protocol.supervision import LOST_ERROR

PROMPT_S = 20.0

# max_lost=3 and an intensity window of a millisecond: only max_lost can stop this loop.
CRASH_LOOP = "dict(max_restarts=1, within_s=0.001, max_lost=3)"
# max_lost=10 and two restarts an hour: only the intensity can stop this one.
INTENSITY = "dict(max_restarts=2, within_s=3600, max_lost=10)"

LOOP_CHILD = r"""
import sys, threading
from retinue import Profile, Restart, Runtime

hold = threading.Event()

def blocking(turn):
    sys.stdout.write(f"STARTED {turn.attempt}\n")
    sys.stdout.flush()
    hold.wait()  # the process dies under it
    return "never"

policy = Restart(on=("failed", "lost"), backoff_s=0.01, jitter=0.0, **eval(sys.argv[3]))
rt = Runtime.open(sys.argv[1], profiles=[Profile("worker", runner=blocking, restart=policy)])
if sys.argv[2] == "spawn":
    rt.spawn("worker", "the job that kills its process", name="w")
hold.wait()
"""


def _record(store: Path) -> AgentRecord:
    records: dict[bytes, AgentRecord] = decode_db(store, "agents", AgentRecord)
    (found,) = [r for r in records.values() if r.name == "w"]
    return found


def _kill_three_times(store: Path, policy: str) -> None:
    """Run the task's attempts 1, 2 and 3 in child processes, each SIGKILLed while it runs."""
    for attempt, how in ((1, "spawn"), (2, "open"), (3, "open")):
        with Child(LOOP_CHILD, store, how, policy) as child:
            assert child.expect("STARTED") == [str(attempt)]
            child.kill()
    assert _record(store).state is AgentState.RUNNING


def _check_loss_recorded(store: Path, lost: int) -> None:
    """The bare open made the loss a pending restart (attempt 4, due) and decided nothing."""
    record = _record(store)
    assert (record.state, record.attempt, record.generation, record.lost) == (
        AgentState.RESTARTING,
        4,
        4,
        lost,
    )
    assert record.last_error == LOST_ERROR and record.restart_due_at is not None
    assert record.error is None and record.error_type is None
    assert completions_of(store, record.id) == [], "a bare open ended the task"


def _open_with_profile(store: Path, policy: Restart) -> tuple[Completion, list[int]]:
    """Open with the profile; return the task's one completion and the attempts that ran."""
    ran: list[int] = []

    def counts(turn: Turn) -> str:
        ran.append(turn.attempt)
        return "ran again"

    with Runtime.open(store, profiles=[Profile("worker", runner=counts, restart=policy)]) as rt:
        got = rt.wait("w", timeout=PROMPT_S)
        rt.wait_idle(PROMPT_S)
    assert got.error_type is not None and got.error is not None
    assert got.generation == 4 and got.generation - got.attempt + 1 == 1  # the task's runs
    assert len(completions_of(store, _record(store).id)) == 1
    return got, ran


def test_compact_records_the_third_loss_and_the_profiles_open_settles_crash_loop(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    _kill_three_times(store, CRASH_LOOP)
    done = retinue_cli("compact", "--store", store)
    assert done.returncode == 0, done.stderr
    _check_loss_recorded(store, lost=3)
    policy = Restart(
        on=("failed", "lost"), backoff_s=0.01, jitter=0.0, max_restarts=1, within_s=0.001
    )
    got, ran = _open_with_profile(store, policy)
    assert (got.status, got.error_type) == ("failed", "CrashLoop")
    assert ran == [], "a crash loop is not restarted again"
    assert "lost in a crash 3 times in a row" in (got.error or "")


def test_a_bare_open_records_the_loss_and_the_profiles_open_applies_the_intensity(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    _kill_three_times(store, INTENSITY)
    with Runtime.open(store, profiles=[]) as rt:
        rt.wait_idle(PROMPT_S)  # nothing can run here: it is idle at once
        assert rt.get("w").state is AgentState.RESTARTING
    _check_loss_recorded(store, lost=3)
    policy = Restart(
        on=("failed", "lost"),
        backoff_s=0.01,
        jitter=0.0,
        max_restarts=2,
        within_s=3600,
        max_lost=10,
    )
    got, ran = _open_with_profile(store, policy)
    assert (got.status, got.error_type) == ("failed", "RestartLimitExceeded")
    assert ran == []
    limit = "RestartLimitExceeded: 2 restarts within 3600 s; last error: lost"
    assert (got.error or "").startswith(limit)


def test_a_loss_a_bare_open_recorded_below_the_limits_runs(tmp_path: Path) -> None:
    """One loss, a bare open, then the profile's open: the pending restart passes and runs."""
    store = tmp_path / "store"
    with Child(LOOP_CHILD, store, "spawn", INTENSITY) as child:
        assert child.expect("STARTED") == ["1"]
        child.kill()
    with Runtime.open(store, profiles=[]) as rt:
        rt.wait_idle(PROMPT_S)
    record = _record(store)
    assert (record.state, record.attempt, record.lost) == (AgentState.RESTARTING, 2, 1)
    policy = Restart(on=("failed", "lost"), backoff_s=0.01, jitter=0.0, max_restarts=2)
    ran: list[int] = []

    def counts(turn: Turn) -> str:
        ran.append(turn.attempt)
        return "ran again"

    with Runtime.open(store, profiles=[Profile("worker", runner=counts, restart=policy)]) as rt:
        got = rt.wait("w", timeout=PROMPT_S)
    assert (got.status, got.attempt, ran) == ("completed", 2, [2])
