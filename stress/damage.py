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

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.parts import Options, Part, Result

CASE_TIMEOUT_S = 60.0


# -- the sample store ------------------------------------------------------------


def _worker_runner(turn: Any) -> str:
    return f"done {turn.task[:20]} after {len(turn.messages)} messages"


def _lead_runner(turn: Any) -> str:
    for i in range(2):
        turn.spawn("worker", f"sub {i} of {turn.task[:20]} " + "y" * 200)
    return "lead done"


def build_sample(folder: Path, agents: int) -> int:
    """Create the sample store; return how many agents (closed included) it holds."""
    from retinue import Limits, Profile, Runtime

    profiles = [
        Profile("lead", subagents=["worker"], runner=_lead_runner),
        Profile("worker", runner=_worker_runner),
    ]
    limits = Limits(max_tree_agents=200, fanout_cap=8, pending_completions_per_agent=1000)
    with Runtime.open(folder, profiles=profiles, limits=limits) as rt:
        leads = []
        for i in range(max(1, agents // 3)):
            lead = rt.spawn("lead", f"lead task {i} " + "x" * 400, name=f"lead{i}")
            leads.append(lead)
        for lead in leads:
            rt.wait(lead.id, timeout=30)
            rt.send(lead.id, "a message for the next turn " + "m" * 300)
        for lead in leads[::4]:  # some closed, with their subtrees
            rt.close_tree(lead.id)
        count = len(rt.agents(include_closed=True))
    return count


# -- damages ----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One way of damaging a copy of the sample store."""

    kind: str
    arg: int = 0
    arg2: int = 0
    label: str = ""

    def name(self) -> str:
        """A short, unique description."""
        return self.label or f"{self.kind}:{self.arg}" + (f":{self.arg2}" if self.arg2 else "")

    def apply(self, folder: Path, page: int) -> None:
        """Damage ``folder`` (a copy of the sample) in this case's way."""
        data = folder / "data.mdb"
        if self.kind == "truncate":
            os.truncate(data, self.arg)
        elif self.kind == "delete":
            data.unlink()
        elif self.kind == "flip":
            with data.open("r+b") as handle:
                handle.seek(self.arg)
                byte = handle.read(1)
                handle.seek(self.arg)
                handle.write(bytes([byte[0] ^ (self.arg2 or 0xFF)]))
        elif self.kind == "scribble":  # random bytes over part of a page
            rng = random.Random(self.arg)
            with data.open("r+b") as handle:
                handle.seek(self.arg)
                handle.write(rng.randbytes(self.arg2))
        elif self.kind == "zero":
            with data.open("r+b") as handle:
                handle.seek(self.arg * page)
                handle.write(bytes(page))
        elif self.kind == "garbage":
            target = folder / self.label.split(":", 1)[1]
            rng = random.Random(self.arg)
            target.write_bytes(rng.randbytes(self.arg2))
        else:
            raise ValueError(f"unknown damage {self.kind}")


def cases(data_size: int, page: int, quick: bool, seed: int) -> list[Case]:
    """Every damage case for a sample of ``data_size`` bytes (a seeded subset if quick)."""
    rng = random.Random(seed)
    pages = data_size // page
    truncations = [Case("truncate", n * page) for n in range(pages)]
    truncations += [Case("truncate", n * page + page // 2) for n in range(0, pages, 7)]
    truncations.append(Case("truncate", data_size - 1))
    flips = [
        Case("flip", rng.randrange(data_size), rng.choice([0xFF, 0x01, 0x80, 0x10]))
        for _ in range(pages * 4)
    ]
    zeros = [Case("zero", n) for n in range(pages)]
    scribbles = [
        Case("scribble", rng.randrange(data_size - 512), rng.choice([8, 64, 512]))
        for _ in range(pages * 2)
    ]
    lost = [Case("delete", label="delete:data.mdb"), Case("truncate", 0, label="empty:data.mdb")]
    garbage = [
        Case("garbage", 1, 64, "garbage:writer.lock"),
        Case("garbage", 2, 1 << 20, "garbage:writer.lock"),
        Case("garbage", 3, 8192, "garbage:lock.mdb"),
        Case("garbage", 4, 10, "garbage:lock.mdb"),
        Case("garbage", 5, 0, "garbage:lock.mdb"),
        Case("garbage", 6, 100, "garbage:retinue.json"),
    ]
    if quick:
        truncations = [truncations[0], *rng.sample(truncations[1:], min(8, len(truncations) - 1))]
        flips = rng.sample(flips, min(10, len(flips)))
        zeros = rng.sample(zeros, min(8, len(zeros)))
        scribbles = rng.sample(scribbles, min(6, len(scribbles)))
    return lost + garbage + truncations + zeros + flips + scribbles


def in_use_cases(data_size: int, page: int, quick: bool, seed: int) -> list[Case]:
    """Damage applied under an open runtime: truncation at every page boundary, zeroed pages."""
    rng = random.Random(seed + 1)
    pages = data_size // page
    truncations = [
        Case("truncate", n * page, label=f"in_use:truncate:{n * page}") for n in range(pages)
    ]
    zeros = [Case("zero", n, label=f"in_use:zero:{n}") for n in range(2, pages)]
    if quick:
        truncations = rng.sample(truncations, min(4, len(truncations)))
        zeros = rng.sample(zeros, min(4, len(zeros)))
    return truncations + zeros


# -- the worker child ------------------------------------------------------------------


def worker_main() -> None:
    """Open each store named on stdin; print one JSON verdict line per request."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from retinue import Profile, Runtime
    from retinue.errors import RetinueError

    profiles = [
        Profile("lead", subagents=["worker"], runner=_worker_runner),
        Profile("worker", runner=_worker_runner),
    ]
    for line in sys.stdin:
        request = json.loads(line)
        path, mode = request["path"], request["mode"]
        verdict: dict[str, Any] = {"mode": mode}
        try:
            if mode.startswith("readonly"):
                rt = Runtime.open(path, readonly=True)
            else:
                rt = Runtime.open(path, profiles=profiles)
            try:
                if "damage" in request:  # damaged under the open runtime
                    Case(**request["damage"]).apply(Path(path), request["page"])
                verdict["agents"] = len(rt.agents(include_closed=True))
                verdict["diagnostics"] = len(rt.diagnostics)
                if mode.startswith("writer"):  # one turn of work on the damaged store
                    info = rt.spawn("worker", "after the damage")
                    rt.wait(info.id, timeout=20)
            finally:
                rt.shutdown()
            verdict["outcome"] = "open"
        except RetinueError as exc:
            verdict.update(outcome="typed", error=type(exc).__name__, message=str(exc)[:300])
        except Exception as exc:
            verdict.update(outcome="untyped", error=type(exc).__name__, message=str(exc)[:300])
        print(json.dumps(verdict), flush=True)


class Worker:
    """A worker child process fed one request at a time."""

    def __init__(self) -> None:
        """Start the worker."""
        repo = Path(__file__).resolve().parents[1]
        env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stress.damage", "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=repo,
            env=env,
        )

    def ask(
        self, path: Path, mode: str, damage: Case | None = None, page: int = 0
    ) -> dict[str, Any]:
        """Have the worker open ``path`` (and damage it while open); return its verdict."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        request: dict[str, Any] = {"path": str(path), "mode": mode}
        if damage is not None:
            request.update(damage=dataclasses.asdict(damage), page=page)
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = _readline(self.proc, CASE_TIMEOUT_S)
        if line:
            verdict: dict[str, Any] = json.loads(line)
            return verdict
        if line is None:  # silent for the whole timeout
            self.proc.kill()
            self.proc.wait()
            return {"mode": mode, "outcome": "hang"}
        code = self.proc.wait()  # it closed its output: it is exiting
        return {"mode": mode, "outcome": "signal" if code < 0 else "exit", "code": code}

    @property
    def alive(self) -> bool:
        """True while the worker runs."""
        return self.proc.poll() is None

    def close(self) -> None:
        """Stop the worker."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=CASE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _readline(proc: subprocess.Popen[str], timeout: float) -> str | None:
    """Read one line from ``proc``: '' if it closed its output, None if silent for ``timeout``."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            return None
    return proc.stdout.readline()


# -- the run ----------------------------------------------------------------------------------


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


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker_main()
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            result = run(Path(tmp), quick="--quick" in sys.argv, seed=1)
        print(json.dumps(result, indent=2))


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
