"""The journal machine (``stress/statemachine/journal.py``), short and derandomized.

Real model turns (an offline model through litellm) call host tools of each
effect class whose every run is written to a ledger outside the store; the
process "dies" between a call's effect and the commit of its result (a
consistent copy of the running store is opened while the old runtime is
thrown away), also during reruns, while a person is asked and during an
approved rerun; the host interrupts an agent while its tool runs; resumes and
follow-ups settle the calls in doubt; models repeat call ids within and
across steps. After every
step: an unsafe call ran at most once per key (plus reruns a person
approved), an idempotent call's key never changed, every call in doubt got
one action of its class and one ``ToolCallInDoubt``, nothing acknowledged
was lost; at the end the model read one true result per call.
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
from stress.statemachine.journal import JournalMachine  # noqa: E402
from stress.statemachine.trace import STATS  # noqa: E402

# What the CI run must reach, or the run proves less than it claims.
MUST_RUN = (
    "journal:spawn",
    "journal:crash_in_step",
    "journal:crash_in_resume",
    "journal:crash:after_effect",  # a tool's effect done, its result not committed
    "journal:crash:before_effect",  # a tool started, its effect not done
    "journal:interrupt:after_effect",  # the host interrupts while a tool runs
    "journal:interrupt:before_effect",  # ... whose effect then happens after the turn ended
    "journal:follow_up",  # a follow-up's turn settles the calls in doubt first
    "journal:notes_read",  # the host's messages reached the model once, across crashes
    "journal:crash_while_asking",  # a person asked about a call in doubt when it died
    "journal:crash_in_approved_rerun",  # an approved rerun cut short: in doubt again
    "journal:found:read:shop",  # calls found in doubt, of each class and mode
    "journal:found:idempotent:shop",
    "journal:found:unsafe:shop",
    "journal:found:read:asks",
    "journal:found:idempotent:asks",
    "journal:found:unsafe:asks",
    "journal:resume",
    "journal:approved",
    "journal:denied",
    "journal:reported_read",  # the model read the in-doubt message for an unsafe call
    "journal:denied_read",  # ... with a person's reason
    "journal:unsafe_rerun_approved",
    "journal:ids:fresh",
    "journal:ids:step",  # a provider that repeats one id within a step
    "journal:ids:across",  # ... and the same ids step after step
    "journal:reopen",
    "journal:drain",
)


@pytest.mark.watchdog(900)  # the search's own bound: it runs long under load
def test_journal_state_machine() -> None:
    STATS.clear()
    run_state_machine_as_test(JournalMachine, settings=ci_settings(max_examples=30, steps=20))
    missed = [key for key in MUST_RUN if STATS[key] == 0]
    assert not missed, f"the CI run never reached {missed}; it reached {sorted(STATS)}"
