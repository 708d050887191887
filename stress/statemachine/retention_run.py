"""The retention machine's long search: ``python -m stress --only retention`` and
``python -m stress.statemachine --machine retention`` (:mod:`stress.statemachine.retention`;
CI runs it derandomized in ``tests/runtime/test_retention_machine.py``)."""

from __future__ import annotations

from typing import Any

from stress.parts import Options, Part, Result
from stress.statemachine.long_search import search
from stress.statemachine.retention import RetentionMachine

__all__ = ["PART", "run"]


def run(max_examples: int = 200, steps: int = 40, seed: int = 1) -> dict[str, Any]:
    """The long search (``python -m stress.statemachine --machine retention``, ``python -m
    stress --only retention``): a row with the counts reached and the problems found."""
    found = search(RetentionMachine, "retention", max_examples, steps, seed)
    counts = found["counts"]
    crashes = counts.get("crash", 0) + counts.get("cuts", 0)
    return {"examples": counts.get("open", 0), "crashes": crashes, **found}


def _part(options: Options) -> Result:
    """The retention machine (CI: derandomized in tests/runtime/test_retention_machine.py)."""
    found = run(30 if options.quick else 200, 25 if options.quick else 40, options.seed)
    title = (
        "retention machine: closes whose retention removes what they closed, cut by a crash "
        "between their commit and their spread deletes"
    )
    return Result.row(title, found, list(found.pop("problems")))


PART = Part("retention", _part, check=True, in_quick=False)
