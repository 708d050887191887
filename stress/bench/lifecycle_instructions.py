"""CPU instructions per Python-agent lifecycle and per agent of a 3-level tree, by callgrind.

The ``lifecycle`` and ``trees`` parts measure wall rates, which swing with
the machine's load (on a shared 2-core machine, by 2x between two runs);
the instructions a piece of work executes barely move (0.1 % between runs
here), so a change's cost shows even on a loaded machine. The driver
(``python -m stress.bench.lifecycle_instructions lifecycle|tree N``) opens a
runtime (durability ``buffered``: an fsync is no instruction of ours), warms
up, then does ``N`` pieces of work one after another from one host thread:

- ``lifecycle``: spawn a Python agent, wait for it, close it (what the
  ``lifecycle`` part does from 32 threads);
- ``tree``: spawn a lead that runs 2 mids with ``run_many``, each running 2
  leaves, wait for the lead, close the tree (the ``trees`` part's shape, 7
  agents, sync runners).

:func:`measure` runs the driver under callgrind with ``N`` and ``2N`` (every
thread counted) and divides the difference by ``N`` (a tree's by ``7 N``,
per agent), as :mod:`stress.bench.llm_instructions` does: the imports, the
open, the warm-up and the close cancel out.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from stress.bench import llm_instructions
from stress.parts import Options, Part, Result

__all__ = ["PART", "drive", "measure", "run"]

WARM_UP = 10
"""Untimed lifecycles (or trees) before the measured ones."""
TREE_AGENTS = 7
"""Agents per tree: a lead, 2 mids, 4 leaves."""
KINDS = ("lifecycle", "tree")


def _answer(turn: Any) -> str:
    return "done"


def _mid(turn: Any) -> str:
    turn.run_many([("leaf", "l1"), ("leaf", "l2")], timeout=600)
    return "mid"


def _lead(turn: Any) -> str:
    turn.run_many([("mid", "m1"), ("mid", "m2")], timeout=600)
    return "lead"


def drive(kind: str, n: int) -> int:
    """Warm up, then do ``n`` lifecycles or trees (``kind``) one after another; return ``n``.

    Raises:
        ValueError: ``kind`` is neither ``lifecycle`` nor ``tree``, or ``n`` < 0.
    """
    if kind not in KINDS or n < 0:
        raise ValueError(f"usage: lifecycle|tree N (N >= 0), got {kind!r} {n}")
    from retinue import Durability, Limits, Profile, Runtime

    if kind == "lifecycle":
        profiles, top = [Profile("w", runner=_answer)], "w"
    else:
        profiles = [
            Profile("lead", subagents=["mid"], runner=_lead),
            Profile("mid", subagents=["leaf"], runner=_mid),
            Profile("leaf", runner=_answer),
        ]
        top = "lead"
    # No background compaction: its 60 s timer lands in the run of n or of 2n (valgrind runs
    # last minutes), and one Compact is worth tens of thousands of instructions per turn.
    limits = Limits(max_agents=64, wait_max_s=3600.0, compact_interval_s=86_400.0)
    with (
        tempfile.TemporaryDirectory() as tmp,
        Runtime.open(
            Path(tmp), profiles=profiles, limits=limits, durability=Durability.BUFFERED
        ) as rt,
    ):
        for _ in range(WARM_UP + n):
            info = rt.spawn(top, "go")
            rt.wait(info.id, timeout=600)
            if kind == "lifecycle":
                rt.close(info.id)
            else:
                rt.close_tree(info.id)
    return n


def _instructions(kind: str, n: int, out: Path) -> int:
    """Total instructions of one driver process under callgrind (every thread)."""
    return llm_instructions.instructions_of("stress.bench.lifecycle_instructions", kind, n, out)


def measure(lifecycles: int, trees: int) -> dict[str, Any]:
    """Instructions per lifecycle and per tree agent: (runs of ``2n`` - runs of ``n``) / ``n``.

    Raises:
        RuntimeError: a driver process failed under callgrind.
    """
    per: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, n in (("lifecycle", lifecycles), ("tree", trees)):
            one = _instructions(kind, n, Path(tmp) / f"{kind}-{n}.out")
            two = _instructions(kind, 2 * n, Path(tmp) / f"{kind}-{2 * n}.out")
            per[kind] = (two - one) / n
    return {
        "lifecycles": lifecycles,
        "trees": trees,
        "instructions_per_lifecycle": round(per["lifecycle"]),
        "instructions_per_tree_agent": round(per["tree"] / TREE_AGENTS),
    }


def run(lifecycles: int, trees: int) -> dict[str, Any]:
    """The row: :func:`measure`'s, or a skip with its reason when valgrind is missing."""
    if shutil.which(llm_instructions.VALGRIND) is None:
        return {"instructions": "skipped: valgrind is not installed (apt-get install valgrind)"}
    return measure(lifecycles, trees)


def _part(options: Options) -> Result:
    row = run(50, 10) if options.quick else run(100, 20)
    title = "lifecycle_instructions: per Python-agent lifecycle and per tree agent (callgrind)"
    return Result.row(title, row)


PART = Part("lifecycle_instructions", _part, in_quick=False)

if __name__ == "__main__":
    if len(sys.argv) != 3 or not sys.argv[2].isdigit():
        sys.exit("usage: python -m stress.bench.lifecycle_instructions lifecycle|tree N")
    print(drive(sys.argv[1], int(sys.argv[2])))
