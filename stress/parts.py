"""The one small interface every part of ``python -m stress`` has.

A :class:`Part` is a named check or benchmark: ``run(options)`` does the
work and returns a :class:`Result` (the tables it prints, what the JSON
keeps, and, for a check, the problems it found: any problem fails the run).
``python -m stress`` runs the parts of its table (:data:`stress.__main__.PARTS`)
in order; ``--only NAME`` one of them; ``--quick`` the short, seeded ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Options", "Part", "Result", "table"]


@dataclass(frozen=True)
class Options:
    """What the command line asked for: the short run, the seed, the sizes given.

    ``minutes``, ``soak_kills``, ``trees`` and ``sample_seconds`` shape the service soak;
    ``idle_sizes`` the idle-scale part's store sizes; ``agents`` and ``reps`` the
    durable-steps levels to run (by agents at once) and how many times.
    """

    quick: bool = False
    seed: int = 1
    kills: int | None = None
    soak_seconds: float | None = None
    minutes: float | None = None
    soak_kills: int | None = None
    trees: int | None = None
    sample_seconds: float | None = None
    idle_sizes: tuple[int, ...] | None = None
    agents: tuple[int, ...] | None = None
    reps: int | None = None


@dataclass
class Result:
    """What a part found: its tables (title, row), its data for the JSON, its problems."""

    tables: list[tuple[str, dict[str, Any]]]
    data: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def row(cls, title: str, row: dict[str, Any], problems: list[str] | None = None) -> Result:
        """A result of one table; the row is its data too (its problems counted, not listed)."""
        found = list(problems or [])
        shown = {k: v for k, v in row.items() if k != "problems"}
        if problems is not None:
            shown["problems"] = len(found)
        return cls([(title, shown)], {**row, "problems": found}, found)


@dataclass(frozen=True)
class Part:
    """One check or benchmark of the suite.

    ``check``: a correctness check, whose problems fail the run.
    ``in_quick``: run by ``--quick`` (CI); ``in_full``: run by a plain
    ``python -m stress`` (a part with neither runs only with ``--only``).
    """

    name: str
    run: Callable[[Options], Result]
    check: bool = False
    in_quick: bool = True
    in_full: bool = True


def table(title: str, row: dict[str, Any]) -> None:
    """Print one table: a title, then one aligned ``key value`` line per field."""
    print(f"\n{title}")
    if not row:
        return
    width = max(len(k) for k in row)
    for key, value in row.items():
        print(f"  {key:<{width}}  {value}")
