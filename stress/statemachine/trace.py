"""What a run of the machines records: the example's trace, its violations, the counters.

``TRACE`` holds the current example's calls, newest last. :func:`fail`
records a :class:`Violation` with that trace and raises it, so the report
keeps it even when hypothesis cannot replay a failure that depended on
thread timing; :func:`record_failures` wraps every rule of a machine so any
other exception is recorded the same way. ``STATS`` counts what the runs
reached (rules, runner paths, the typed errors raised): the CI tests assert
their ``MUST_RUN`` keys, the long search prints them.
"""

from __future__ import annotations

import functools
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["STATS", "TRACE", "VIOLATIONS", "Violation", "fail", "record_failures"]


class Violation(AssertionError):
    """An invariant or a call's contract did not hold."""


TRACE: list[str] = []  # the current example's calls, newest last
VIOLATIONS: list[str] = []  # every violation seen, with its example's trace


def fail(message: str) -> NoReturn:
    """Record and raise a :class:`Violation` (recorded even if hypothesis cannot replay it)."""
    VIOLATIONS.append(message + "\n  after: " + "\n         ".join(TRACE[-30:]))
    raise Violation(message)


STATS: Counter[str] = Counter()


def _recording(function: Callable[..., Any], name: str) -> Callable[..., Any]:
    """Wrap a rule so an exception other than a Violation is recorded with its traceback.

    Hypothesis may replace a failure it cannot replay (threads make replays
    differ) with ``FlakyStrategyDefinition``; the recorded text keeps the
    original error and the calls before it for the report.
    """

    @functools.wraps(function)
    def rule_body(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except Violation:
            raise
        except BaseException as exc:
            tail = "".join(traceback.format_exception(exc))[-2000:]
            VIOLATIONS.append(
                f"{name} raised {type(exc).__name__}: {exc}\n{tail}\n  after: "
                + "\n         ".join(TRACE[-30:])
            )
            raise

    return rule_body


def record_failures(machine: type) -> None:
    """Wrap every rule, initializer and invariant of ``machine`` with :func:`_recording`."""
    for name in dir(machine):
        marked = getattr(machine, name)
        for marker in (
            "hypothesis_stateful_rule",
            "hypothesis_stateful_initialize_rule",
            "hypothesis_stateful_invariant",
        ):
            spec = getattr(marked, marker, None)
            if spec is not None and hasattr(spec, "function"):
                # The rule records are frozen; the function is the one thing swapped.
                object.__setattr__(spec, "function", _recording(spec.function, name))
