"""Startup benchmarks: ``import retinue``, the first model call after ``Runtime.open``, the demo.

Each figure comes from fresh interpreters (the cost is a process's first), run
alternately for this checkout and a baseline build of main before issue 21
(:mod:`stress.bench.baseline`), several rounds, medians. Children write their
bytecode caches to a temporary ``PYTHONPYCACHEPREFIX`` (one per build) and a
first untimed run fills them, so both builds import from bytecode as an
installed package does.

- ``import retinue``: wall ms of ``import retinue`` in a fresh interpreter, and
  whether litellm was imported by it (it must not be).
- first call: a child imports retinue, opens a runtime whose one profile has a
  model (``openai/stub-model`` against an :class:`~retinue.testing.OpenAIStub`
  in the child), spawns an agent as soon as the open returns, and reports the
  open's wall time and how long after the open returned the stub received the
  first model call (target: 0.5 s).
- ``retinue demo``: ``python -m retinue.cli demo --json`` on a fresh store and
  the offline model, wall and CPU seconds of the whole process (target: 2x
  faster than the baseline).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stress.bench.baseline import BASELINE_COMMIT, baseline_checkout
from stress.parts import Options, Part, Result

__all__ = ["demo", "first_call", "import_time"]

ROOT = Path(__file__).resolve().parents[2]

IMPORT_CODE = """
import sys, time
t = time.perf_counter()
import retinue
print(round((time.perf_counter() - t) * 1000, 1), "litellm" in sys.modules)
"""

FIRST_CALL_CODE = """
import json, sys, time
from retinue import Profile, Runtime
from retinue.llm import LiteLLMRunner
from retinue.llm.stub import OpenAIStub  # where both builds have it
with OpenAIStub() as stub:
    runner = LiteLLMRunner("openai/stub-model", api_base=stub.url, api_key="x")
    began = time.monotonic()
    rt = Runtime.open(sys.argv[1], profiles=[Profile("a", runner=runner)])
    opened = time.monotonic()
    rt.wait(rt.spawn("a", "hello").id, timeout=600)
    rt.shutdown()
    first = stub.requests[0].at
