"""The retention machine's long search: ``python -m stress --only retention`` and
``python -m stress.statemachine --machine retention`` (:mod:`stress.statemachine.retention`;
CI runs it derandomized in ``tests/runtime/test_retention_machine.py``)."""

from __future__ import annotations

import time
from typing import Any

from stress.parts import Options, Part, Result
from stress.statemachine.retention import RetentionMachine
from stress.statemachine.trace import STATS

__all__ = ["PART", "run"]


def run(max_examples: int = 200, steps: int = 40, seed: int = 1) -> dict[str, Any]:
    """The long search (``python -m stress.statemachine --machine retention``, ``python -m
    stress --only retention``): a row with the counts reached and the problems found."""
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
    test = hypothesis.seed(seed)(get_state_machine_test(RetentionMachine, settings=config))
    started = time.perf_counter()
    problems: list[str] = []
    try:
        test()
    except (AssertionError, hypothesis.errors.HypothesisException) as exc:
        problems.append(f"{type(exc).__name__}: {exc}"[:4000])
    counts = {k.removeprefix("retention:"): v for k, v in sorted(STATS.items())}
    return {
        "examples": STATS["retention:open"],
        "crashes": STATS["retention:crash"] + STATS["retention:cuts"],
        "counts": counts,
        "problems": problems,
        "seconds": round(time.perf_counter() - started, 1),
    }


def _part(options: Options) -> Result:
    """The retention machine (CI: derandomized in tests/runtime/test_retention_machine.py)."""
    found = run(30 if options.quick else 200, 25 if options.quick else 40, options.seed)
    title = (
        "retention machine: closes whose retention removes what they closed, cut by a crash "
        "between their commit and their spread deletes"
    )
    return Result.row(title, found, list(found.pop("problems")))


PART = Part("retention", _part, check=True, in_quick=False)
