"""Runners for the cluster tests and the cluster benchmark, shipped to Ray's workers.

A shard imports its runners by name, so these live in a package of their own
that the tests hand to Ray with ``runtime_env={"py_modules": [this folder]}``.
A gated turn blocks until a file named after its task appears in the folder
``RETINUE_CLUSTER_GATES`` names (every shard process sees the same files).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from retinue import Turn

GATE_POLL_S = 0.02
GATE_BOUND_S = 120.0  # a gate nobody opens fails its turn instead of hanging a test


def echo(turn: Turn) -> str:
    """Settle at once with ``done:<task>``."""
    return f"done:{turn.task}"


def gated(turn: Turn) -> str:
    """Block until ``<gates>/<task>`` exists (or the turn is cancelled); return ``done:<task>``."""
    gate = Path(os.environ["RETINUE_CLUSTER_GATES"]) / turn.task
    deadline = time.monotonic() + GATE_BOUND_S
    while not gate.exists():
        if turn.cancelled.wait(GATE_POLL_S):
            return "cancelled"
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {gate} was never opened")
    return f"done:{turn.task}"


def lead(turn: Turn) -> str:
    """Run two mids at once (``run_many``); a resumed lead first closes what it left."""
    for child in turn.children():
        turn.close_tree(child.id)
    results = turn.run_many([("mid", f"{turn.task}.m0"), ("mid", f"{turn.task}.m1")], timeout=60)
    return "; ".join(r.output or "" if not isinstance(r, Exception) else repr(r) for r in results)


def mid(turn: Turn) -> str:
    """Run two leaves at once (``run_many``)."""
    results = turn.run_many([("leaf", f"{turn.task}.l0"), ("leaf", f"{turn.task}.l1")], timeout=60)
    return "[" + ", ".join(r.output or "" for r in results if not isinstance(r, Exception)) + "]"


async def leaf(turn: Turn) -> str:
    """An async leaf: gated if its task says so (``...gate...``), else at once."""
    if "gate" in turn.task:
        import asyncio

        gate = Path(os.environ["RETINUE_CLUSTER_GATES"]) / turn.task
        while not gate.exists():
            await asyncio.sleep(GATE_POLL_S)
    return f"leaf:{turn.task}"


def talker(turn: Turn) -> str:
    """Send the host a message (``turn.send("/root", ...)``) and settle."""
    turn.send("/root", f"hello from {turn.agent.name}")
    return "sent"


def reader(turn: Turn) -> str:
    """Return the ids of the messages this turn read, comma-separated (for the crash loop)."""
    return ",".join(m.id for m in turn.messages if m.kind == "message")


def fan_out(turn: Turn) -> str:
    """Task ``"<label> <count>"``: run ``count`` workers at once, tasks ``"<label> job <n>"``."""
    label, count = turn.task.split()
    jobs = [("worker", f"{label} job {n}") for n in range(int(count))]
    done = turn.run_many(jobs, timeout=600)
    return f"{len(done)} workers"
