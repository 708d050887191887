"""The stateful property test of the runtime (``stress/statemachine/``) with short CI settings.

Derandomized, so every CI run explores the same 50 programs of up to 35
steps (about 10 s on two quiet cores, 25 s under load). This is the one place CI runs the machine
(``python -m stress --quick`` leaves it out); ``python -m stress`` and
``--only statemachine`` run the long, seeded search, and
``python -m stress.statemachine --minutes N`` searches seed after seed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis.stateful import run_state_machine_as_test

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # ``pytest`` (not ``python -m pytest``) leaves the repo off the path
    sys.path.insert(0, str(ROOT))

from stress.statemachine import RetinueMachine, ci_settings  # noqa: E402
from stress.statemachine.trace import STATS  # noqa: E402

# Rules and runner paths the CI run must reach: a precondition that never holds,
# or a runner that never gets there, would pass silently without this.
MUST_RUN = (
    "turns_async",  # async runners awaiting the turn's *_async twins
    "async_wait_completions",  # an async turn received a child's completion from wait_async
    "race:async_runner_closes_runtime",
    "race:host_loop_busy_at_close",
    "race:interrupt_racing_async_wait",
    "race:host_inbox_wait",
    "race:flood_host_inbox",
    "race:cancelled_messages_async",
    "host_inbox_read",
    "interrupt_tree",
    "idempotent_retry",
    "race:drain",
    "reopens",
    "fault:Settle",  # a settle that failed at a random change ended its turn failed
    "rescued_turns",
    "wakes_failed_with_inputs",  # a woken coordinator failed after receiving completions
    "runners_cancelled_themselves",  # a CancelledError nobody asked for: a failure
    "inputs_handed_on",  # the next turn of a turn that did not complete got its inputs
    "failing_wake",
    "call:run",  # the host's spawn-and-wait in one command (rt.run)
    "race:close_racing_turn_starts",  # turn starts racing the close (loop free, held, closing)
    "race:interrupt_queued_loop_turns",  # interrupts of turns queued behind a held loop
    "race:failed_close_racing_turn_starts",  # a failed Shutdown while the next turn starts
)


@pytest.mark.watchdog(600)  # the search's own bound: it runs long under load
def test_runtime_state_machine() -> None:
    STATS.clear()
    run_state_machine_as_test(RetinueMachine, settings=ci_settings(max_examples=50, steps=35))
    missed = [key for key in MUST_RUN if STATS[key] == 0]
    assert not missed, f"the CI run never reached {missed}"
