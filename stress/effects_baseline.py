"""The at-least-once baseline of ``python -m stress --only effects``.

What the durable-execution engines do (Temporal activities, DBOS steps,
Restate and Inngest steps): a journal of completed steps, and after a crash
the step in flight is run again. Here a child process works through orders;
each order is the effects workload's three calls (``refund``, ``credit``,
``bash``-like append), each a step: look the step up in the journal, run it
(append ``order step`` to a ledger, fsync'd, then linger as the tools of the
retinue run do), then record it done (fsync'd). A short pause between orders
stands in for the model call. The parent kills it at random instants, as it
kills retinue's child, and counts the ledger lines a step left twice: the
duplicates an at-least-once runtime makes under the same kills.

This is a model of the engines' contract, not the engines themselves (their
cost per step is measured by ``python -m stress --only durable_steps``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Baseline", "run_baseline"]

STEPS = ("refund", "credit", "bash")


def _append(path: Path, line: str) -> None:
    with open(path, "a", buffering=1) as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def child_main(work: str, seed: int) -> None:
    """Work through orders, step by step, until killed; re-run the step in flight."""
    folder = Path(work)
    journal, ledger = folder / "journal.log", folder / "ledger.log"
    rng = random.Random(seed)
    done = set(journal.read_text().split("\n")) if journal.exists() else set()
    order = 0
    _append(folder / "opened", str(seed))
    while True:
        worked = False
        for step in STEPS:
            name = f"{order}:{step}"
            if name in done:
                continue  # replayed from the journal: not run again
            _append(ledger, f"{name} 1")  # the effect
            time.sleep(rng.uniform(0.0, 0.1))  # effect done, completion not yet recorded
            _append(journal, name)  # the step's completion, journaled
            done.add(name)
            worked = True
        order += 1
        if worked:
            time.sleep(rng.uniform(0.02, 0.1))  # the model's next call


@dataclass
class Baseline:
    """What the baseline's kills left: kills, unsafe effects run (refund, bash), run twice.

    ``credit`` runs again too, but an idempotent call is not counted, as in retinue's row.
    """

    kills: int = 0
    calls: int = 0
    duplicates: int = 0


def run_baseline(workdir: Path, kills: int, seed: int, max_run_s: float = 2.0) -> Baseline:
    """Run ``kills`` kill-and-restart rounds of the baseline; count its duplicate effects."""
    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    found = Baseline()
    for _ in range(kills):
        opened = workdir / "opened"
        opened.unlink(missing_ok=True)
        seed_arg = str(rng.randrange(2**31))
        proc = subprocess.Popen(
            [sys.executable, "-m", "stress.effects_baseline", "child", str(workdir), seed_arg],
            cwd=Path(__file__).resolve().parent.parent,
        )
        deadline = time.monotonic() + 60
        while not opened.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"baseline child exited early with {proc.returncode}")
            time.sleep(0.01)
        time.sleep(rng.uniform(0.05, max_run_s))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        found.kills += 1
    ledger = workdir / "ledger.log"
    lines = [line for line in ledger.read_text().splitlines() if line.endswith(" 1")]
    runs = Counter(line.split()[0] for line in lines if line.split(":")[-1].split()[0] != "credit")
    found.calls = sum(runs.values())
    found.duplicates = sum(times - 1 for times in runs.values())
    return found


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "child":
    child_main(sys.argv[2], int(sys.argv[3]))
