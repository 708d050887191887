"""Damage suite: open deliberately damaged stores and check nothing worse than a typed error.

A sample store (agents in a tree, messages, completions, closed agents) is
built once. Each case copies it, damages the copy in one way, and has a
worker *child process* open it read-only, then for writing (and do one turn
of work). The worker answers one JSON line per open; if it dies, the signal
is the verdict for that case and a new worker takes the next case.

Damages: truncation of ``data.mdb`` at every page boundary (and inside a
page), an empty or deleted ``data.mdb``, flipped bytes at random offsets,
random bytes scribbled over part of a page, zeroed pages (each page in turn),
garbage ``writer.lock`` / ``lock.mdb`` / ``retinue.json`` files.

Damage in use: truncation at page boundaries and zeroed pages applied by the
worker itself to a store it has open (as writer, then read-only), followed by
one turn of work or a read; the outcome must be a typed error or the work done.

Every outcome must be a typed ``RetinueError`` or an open (with per-record
diagnostics where records were damaged). A problem is: a signal, a hang, an
untyped exception, or a silently empty store (an open that finds no agent and
reports no diagnostic when the sample had many).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.damage.cases import Case, build_sample, cases, in_use_cases
from stress.damage.worker import Worker
from stress.parts import Options, Part, Result

__all__ = ["PART", "Tally", "judge", "run"]


@dataclass
class Tally:
    """What the suite saw."""

    cases: int = 0
    opens: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # typed errors other than StoreCorrupted


def judge(case: Case, verdict: dict[str, Any], sample_agents: int, tally: Tally) -> None:
    """Count one verdict; record a problem if it is not a typed error or a sound open."""
    tally.opens += 1
    outcome = verdict["outcome"]
    where = f"{case.name()} ({verdict['mode']})"
    if outcome == "typed":
        tally.outcomes["typed_error"] += 1
        tally.errors[verdict["error"]] += 1
        if verdict["error"] != "StoreCorrupted" and len(tally.notes) < 5:
            tally.notes.append(f"{where}: {verdict['error']}: {verdict.get('message', '')}")
        return
    if outcome == "open":
        agents, diagnostics = verdict["agents"], verdict["diagnostics"]
        if agents == 0 and diagnostics == 0 and sample_agents > 0 and "in_use" not in where:
            tally.outcomes["silently_empty"] += 1
            tally.problems.append(f"{where}: opened as an empty store with no diagnostic")
        elif diagnostics:
            tally.outcomes["open_with_diagnostics"] += 1
        elif agents == sample_agents:
            tally.outcomes["open_intact"] += 1
        else:
            tally.outcomes["open_changed"] += 1
        return
    tally.outcomes[outcome] += 1
    detail = verdict.get("code", verdict.get("message", ""))
    tally.problems.append(f"{where}: {outcome} {verdict.get('error', '')} {detail}".strip())


def run(workdir: Path, quick: bool, seed: int) -> dict[str, Any]:
    """Build the sample, run every case, return the figures (``problems`` lists failures)."""
    from retinue.persistence.integrity import read_meta_pages

    started = time.perf_counter()
    sample = workdir / "sample"
    sample_agents = build_sample(sample, agents=24 if quick else 90)
    data_size = (sample / "data.mdb").stat().st_size
    page = max(read_meta_pages(sample / "data.mdb"), key=lambda m: m.txnid).page_size
    todo = cases(data_size, page, quick, seed)
    tally = Tally()
    worker = Worker()
    try:
        for number, case in enumerate(todo):
            folder = workdir / f"case{number}"
            shutil.copytree(sample, folder)
            case.apply(folder, page)
            tally.cases += 1
            for mode in ("readonly", "writer"):
                if not worker.alive:
                    worker = Worker()
                judge(case, worker.ask(folder, mode), sample_agents, tally)
            shutil.rmtree(folder, ignore_errors=True)
        for number, case in enumerate(in_use_cases(data_size, page, quick, seed)):
            tally.cases += 1
            for mode in ("readonly_in_use", "writer_in_use"):
                folder = workdir / f"in_use{number}_{mode}"
                shutil.copytree(sample, folder)
                if not worker.alive:
                    worker = Worker()
                judge(case, worker.ask(folder, mode, case, page), sample_agents, tally)
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        worker.close()
    return {
        "sample_agents": sample_agents,
        "sample_pages": data_size // page,
        "cases": tally.cases,
        "opens": tally.opens,
        **{k: tally.outcomes.get(k, 0) for k in _OUTCOMES},
        "error_types": dict(tally.errors.most_common()),
        "other_errors": tally.notes,
        "seconds": round(time.perf_counter() - started, 1),
        "problems": tally.problems,
    }


_OUTCOMES = (
    "typed_error",
    "open_intact",
    "open_with_diagnostics",
    "open_changed",
    "silently_empty",
    "signal",
    "hang",
    "untyped",
    "exit",
)


def _part(options: Options) -> Result:
    """Damaged store files opened in a child: typed errors, never a crash."""
    with tempfile.TemporaryDirectory() as tmp:
        row = run(Path(tmp), options.quick, options.seed)
    problems = list(row["problems"])
    shown = {k: v for k, v in row.items() if k not in ("problems", "other_errors")}
    title = "damage: truncated, flipped, zeroed, lost and garbage store files, opened in a child"
    result = Result.row(title, shown, problems)
    result.data = row
    result.notes = list(row["other_errors"])
    return result


PART = Part("damage", _part, check=True)
