"""Durable-steps benchmark: what a durable tool step costs, retinue against DBOS and LangGraph.

``python -m stress --only durable_steps``. Every contender runs agents at
once (1, 100 and 1,000 in the full run; 1 and 10 with ``--quick``), each
doing a fixed number of sequential tool steps, every step durably recorded
before the agent goes on:

- ``retinue``: model turns (durability ``full``) on an offline model through
  litellm's real call path, a host ``@tool`` per step
  (:mod:`stress.bench.durable_retinue`);
- ``dbos``: DBOS Transact ``@DBOS.step()`` in a workflow per agent, SQLite;
- ``langgraph``: LangGraph ``SqliteSaver``, a tool node looping per thread
  (:mod:`stress.bench.durable_peers`);
- ``fsync``: the floor, a raw 4 KiB write + fsync per step
  (:mod:`stress.bench.durable_common`);
- the breakdown of retinue's step: ``retinue_commits_only`` (a journaled tool
  step without a model call: the same two commits per step, the call's
  intent in the first, its result in the second, through the supervisor as a
  model turn's) and ``raw_litellm_loop`` (the same model and tool in a bare
  litellm loop, nothing stored).

Figures per level: steps/s over the whole run (wall), p50/p99 of one step's
latency (between two steps of one agent), the process's CPU per step; the
ratios of retinue's steps/s against each; peers that are not installed are
skipped with the reason. At each level every group of contenders runs in a
fresh interpreter of its own (``python -m stress.bench.durable_steps``), one
group after another: no state, thread or import of one disturbs another, and
what is compared was measured close in time. The full run repeats it all
:data:`FULL_REPS` times. ``--agents 100`` runs only the level of 100 agents
at once (``--reps N``: N repetitions; :func:`levels_for`). One run, one
machine: the figures are comparable within it only.

The child's environment keeps DBOS and LangGraph local: no ``DBOS*``
variable passes (a Conductor key or DBOS Cloud's would make DBOS dial out),
LangSmith tracing is off, litellm reads its bundled cost map.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stress.bench.durable_common import Contender, FsyncFloor, StepClock, StepRun
from stress.bench.durable_peers import PEERS, missing
from stress.bench.durable_table import level_tables
from stress.parts import Options, Part, Result

__all__ = [
    "FULL",
    "FULL_REPS",
    "GROUPS",
    "MARK",
    "QUICK",
    "Level",
    "levels_for",
    "measure",
    "run",
    "run_group",
]

ROOT = Path(__file__).resolve().parents[2]

Level = tuple[int, int, int]
"""``(agents at once, steps per agent, rounds)``: rounds run one after another."""

FULL: list[Level] = [(1, 20, 10), (100, 10, 1), (1000, 5, 1)]
FULL_REPS = 3
"""Repetitions of the full run: each figure is the median repetition's, each ratio the
median of the repetitions' own (measured minutes apart on a shared machine)."""
QUICK: list[Level] = [(1, 3, 3), (10, 3, 1)]

GROUPS: list[list[str]] = [
    ["fsync"],
    ["dbos"],
    ["langgraph"],
    ["retinue", "retinue_commits_only", "raw_litellm_loop"],
]
"""The contenders, by the interpreter each group runs in (retinue's three share one import
of litellm, and alternate at each level)."""

MARK = "durable-steps-rows: "
"""The child's line of rows on stdout (a peer may print lines of its own)."""

WARM_UP_ID = 10**7
"""The id of each level's untimed warm-up agent (two steps)."""


def _contender(name: str) -> Contender:
    """A new contender by name (peers and litellm are imported only here, in the child)."""
    if name == "fsync":
        return FsyncFloor()
    if name in ("dbos", "langgraph"):
        from stress.bench.durable_peers import DbosSteps, LangGraphSteps

        return DbosSteps() if name == "dbos" else LangGraphSteps()
    from stress.bench.durable_retinue import RawLoop, RetinueCommits, RetinueSteps

    kinds: dict[str, Callable[[], Contender]] = {
        "retinue": RetinueSteps,
        "retinue_commits_only": RetinueCommits,
        "raw_litellm_loop": RawLoop,
    }
    return kinds[name]()


def measure(name: str, level: Level, folder: Path) -> dict[str, Any]:
    """Run one contender at one level in ``folder``; return its row.

    The level's store is opened once; one untimed agent of two steps warms it
    up; then ``rounds`` rounds of ``agents`` agents at once are timed (wall and
    the process's CPU, every thread).
    """
    agents, steps, rounds = level
    contender = _contender(name)
    contender.open(folder, agents, steps)
    clock = StepClock()
    try:
        contender.run_agents(WARM_UP_ID, 1, 2, StepClock())
        load = os.getloadavg()[0]
        wall, cpu = time.perf_counter(), time.process_time()
        for round_ in range(rounds):
            contender.run_agents(round_ * agents, agents, steps, clock)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        extra = contender.close()
    run = StepRun(agents, steps, rounds, wall, clock.steps(), clock.intervals(), extra)
    row = run.row()
    row["cpu_ms_per_step"] = round(cpu / max(run.done_steps, 1) * 1000, 3)
    row["load_avg_1m_before"] = round(load, 2)
    return row


