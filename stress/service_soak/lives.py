"""The service soak's parent: the stub, the lives of the host, the kills and the checks.

:func:`run` starts an :class:`~retinue.testing.OpenAIStub` (the model trees'
provider, answering as the scripted model, 0.1-0.6 s late; it outlives the
kills), then runs the host (:mod:`stress.service_soak.host`) one life after
the other on one store: each life is SIGKILLed at its time in
:meth:`~stress.service_soak.plan.Plan.kill_times` (once it has opened), the
store is checked against the ledgers (:func:`~stress.service_soak.check.check`)
and the next life starts; the last life is stopped with SIGTERM at the end of
the run and checked once more. Returns every sample, each check's verdict and
each life's open time and exit.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from retinue.testing import OpenAIStub, StubReply, StubRequest
from stress.service_soak.check import check
from stress.service_soak.ledger import note_open_trees, read_entries
from stress.service_soak.plan import Plan
from stress.service_soak.team import DELAY_S

__all__ = ["run"]

OPEN_BOUND_S = 180.0
"""Hang guard: how long a life may take to open the store."""
STOP_BOUND_S = 120.0
"""Hang guard: how long a life may take to stop once asked."""
_KEEP_REQUESTS = 1_000  # the stub records every request: forget them now and then


def _stub() -> OpenAIStub:
    stub = OpenAIStub()

    def slow(request: StubRequest) -> StubReply:
        if request.number >= _KEEP_REQUESTS:
            stub.requests.clear()
        return StubReply(delay_s=random.Random(request.at).uniform(*DELAY_S))

    stub.handler = slow
    return stub


def _start(
    plan: Plan, folder: Path, life: int, url: str, started: float
) -> subprocess.Popen[bytes]:
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    log = (folder / f"life-{life}.log").open("ab")
    argv = [sys.executable, "-m", "stress.service_soak.host", plan.dumps(), str(folder)]
    argv += [str(life), url, repr(started)]
    return subprocess.Popen(argv, cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT)


def _opened(folder: Path, life: int) -> dict[str, Any] | None:
    for _, entry in read_entries(folder, life):
        if entry["op"] == "opened":
            return entry
    return None


def _await_open(proc: subprocess.Popen[bytes], folder: Path, life: int) -> dict[str, Any]:
    """Wait until the life noted its open; return that note.

    Raises:
        RuntimeError: the life exited first, or did not open within ``OPEN_BOUND_S``.
    """
    deadline = time.monotonic() + OPEN_BOUND_S
    while (note := _opened(folder, life)) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            tail = (folder / f"life-{life}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"life {life} did not open the store (exit {proc.poll()}): {tail}")
        time.sleep(0.1)
    return note


def _end(proc: subprocess.Popen[bytes], at: float, kill: bool) -> int | None:
    """Let the life run until ``at`` (wall clock), then kill it or stop it; return its exit."""
    while time.time() < at and proc.poll() is None:
        time.sleep(min(1.0, max(0.0, at - time.time())))
    if proc.poll() is not None:
        return proc.returncode  # it ended by itself: a problem the caller reports
    if kill:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return None
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=STOP_BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9


def _failures(folder: Path, life: int) -> list[str]:
    """The calls of ``life`` that failed and the trees it left stalled, as problems."""
    found = []
    for _, entry in read_entries(folder, life):
        if entry["op"] == "error":
            found.append(f"life {life}: {entry['call']} of tree {entry['key']}: {entry['error']}")
        elif entry["op"] == "stalled":
            found.append(f"life {life}: tree {entry['key']} still open {entry['seconds']} s on")
    return found


def samples_of(folder: Path) -> list[dict[str, Any]]:
    """Every sample the lives wrote, in time order."""
    rows: list[dict[str, Any]] = []
    for path in folder.glob("samples-*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # cut short by a kill
    return sorted(rows, key=lambda row: row["t"])


def run(plan: Plan, folder: Path) -> dict[str, Any]:
    """Run the soak in ``folder``; return samples, checks, lives and problems."""
    problems: list[str] = []
    lives: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    with _stub() as stub:
        started = time.time()
        ends = [started + t for t in plan.kill_times()] + [started + plan.seconds]
        for life, end_at in enumerate(ends):
            killed = life < plan.kills
            proc = _start(plan, folder, life, stub.url, started)
            note = _await_open(proc, folder, life)
            code = _end(proc, end_at, kill=killed)
            ended = round(time.time() - end_at, 2)
            if (killed and code is not None) or (not killed and code != 0):
                log = (folder / f"life-{life}.log").read_text(errors="replace")[-1500:]
                problems.append(f"life {life} exited {code} by itself: {log}")
            t0 = time.perf_counter()
            verdict = check(folder / "store", folder)
            checks.append({**asdict(verdict), "check_s": round(time.perf_counter() - t0, 2)})
            problems += [f"after life {life}: {p}" for p in verdict.problems]
            problems += _failures(folder, life)
            if killed:
                note_open_trees(folder, life + 1)
            lives.append(
                {
                    "life": life,
                    "open_s": note["open_s"],
                    "killed": killed,
                    "exit": code,
                    "end_s": ended,  # from the kill or SIGTERM to the exit
                }
            )
        requests = stub.answered
    return {
        "samples": samples_of(folder),
        "checks": checks,
        "lives": lives,
        "model_calls": requests,
        "seconds": round(time.time() - started, 1),
        "problems": problems,
    }
