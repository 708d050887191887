"""The instructions-per-lifecycle benchmark (``python -m stress --only lifecycle_instructions``).

Its driver runs as a plain script in ``tests/test_llm_instructions.py`` (with
the llm bench's: no valgrind, a tiny N, both kinds); here a bad kind is refused
and a missing valgrind is a skip with its reason. No figure is asserted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # ``pytest`` (not ``python -m pytest``) leaves the repo off the path
    sys.path.insert(0, str(ROOT))

from stress.bench import lifecycle_instructions, llm_instructions  # noqa: E402


def test_driver_rejects_a_bad_kind() -> None:
    with pytest.raises(ValueError, match="usage: lifecycle"):
        lifecycle_instructions.drive("both", 1)


def test_missing_valgrind_is_a_skip_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_instructions, "VALGRIND", "no-such-valgrind-here")
    row = lifecycle_instructions.run(1, 1)
    assert row == {"instructions": "skipped: valgrind is not installed (apt-get install valgrind)"}
