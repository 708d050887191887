"""Tool benchmark: what grep's child process and the tool pool cost a normal call.

``grep`` matches in a child process (so a catastrophic pattern can be killed
without freezing the runtime). Baseline, measured in the same run on the same
files: the same search run in-process on a thread (the walk and
:func:`retinue.llm.tools._grep_child.search`, which is what the tool did before). The
figure that matters is the added milliseconds per call, against a model call
that takes seconds. ``read_file`` through the tool pool is compared with
``asyncio.to_thread`` running the same read.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from retinue.llm import ToolBox, Workspace
from retinue.llm.tools._builtins import builtin_tools
from retinue.llm.tools._grep import GrepArgs, _plan
from retinue.llm.tools._grep_child import search
from stress.parts import Options, Part, Result


def _workspace(root: Path, files: int) -> None:
    for index in range(files):
        folder = root / f"pkg{index % 10}"
        folder.mkdir(exist_ok=True)
        lines = [f"def function_{index}_{n}(x):\n    return x + {n}\n" for n in range(50)]
        (folder / f"mod{index}.py").write_text("".join(lines))


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


async def _measure(root: Path, calls: int) -> dict[str, float]:
    ws = Workspace(root)
    box = ToolBox(builtin_tools(ws, frozenset({"grep", "read_file"})))
    grep_args = json.dumps({"pattern": r"function_\d+_4\b"})
    read_args = json.dumps({"path": "pkg0/mod0.py"})
    args = GrepArgs(pattern=r"function_\d+_4\b")

    def in_process() -> dict[str, Any]:
        plan = _plan(ws, args, threading.Event())
        return search(
            {
                "pattern": plan.pattern,
                "flags": plan.flags,
                "files": plan.files,
                "max_results": 100,
                "max_line_chars": 2000,
                "max_file_bytes": 4 << 20,
            }
        )

    def read() -> bytes:
        return (root / "pkg0" / "mod0.py").read_bytes()

    timings: dict[str, list[float]] = {k: [] for k in ("base", "grep", "thread", "pool")}
    for _ in range(calls):
        start = time.perf_counter()
        await asyncio.to_thread(in_process)
        timings["base"].append(time.perf_counter() - start)
        start = time.perf_counter()
        await box.call("grep", grep_args)
        timings["grep"].append(time.perf_counter() - start)
        start = time.perf_counter()
        await asyncio.to_thread(read)
        timings["thread"].append(time.perf_counter() - start)
        start = time.perf_counter()
        await box.call("read_file", read_args)
        timings["pool"].append(time.perf_counter() - start)
    return {key: _median_ms(value) for key, value in timings.items()}


def run(calls: int, sizes: tuple[int, ...] = (20, 200)) -> dict[str, Any]:
    """Return median milliseconds per call for each workspace size, and the ratios."""
    row: dict[str, Any] = {"calls": calls}
    for files in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            _workspace(Path(tmp), files)
            got = asyncio.run(_measure(Path(tmp), calls))
        row[f"grep_{files}_files_in_process_ms"] = got["base"]
        row[f"grep_{files}_files_child_ms"] = got["grep"]
        row[f"grep_{files}_files_added_ms"] = round(got["grep"] - got["base"], 2)
        row[f"grep_{files}_files_ratio"] = round(got["grep"] / max(got["base"], 1e-6), 1)
        row[f"read_file_{files}_to_thread_ms"] = got["thread"]
        row[f"read_file_{files}_pool_tool_ms"] = got["pool"]
    return row


def _part(options: Options) -> Result:
    row = run(10 if options.quick else 50)
    title = "tools: grep in a child process vs in-process, read_file on the tool pool"
    return Result.row(title, row)


PART = Part("tools", _part)
