"""The stateful property test of the runtime (``stress/statemachine/``) with short CI settings.

Derandomized, so every CI run explores the same 25 programs of up to 30
steps. This is the one place CI runs the machine (``python -m stress --quick``
leaves it out); ``python -m stress`` and ``--only statemachine`` run the long,
seeded search.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis.stateful import run_state_machine_as_test

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # ``pytest`` (not ``python -m pytest``) leaves the repo off the path
    sys.path.insert(0, str(ROOT))

from stress.statemachine import RetinueMachine, ci_settings  # noqa: E402


def test_runtime_state_machine() -> None:
    run_state_machine_as_test(  # type: ignore[no-untyped-call]
        RetinueMachine, settings=ci_settings(max_examples=25, steps=30)
    )
