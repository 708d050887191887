"""The restart state machine (``stress/statemachine/restarts.py``), short and derandomized.

Every task ends in exactly one completion whatever its attempts, also across
interrupts, closes, clean reopens, crashes (a consistent copy of the running
store, opened while the old runtime is thrown away) and opens without the
profiles (which must end no supervised work and decide nothing: the next open
with them decides), and faults injected into settles, turn timeouts and due
restarts (the turn ends ``failed`` with InternalError, once; nothing strands);
the model predicts each task's status, attempt and error type from its plan
(permanent failures and timeouts included).
Every host message is consumed by exactly one attempt that completed (or is
still unread), and an attempt that failed hands its messages to the next.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis.stateful import run_state_machine_as_test

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # ``pytest`` (not ``python -m pytest``) leaves the repo off the path
    sys.path.insert(0, str(ROOT))

from stress.statemachine import ci_settings  # noqa: E402
from stress.statemachine.restarts import RestartMachine  # noqa: E402
from stress.statemachine.trace import STATS  # noqa: E402

# What the CI run must reach, or the run proves less than it claims.
MUST_RUN = (
    "restart:drain",
    "restart:crash",
    "restart:reopen",
    "restart:interrupt:restarting",
    "restart:outcome:completed:2",
    "restart:outcome:completed:3",
    "restart:outcome:failed:3",
    "restart:outcome:interrupted:2",
    "restart:reopen_bare",
    "restart:bare:kept:restarting",
    "restart:error_type:PermanentError",
    "restart:error_type:RestartLimitExceeded",
    "restart:send",
    "restart:inputs_handed_on",  # an attempt that failed handed its messages to the next
    "restart:bare:lost:restarting",  # an open without the profiles recorded a loss
    "restart:fault:Settle",  # the fault rule: a settle, a turn timeout, a due restart failed
    "restart:fault:ExpireTurn",
    "restart:fault:FireRestarts",
    "restart:rescued_completions",  # ... and their turns ended failed with InternalError, once
)


@pytest.mark.watchdog(600)  # the search's own bound: it runs long under load
def test_restart_state_machine() -> None:
    STATS.clear()
    run_state_machine_as_test(RestartMachine, settings=ci_settings(max_examples=40, steps=25))
    missed = [key for key in MUST_RUN if STATS[key] == 0]
    assert not missed, f"the CI run never reached {missed}; it reached {sorted(STATS)}"