def run_group(names: list[str], levels: list[Level], timeout_s: float) -> dict[str, Any]:
    """Run ``names`` in a fresh interpreter, level by level; return ``{name: [rows]}``.

    A group whose child fails returns ``{name: {"failed": <its stderr's end>}}``.
    """
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("DBOS")},
        "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LANGSMITH_TRACING": "false",  # LangGraph's tracer stays off (it is off unless set)
        "LANGCHAIN_TRACING_V2": "false",
    }
    spec = ",".join(f"{a}x{s}x{r}" for a, s, r in levels)
    command = [sys.executable, "-m", "stress.bench.durable_steps", ",".join(names), spec]
    try:
        out = subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return {name: {"failed": f"timed out after {timeout_s:.0f} s"} for name in names}
    if out.returncode != 0:
        return {name: {"failed": out.stderr[-2000:]} for name in names}
    lines = [line for line in out.stdout.splitlines() if line.startswith(MARK)]
    if not lines:
        return {name: {"failed": f"no rows printed: {out.stderr[-2000:]}"} for name in names}
    rows: dict[str, Any] = json.loads(lines[-1][len(MARK) :])
    return rows


def _groups() -> tuple[list[list[str]], dict[str, str]]:
    """The groups to run (peers not installed left out) and why each one left out is."""
    skipped = {name: reason for name in PEERS if (reason := missing(name)) is not None}
    groups = [[name for name in group if name not in skipped] for group in GROUPS]
    return [group for group in groups if group], skipped


def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of the median repetition by steps/s, with every repetition's steps/s."""
    ordered = sorted(rows, key=lambda row: float(row["steps_per_s"]))
    return {
        **ordered[(len(ordered) - 1) // 2],
        "steps_per_s_reps": [row["steps_per_s"] for row in rows],
    }


def run(levels: list[Level], reps: int = 1, timeout_s: float = 1800.0) -> dict[str, Any]:
    """Run every installed contender at ``levels``, ``reps`` times; return the data.

    Each repetition runs the levels in order and, at each level, every group
    in a child of its own, one after another: what is compared was measured
    close in time. ``rows`` holds each contender's median repetition per
    level, ``reps`` every repetition's rows (``[level][rep]``), ``skipped``
    the peers not installed and why, ``failed`` the groups whose child failed.
    """
    groups, skipped = _groups()
    every: dict[str, list[list[dict[str, Any]]]] = {}
    failed: dict[str, str] = {}
    for _ in range(reps):
        for index, level in enumerate(levels):
            for group in groups:
                for name, got in run_group(group, [level], timeout_s).items():
                    if isinstance(got, dict):
                        failed.setdefault(name, got["failed"])
                        continue
                    every.setdefault(name, [[] for _ in levels])[index] += got
    every = {name: by_level for name, by_level in every.items() if name not in failed}
    return {
        "levels": [{"agents": a, "steps_per_agent": s, "rounds": r} for a, s, r in levels],
        "repetitions": reps,
        "rows": {name: [_median(rows) for rows in by_level] for name, by_level in every.items()},
        "reps": every,
        "skipped": skipped,
        "failed": failed,
    }


def levels_for(options: Options) -> tuple[list[Level], int]:
    """The levels and repetitions ``options`` ask for: the quick or full run's, or only
    the levels of ``options.agents`` (``--agents``: agents at once; a number neither run
    has gets 10 steps per agent, one round), ``options.reps`` times (``--reps``)."""
    base, reps = (QUICK, 1) if options.quick else (FULL, FULL_REPS)
    if options.agents:
        known = {level[0]: level for level in (*QUICK, *FULL)}
        known.update({level[0]: level for level in base})  # this run's own level first
        base = [known.get(agents, (agents, 10, 1)) for agents in options.agents]
    return base, options.reps if options.reps else reps


def _part(options: Options) -> Result:
    levels, reps = levels_for(options)
    data = run(levels, reps=reps)
    tables, ratios = level_tables(data)
    data["ratios"] = ratios
    notes = [f"{name} skipped: {reason}" for name, reason in data["skipped"].items()]
    problems = [f"{name} failed: {error}" for name, error in data["failed"].items()]
    return Result(tables, data, problems, notes)


PART = Part("durable_steps", _part)


def main() -> None:
    """``python -m stress.bench.durable_steps NAMES LEVELS``: print ``{name: [rows]}`` as JSON.

    ``NAMES``: contenders, comma-separated; ``LEVELS``: ``AxSxR`` (agents,
    steps, rounds), comma-separated. Each level of each contender runs in a
    temporary folder of its own.
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names")
    parser.add_argument("levels")
    args = parser.parse_args()
    from stress.bench.stub_server import raise_fd_limit

    raise_fd_limit(16_384)
    levels = [tuple(int(n) for n in spec.split("x")) for spec in args.levels.split(",")]
    names = args.names.split(",")
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for agents, steps, rounds in levels:
        for name in names:  # the group's contenders alternate, level by level
            with tempfile.TemporaryDirectory(prefix=f"durable-{name}-") as tmp:
                rows[name].append(measure(name, (agents, steps, rounds), Path(tmp)))
    print(MARK + json.dumps(rows))


if __name__ == "__main__":
    main()
