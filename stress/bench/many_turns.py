"""10,000 concurrent model turns on one runtime, each awaiting a slow answer (issue 21).

A fresh interpreter (:mod:`stress.bench.host_turns`) opens one runtime with
``max_active_turns`` and ``max_concurrent_calls`` at 10,000 and spawns 10,000
one-call model turns at once through the ``*_async`` API, against an OpenAI
server in a child process (:mod:`stress.bench.stub_server`) that holds every
request 5 s before answering. Targets: every turn completes exactly once, the
process holds at most 16 threads and less than 2 GiB RSS, the host loop's lag
p99 stays under 50 ms.

litellm's own HTTP pool allows 500 connections per host by default
(``AIOHTTP_CONNECTOR_LIMIT_PER_HOST``, 1,000 in all: ``AIOHTTP_CONNECTOR_LIMIT``),
which would hold 9,500 of the calls in its queue: the child raises both to the
number of turns, as a host making this many concurrent calls to one endpoint
would. Both processes raise their soft limit of open files (10,000 sockets
each side) up to the hard limit.
"""

from __future__ import annotations

import os
from typing import Any

from stress.bench.host_turns import run_child
from stress.bench.stub_server import ChildStub, raise_fd_limit
from stress.parts import Options, Part, Result

__all__ = ["run"]

MAX_THREADS = 16
MAX_RSS_MIB = 2048
MAX_LAG_P99_MS = 50.0


def run(turns: int, delay_s: float) -> dict[str, Any]:
    """Run ``turns`` turns each awaiting a ``delay_s`` answer; return the row and its problems."""
    pool = str(turns + 100)
    limit = raise_fd_limit(turns * 3 + 1024)
    with ChildStub(delay_s) as stub:
        row = run_child(
            stub.url,
            turns,
            calls=turns,
            timeout_s=max(600.0, delay_s * 20),
            env={"AIOHTTP_CONNECTOR_LIMIT": pool, "AIOHTTP_CONNECTOR_LIMIT_PER_HOST": pool},
        )
        served = stub.stats()
    row.update(
        {
            "answer_delay_s": delay_s,
            "stub_answered": served["answered"],
            "stub_max_in_flight": served["max_in_flight"],
            "open_files_soft_limit": limit,
            "load_avg_1m": round(os.getloadavg()[0], 1),
        }
    )
    problems = []
    if not (row["completed"] == row["distinct_completions"] == turns):
        problems.append(f"{row['completed']} of {turns} turns completed once")
    if row["agents_not_completed_once"]:
        problems.append(f"{row['agents_not_completed_once']} agents not completed at generation 1")
    if row["peak_threads"] > MAX_THREADS:
        problems.append(f"{row['peak_threads']} threads (target: at most {MAX_THREADS})")
    if row["peak_rss_mib"] >= MAX_RSS_MIB:
        problems.append(f"{row['peak_rss_mib']} MiB RSS (target: under {MAX_RSS_MIB})")
    row["lag_p99_target_met"] = row["loop_lag_p99_ms"] < MAX_LAG_P99_MS
    row["problems"] = problems
    return row


def _part(options: Options) -> Result:
    row = run(200, 1.0) if options.quick else run(10_000, 5.0)
    problems = row.pop("problems")
    title = "concurrent model turns awaiting a slow answer: exactly once, threads, RSS, loop lag"
    return Result.row(title, row, problems)


PART = Part("many_turns", _part, check=True)
