"""The journal machine's long search: ``python -m stress --only journal`` and
``python -m stress.statemachine --machine journal`` (:mod:`stress.statemachine.journal`;
CI runs it derandomized in ``tests/runtime/test_journal_machine.py``)."""

from __future__ import annotations

import time
from typing import Any

from stress.parts import Options, Part, Result
from stress.statemachine.journal import JournalMachine
from stress.statemachine.trace import STATS

__all__ = ["PART", "run"]


def run(max_examples: int = 100, steps: int = 30, seed: int = 1) -> dict[str, Any]:
    """The long search (``python -m stress.statemachine --machine journal``, ``python -m
    stress --only journal``): a row with the counts reached and the problems found."""
    import hypothesis
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import get_state_machine_test

    STATS.clear()
    config = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    test = hypothesis.seed(seed)(get_state_machine_test(JournalMachine, settings=config))
    started = time.perf_counter()
    problems: list[str] = []
    try:
        test()
    except (AssertionError, hypothesis.errors.HypothesisException) as exc:
        problems.append(f"{type(exc).__name__}: {exc}"[:4000])
    counts = {k.removeprefix("journal:"): v for k, v in sorted(STATS.items())}
    return {
        "examples": STATS["journal:drain"],
        "crashes": STATS["journal:crash"],
        "counts": counts,
        "problems": problems,
        "seconds": round(time.perf_counter() - started, 1),
    }


def _part(options: Options) -> Result:
    """The journal machine (CI runs it derandomized in tests/runtime/test_journal_machine.py)."""
    found = run(30 if options.quick else 100, 20 if options.quick else 30, options.seed)
    title = (
        "journal machine: calls in doubt across crashes between an effect and its record, "
        "by effect class, with approvals and repeated call ids"
    )
    return Result.row(title, found, list(found.pop("problems")))


PART = Part("journal", _part, check=True, in_quick=False)
