"""One seeded search of a state machine, for the machines' long searches.

:func:`search` is what ``journal_run`` and ``retention_run`` share: it runs a
machine with hypothesis's settings for a long search (no deadline, no example
database, the slow health checks off) from one seed, and returns what
:data:`~stress.statemachine.trace.STATS` counted and the problem found, if any.
"""

from __future__ import annotations

import time
from typing import Any

from hypothesis.stateful import RuleBasedStateMachine

from stress.statemachine.trace import STATS

__all__ = ["search"]


def search(
    machine: type[RuleBasedStateMachine], prefix: str, max_examples: int, steps: int, seed: int
) -> dict[str, Any]:
    """Run ``machine`` for ``max_examples`` examples of ``steps`` steps from ``seed``.

    Returns ``counts`` (the machine's :data:`STATS`, ``prefix:`` taken off each
    name), ``problems`` (the failure's type and message, cut at 4,000
    characters; empty when none) and ``seconds``. A failure is caught and
    returned, never raised.
    """
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
    test = hypothesis.seed(seed)(get_state_machine_test(machine, settings=config))
    started = time.perf_counter()
    problems: list[str] = []
    try:
        test()
    except (AssertionError, hypothesis.errors.HypothesisException) as exc:
        problems.append(f"{type(exc).__name__}: {exc}"[:4000])
    return {
        "counts": {k.removeprefix(f"{prefix}:"): v for k, v in sorted(STATS.items())},
        "problems": problems,
        "seconds": round(time.perf_counter() - started, 1),
    }
