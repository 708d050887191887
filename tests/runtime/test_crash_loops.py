"""Crash loops: a task lost ``max_lost`` times in a row while running settles ``failed``.

A turn under a ``"lost"`` policy whose process keeps dying would be restarted
by every open as long as the crashes are spread out beyond the intensity's
window. ``Restart(max_lost=3)`` counts the task's losses in a row in the
store, across opens however far apart: at the third it settles ``failed``
with ``CrashLoop``. A real loop (a child process killed with SIGKILL while
the turn runs, three times) and hand-written stores for the counting rules.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from persistence import Child, agent, agent_write, completions_of, decode_db, write_store

from retinue import AgentState, Profile, Restart, Runtime, Turn
from retinue.protocol.records import AgentRecord
from retinue.protocol.supervision import RestartRecord

PROMPT_S = 20.0

# A window of a millisecond: the intensity never sees two of these restarts together,
# so only ``max_lost`` can stop the loop.
LOOP = Restart(
    on=("failed", "lost"), max_restarts=1, within_s=0.001, backoff_s=0.01, jitter=0.0, max_lost=3
)

LOOP_CHILD = r"""
import sys, threading
from retinue import Profile, Restart, Runtime

hold = threading.Event()

def blocking(turn):
    sys.stdout.write(f"STARTED {turn.attempt}\n")
    sys.stdout.flush()
    hold.wait()  # the process dies under it
    return "never"

policy = Restart(
    on=("failed", "lost"), max_restarts=1, within_s=0.001, backoff_s=0.01, jitter=0.0, max_lost=3
)
rt = Runtime.open(sys.argv[1], profiles=[Profile("worker", runner=blocking, restart=policy)])
if sys.argv[2] == "spawn":
    rt.spawn("worker", "the job that kills its process", name="w")
hold.wait()
"""


def _record(store: Path, name: str) -> AgentRecord:
    records: dict[bytes, AgentRecord] = decode_db(store, "agents", AgentRecord)
    (found,) = [r for r in records.values() if r.name == name]
    return found


def test_a_task_lost_three_times_in_a_row_settles_failed_with_crash_loop(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for attempt, how in ((1, "spawn"), (2, "open"), (3, "open")):
        with Child(LOOP_CHILD, store, how) as child:
            assert child.expect("STARTED") == [str(attempt)]
            child.kill()
        assert _record(store, "w").state is AgentState.RUNNING
    ran: list[int] = []

    def counts(turn: Turn) -> str:
        ran.append(turn.attempt)
        return "ran again"

    with Runtime.open(store, profiles=[Profile("worker", runner=counts, restart=LOOP)]) as rt:
        info = rt.get("w")
        assert (info.state, info.attempt, info.error_type) == ("failed", 3, "CrashLoop")
        got = rt.wait("w", timeout=PROMPT_S)
        rt.wait_idle(PROMPT_S)
    assert (got.status, got.error_type, got.attempt, got.generation) == (
        "failed",
        "CrashLoop",
        3,
        3,
    )
    assert got.error is not None and "lost in a crash 3 times in a row" in got.error
    assert ran == [], "a crash loop is not restarted again"
    assert len(completions_of(store, info.id)) == 1


def _ok(turn: Turn) -> str:
    return "ok"


def _open_one(store: Path, record: AgentRecord, runner: Callable[[Turn], str] = _ok) -> AgentRecord:
    """Write ``record`` alone in a store, open it with a ``worker`` under :data:`LOOP`."""
    write_store(store, [agent_write(record)])
    with Runtime.open(store, profiles=[Profile("worker", runner=runner, restart=LOOP)]) as rt:
        rt.wait_idle(PROMPT_S)
    return _record(store, record.name)


def test_the_loss_count_is_stored_and_the_third_loss_gives_up(tmp_path: Path) -> None:
    second = _open_one(tmp_path / "a", agent("a", "/root/a", state="running", lost=1))
    assert (second.state, second.lost) == (AgentState.COMPLETED, 2)  # restarted, then ran
    third = _open_one(tmp_path / "b", agent("b", "/root/b", state="running", lost=2))
    assert (third.state, third.lost, third.error_type) == (AgentState.FAILED, 3, "CrashLoop")


def test_a_queued_turn_lost_does_not_count(tmp_path: Path) -> None:
    """A turn lost while it waited for a slot never ran: it cannot have crashed its process."""
    queued = _open_one(tmp_path / "s", agent("q", "/root/q", state="starting", lost=2))
    assert (queued.state, queued.lost) == (AgentState.COMPLETED, 2)


def test_an_attempt_that_fails_ends_the_row(tmp_path: Path) -> None:
    """Lost, lost, then the restarted attempt fails on its own: the next loss is the first
    of a new row."""
    store = tmp_path / "s"
    fails_once: list[int] = []

    def runner(turn: Turn) -> str:
        fails_once.append(turn.attempt)
        if len(fails_once) == 1:
            raise RuntimeError("a failure of its own")
        return "ok"

    record = _open_one(store, agent("r", "/root/r", state="running", lost=1), runner)
    assert (record.state, record.lost) == (AgentState.COMPLETED, 0)
    assert fails_once == [2, 3]


def test_a_new_task_starts_a_new_row(store_path: Path) -> None:
    write_store(store_path, [agent_write(agent("n", "/root/n", state="failed", lost=2))])
    with Runtime.open(store_path, profiles=[Profile("worker", runner=lambda t: "ok")]) as rt:
        rt.follow_up("n", "a new task")
        rt.wait("n", timeout=PROMPT_S)
    assert _record(store_path, "n").lost == 0


def test_without_its_profile_the_loss_is_counted_and_the_profiles_open_decides(
    tmp_path: Path,
) -> None:
    """An open without the profile counts the third loss but gives nothing up; the first
    open with the profile settles the task ``CrashLoop`` (see test_bare_open_decides_nothing.py)."""
    stored = RestartRecord.of(LOOP)
    record = agent("x", "/root/x", state="running", lost=2, restart=stored)
    write_store(tmp_path / "s", [agent_write(record)])
    with Runtime.open(tmp_path / "s", profiles=[]) as rt:
        info = rt.get("x")
    assert (info.state, info.error_type) == ("restarting", None)
    assert _record(tmp_path / "s", "x").lost == 3
    with Runtime.open(tmp_path / "s", profiles=[Profile("worker", runner=_ok, restart=LOOP)]) as rt:
        info = rt.get("x")
    assert (info.state, info.error_type) == ("failed", "CrashLoop")
