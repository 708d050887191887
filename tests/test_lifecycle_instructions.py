"""The instructions-per-lifecycle benchmark (``python -m stress --only lifecycle_instructions``).

Its driver runs as a plain script here (no valgrind: that is the benchmark's
job, 30-100x slower), on a tiny N, both kinds; a bad kind is refused; a
missing valgrind is a skip with its reason. No figure is asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # ``pytest`` (not ``python -m pytest``) leaves the repo off the path
    sys.path.insert(0, str(ROOT))

from stress.bench import lifecycle_instructions, llm_instructions  # noqa: E402


@pytest.mark.parametrize("kind", ["lifecycle", "tree"])
def test_driver_runs_as_a_plain_script(kind: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), LITELLM_LOCAL_MODEL_COST_MAP="True")
    done = subprocess.run(
        [sys.executable, "-m", "stress.bench.lifecycle_instructions", kind, "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "2"


def test_driver_rejects_a_bad_kind() -> None:
    with pytest.raises(ValueError, match="usage: lifecycle"):
        lifecycle_instructions.drive("both", 1)


def test_missing_valgrind_is_a_skip_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_instructions, "VALGRIND", "no-such-valgrind-here")
    row = lifecycle_instructions.run(1, 1)
    assert row == {"instructions": "skipped: valgrind is not installed (apt-get install valgrind)"}
