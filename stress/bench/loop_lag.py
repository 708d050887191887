"""Host event-loop lag while 1,000 model turns run (issue 21: p99 < 20 ms, no stall > 50 ms).

A fresh interpreter per run (:mod:`stress.bench.host_turns`) is an asyncio
host: it opens a runtime with one model profile against an OpenAI server in a
child process (:mod:`stress.bench.stub_server`, answering at once), spawns
1,000 turns through ``spawn_async`` (``max_active_turns`` 1,000, the default
64 calls in flight) and awaits them while a ticker on its own loop measures how
late each 5 ms sleep wakes. The host never calls ``gc.freeze()``.

Contenders, alternated round by round (medians): this checkout; this checkout
with the freeze after litellm's import turned off (``no_freeze``: what the
freeze buys); this checkout in a host that sets ``sys.setswitchinterval(0.001)``
(``switch_1ms``: how much of the lag is the interpreter's 5 ms thread switch
interval while the runtime's loop thread runs litellm's CPU work); main before
issue 21 (its litellm import runs inside the first turn, with the collector on).
Beside the lag, the cyclic collector's CPU time and its longest full pass
(thread CPU time, which a busy machine disturbs less than the wall-clock lag).
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from stress.bench.baseline import BASELINE_COMMIT, baseline_checkout
from stress.bench.host_turns import run_child
from stress.bench.stub_server import ChildStub
from stress.parts import Options, Part, Result

__all__ = ["run"]

FIGURES = (
    "loop_lag_p50_ms",
    "loop_lag_p99_ms",
    "loop_lag_max_ms",
    "ticks_over_50ms",
    "gc_cpu_ms",
    "gc_longest_full_pass_ms",
    "wall_s",
    "cpu_s",
    "peak_threads",
)


def run(turns: int, rounds: int, *, baseline: bool = True) -> dict[str, Any]:
    """Alternate the contenders ``rounds`` times; return the medians of each figure."""
    row: dict[str, Any] = {
        "turns": turns,
        "rounds": rounds,
        "load_avg_1m": round(os.getloadavg()[0], 1),
    }
    seen: dict[str, dict[str, list[float]]] = {}
    problems: list[str] = []
    with ChildStub(0.0) as stub, baseline_checkout() as base:
        contenders: dict[str, dict[str, Any]] = {"this": {}}
        if baseline:
            contenders["no_freeze"] = {"variant": "no_freeze"}
            contenders["switch_1ms"] = {"variant": "switch_1ms"}
            if base is not None:
                contenders[f"main_{BASELINE_COMMIT}"] = {"retinue": base}
        for _ in range(rounds):
            for name, how in contenders.items():
                result = run_child(stub.url, turns, calls=64, timeout_s=600, **how)
                if result["distinct_completions"] != turns or result["completed"] != turns:
                    problems.append(f"{name}: {result['completed']} of {turns} completed")
                for key in FIGURES:
                    seen.setdefault(name, {}).setdefault(key, []).append(result[key])
    for name, figures in seen.items():
        for key, values in figures.items():
            row[f"{name}_{key}"] = round(statistics.median(values), 1)
    row["load_avg_1m_after"] = round(os.getloadavg()[0], 1)
    row["problems"] = problems
    return row


def _part(options: Options) -> Result:
    row = run(100, 1, baseline=False) if options.quick else run(1000, 3)
    problems = row.pop("problems")
    title = "loop lag of an asyncio host while model turns run (the host calls no gc.freeze)"
    return Result.row(title, row, problems)


PART = Part("loop_lag", _part, check=True)
