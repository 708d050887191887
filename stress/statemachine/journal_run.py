"""The journal machine's long search: ``python -m stress --only journal`` and
``python -m stress.statemachine --machine journal`` (:mod:`stress.statemachine.journal`;
CI runs it derandomized in ``tests/runtime/test_journal_machine.py``)."""

from __future__ import annotations

from typing import Any

from stress.parts import Options, Part, Result
from stress.statemachine.journal import JournalMachine
from stress.statemachine.long_search import search

__all__ = ["PART", "run"]


def run(max_examples: int = 100, steps: int = 30, seed: int = 1) -> dict[str, Any]:
    """The long search (``python -m stress.statemachine --machine journal``, ``python -m
    stress --only journal``): a row with the counts reached and the problems found."""
    found = search(JournalMachine, "journal", max_examples, steps, seed)
    counts = found["counts"]
    return {"examples": counts.get("drain", 0), "crashes": counts.get("crash", 0), **found}


def _part(options: Options) -> Result:
    """The journal machine (CI runs it derandomized in tests/runtime/test_journal_machine.py)."""
    found = run(30 if options.quick else 100, 20 if options.quick else 30, options.seed)
    title = (
        "journal machine: calls in doubt across crashes between an effect and its record, "
        "by effect class, with approvals and repeated call ids"
    )
    return Result.row(title, found, list(found.pop("problems")))


PART = Part("journal", _part, check=True, in_quick=False)
