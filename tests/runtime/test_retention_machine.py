"""The retention machine (``stress/statemachine/retention.py``), short and derandomized.

A small ``retain_closed_agents`` makes a close remove the agents it closed in
the same command, their deletes spread over the transactions after its
commit; the rules cut such closes (and single closes and compactions) with a
crash before a spread transaction (the first or a later one), crash at a
quiet point and reopen. After every step: every agent the host saw live is
live, none it closed is, every live agent's parent is live; every store a
crash or reopen left holds no live agent under a closed parent and breaks no
invariant of ``retinue.testing.invariants``, and opens with no diagnostic.
Before the fix in ``retinue/actors/tree/_tree.py`` (``_removed_unwritten``)
the cut found the leaves of a closed lead stored live under it.
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
from stress.statemachine.retention import RetentionMachine  # noqa: E402
from stress.statemachine.trace import STATS  # noqa: E402

# What the CI run must reach, or the run proves less than it claims.
MUST_RUN = (
    "retention:cut:close_tree_removing",  # the cut: a close that removed what it closed
    "retention:close_tree_removing",
    "retention:close_refused",
    "retention:compact",
    "retention:crash",
    "retention:reopen",
    "retention:spawn_boss",
)


@pytest.mark.watchdog(600)  # the search's own bound: it runs long under load
def test_retention_state_machine() -> None:
    STATS.clear()
    run_state_machine_as_test(RetentionMachine, settings=ci_settings(max_examples=30, steps=25))
    missed = [key for key in MUST_RUN if STATS[key] == 0]
    assert not missed, f"the CI run never reached {missed}; it reached {sorted(STATS)}"
