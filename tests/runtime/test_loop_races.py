"""The state machine's loop races (``stress/statemachine/races/loop.py``), every variant once.

The derandomized CI run (``test_statemachine.py``) draws these rules among
all the others; here each variant runs on a fresh machine, so none is left
to the draw: the close racing turn starts (closed from the host with the
loop free or held, or from the loop), interrupts and closes of turns queued
behind a held loop (and racing its release), and a close whose Shutdown
command fails while the next turn starts. Each step is followed by the
machine's invariants and a ``drain`` (every completion received once). The
leftovers watch (:mod:`stress.statemachine.leftovers`) has a test of its own.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # ``pytest`` (not ``python -m pytest``) leaves the repo off the path
    sys.path.insert(0, str(ROOT))

from stress.statemachine import RetinueMachine  # noqa: E402
from stress.statemachine.leftovers import LEFT_BEHIND  # noqa: E402
from stress.statemachine.trace import STATS, Violation  # noqa: E402


@pytest.fixture
def machine() -> Iterator[RetinueMachine]:
    """A fresh machine with an async coordinator and two idle async leaves (follow-ups'
    targets); torn down after the test."""
    STATS.clear()
    m = RetinueMachine()
    try:
        m.first_agent("alead", "aspawn:aecho")
        m.settled_invariants()
        m.spawn_top("aecho", "echo", None, False, 2)
        m.settled_invariants()
        yield m
    finally:
        m.teardown()


def _checked(m: RetinueMachine) -> None:
    m.settled_invariants()
    m.drain()
    m.settled_invariants()


@pytest.mark.watchdog(120)
@pytest.mark.parametrize("hold", ["none", "host", "loop"])
@pytest.mark.parametrize("delay", [0.0, 0.002])
@pytest.mark.parametrize("release_at_once", [True, False])
def test_close_racing_turn_starts(
    machine: RetinueMachine, hold: str, delay: float, release_at_once: bool
) -> None:
    machine.close_racing_turn_starts(["spawn", "run", "follow_up"], hold, delay, release_at_once)
    _checked(machine)
    machine.close_racing_turn_starts(["follow_up", "spawn_sync"], hold, delay, release_at_once)
    _checked(machine)
    assert STATS["race:close_racing_turn_starts"] == 2
    assert any(key.startswith("loop_race_turn:") for key in STATS)


@pytest.mark.watchdog(120)
@pytest.mark.parametrize("how", ["interrupt", "interrupt_tree", "close"])
def test_interrupts_of_turns_queued_on_a_held_loop_never_run_them(
    machine: RetinueMachine, how: str
) -> None:
    machine.interrupt_queued_loop_turns(["follow_up", "spawn", "follow_up"], how, False)
    _checked(machine)
    # Every turn was interrupted before its start: none ran (the rule fails otherwise).
    assert STATS["loop_interrupt:unrun"] == 3 and STATS["loop_interrupt:ran"] == 0


@pytest.mark.watchdog(120)
@pytest.mark.parametrize("how", ["interrupt", "close"])
def test_interrupts_racing_the_loops_release(machine: RetinueMachine, how: str) -> None:
    machine.interrupt_queued_loop_turns(["spawn", "follow_up", "spawn"], how, True)
    _checked(machine)
    assert STATS["loop_interrupt:unrun"] + STATS["loop_interrupt:ran"] == 3


@pytest.mark.watchdog(120)
@pytest.mark.parametrize("at", [1, 3, 6])
@pytest.mark.parametrize("late", ["echo", "hold"])
def test_a_failed_close_cancels_the_turn_it_starts_as_its_loop_closes(
    machine: RetinueMachine, at: int, late: str
) -> None:
    machine.failed_close_racing_turn_starts(at, True, 2, late)
    _checked(machine)
    machine.failed_close_racing_turn_starts(at, False, 1, late)
    _checked(machine)
    assert STATS["cancelled_by_failed_close"] >= 2  # the holders' tasks, cancelled by the close


def test_the_leftovers_watch_reports_a_task_left_pending_once() -> None:
    LEFT_BEHIND.install()
    LEFT_BEHIND.take()
    logging.getLogger("asyncio").error("Task was destroyed but it is pending!")
    logging.getLogger("asyncio").warning("something else")
    assert LEFT_BEHIND.take() == ["Task was destroyed but it is pending!"]
    assert LEFT_BEHIND.take() == []
    logging.getLogger("retinue.executor").warning(
        "the runtime's event loop closed with 1 calls and 0 tasks still coming after 10 passes"
    )
    with pytest.raises(Violation, match="left work behind"):
        RetinueMachine.check_left_behind("the close")


def test_the_machine_knows_the_error_of_a_turn_its_loops_close_cut() -> None:
    from retinue.actors.turns._agent import NOT_BY_INTERRUPT
    from stress.statemachine.data import CUT_BY_CLOSE

    assert NOT_BY_INTERRUPT.text == CUT_BY_CLOSE