print(json.dumps({"open_s": opened - began, "first_call_after_open_s": first - opened}))
"""


class _Build:
    """One build to run children of: its checkout and its own bytecode cache (or the usual)."""

    def __init__(self, name: str, checkout: Path, cache: Path | None) -> None:
        self.name = name
        self.checkout = checkout
        self.env = {**os.environ, "PYTHONPATH": str(checkout)}
        self.env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        if cache is not None:
            self.env.pop("PYTHONDONTWRITEBYTECODE", None)
            self.env["PYTHONPYCACHEPREFIX"] = str(cache / name)

    def run(self, args: list[str], *, timeout: float = 600) -> tuple[str, float, float]:
        """Run ``python ARGS`` in the checkout; return (stdout, wall s, CPU s of the child)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.checkout,
            timeout=timeout,
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if out.returncode != 0:
            raise RuntimeError(f"{self.name}: {' '.join(args[:3])} failed: {out.stderr[-1500:]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return out.stdout, wall, cpu


def _alternate(
    builds: list[_Build], rounds: int, measure: Callable[[_Build], dict[str, float]]
) -> dict[str, dict[str, list[float]]]:
    """Run ``measure`` for each build in turn, ``rounds`` times over (after one untimed run).

    A single round (the quick run) skips the untimed run.
    """
    for build in builds if rounds > 1 else []:
        measure(build)  # fills the bytecode cache; not counted
    figures: dict[str, dict[str, list[float]]] = {b.name: {} for b in builds}
    for _ in range(rounds):
        for build in builds:
            for key, value in measure(build).items():
                figures[build.name].setdefault(key, []).append(value)
    return figures


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def import_time(builds: list[_Build], rounds: int) -> dict[str, Any]:
    """Median and least wall ms of ``import retinue`` per build; whether it imported litellm."""
    litellm: dict[str, bool] = {}

    def measure(build: _Build) -> dict[str, float]:
        out, _, _ = build.run(["-c", IMPORT_CODE])
        ms, imported = out.split()
        litellm[build.name] = imported == "True"
        return {"ms": float(ms)}

    figures = _alternate(builds, rounds, measure)
    row: dict[str, Any] = {}
    for build in builds:
        row[f"{build.name}_import_retinue_ms"] = round(_median(figures[build.name]["ms"]), 1)
        # The fastest run is the one a busy machine disturbed least.
        row[f"{build.name}_import_retinue_min_ms"] = round(min(figures[build.name]["ms"]), 1)
        row[f"{build.name}_imports_litellm"] = litellm[build.name]
    return row


def first_call(builds: list[_Build], rounds: int) -> dict[str, Any]:
    """Median open seconds and first-call delay after the open, per build."""

    def measure(build: _Build) -> dict[str, float]:
        with tempfile.TemporaryDirectory() as tmp:
            out, _, _ = build.run(["-c", FIRST_CALL_CODE, str(Path(tmp) / "store")])
        data: dict[str, float] = json.loads(out.strip().splitlines()[-1])
        return data

    figures = _alternate(builds, rounds, measure)
    row: dict[str, Any] = {}
    for build in builds:
        for key in ("open_s", "first_call_after_open_s"):
            row[f"{build.name}_{key}"] = round(_median(figures[build.name][key]), 2)
    return row


def demo(builds: list[_Build], rounds: int) -> dict[str, Any]:
    """Median wall and CPU seconds of ``retinue demo`` per build, and the ratio to the first."""

    def measure(build: _Build) -> dict[str, float]:
        with tempfile.TemporaryDirectory() as tmp:
            store = Path(tmp) / "store"
            command = ["-m", "retinue.cli", "demo", "--json", "--store", str(store)]
            out, wall, cpu = build.run(command)
        report = json.loads(out.strip().splitlines()[-1])
        if report.get("failed") or report.get("interrupted"):
            raise RuntimeError(f"{build.name}: the demo did not complete: {out[-500:]}")
        return {"wall_s": wall, "cpu_s": cpu}

    figures = _alternate(builds, rounds, measure)
    row: dict[str, Any] = {"rounds": rounds}
    for build in builds:
        row[f"{build.name}_demo_wall_s"] = round(_median(figures[build.name]["wall_s"]), 2)
        row[f"{build.name}_demo_cpu_s"] = round(_median(figures[build.name]["cpu_s"]), 2)
    if len(builds) == 2:
        new, old = (figures[b.name] for b in builds)
        ratios = [o / n for n, o in zip(new["wall_s"], old["wall_s"], strict=True)]
        row["speedup_wall_median"] = round(_median(ratios), 2)
        row["speedup_wall_range"] = f"{min(ratios):.2f}-{max(ratios):.2f}"
        cpu = [o / n for n, o in zip(new["cpu_s"], old["cpu_s"], strict=True)]
        row["speedup_cpu_median"] = round(_median(cpu), 2)
    return row


def run(rounds: int, *, baseline: bool = True) -> dict[str, Any]:
    """All three, this checkout against the baseline commit when asked and git can give it."""
    row: dict[str, Any] = {"load_avg_1m": round(os.getloadavg()[0], 1)}
    wanted = baseline_checkout() if baseline else contextlib.nullcontext(None)
    with tempfile.TemporaryDirectory() as cache, wanted as base:
        # One round (the quick run) has no untimed run to fill a cache of its own.
        caches = Path(cache) if rounds > 1 else None
        builds = [_Build("this", ROOT, caches)]
        if base is not None and baseline:
            builds.append(_Build(f"main_{BASELINE_COMMIT}", base, caches))
        elif baseline:
            row["baseline"] = "not available (no git history here)"
        row.update(import_time(builds, rounds * 2))
        row.update(first_call(builds, rounds))
        row.update(demo(builds, rounds))
    row["load_avg_1m_after"] = round(os.getloadavg()[0], 1)
    return row


def _part(options: Options) -> Result:
    row = run(1, baseline=False) if options.quick else run(5)
    title = "startup: import retinue, first model call after open, retinue demo (vs main before)"
    return Result.row(title, row)


PART = Part("startup", _part)


if __name__ == "__main__":
    print(json.dumps(run(1), indent=2))
