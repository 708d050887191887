"""What every contender of the durable-steps benchmark shares: its shape, its clock, its figures.

A contender (:class:`Contender`) runs ``count`` agents at once, each doing
``steps`` sequential durable tool steps, and ticks a :class:`StepClock` as
each step of agent ``i`` is durably done (the agent may go on). One function
per contender runs one durable step for agent ``i`` (``durable_step`` in
each contender's module): it is the one place a journaled step (an intent
committed before the call, grouped with the step's other writes) changes.

A step's latency is the time between two ticks of the same agent: one full
durable tool step as the agent sees it (for retinue: the commit of a step's
results, the next model call, the commit of its answer, the tool's start).
The first step of an agent is not counted (its start includes the agent's).

:class:`FsyncFloor` is the floor: a raw 4 KiB ``os.write`` + ``os.fsync`` per
step on a temporary file of the agent's own, no batching.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "Contender",
    "FsyncFloor",
    "StepClock",
    "StepRun",
    "quantile",
]


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank; 0.0 when there are none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class StepClock:
    """When each agent's durable steps were done; ticked from any thread."""

    def __init__(self) -> None:
        """An empty clock."""
        self._ticks: dict[int, list[float]] = {}
        self._lock = threading.Lock()

    def tick(self, agent: int) -> None:
        """Agent ``agent`` finished a durable step now."""
        now = time.perf_counter()
        with self._lock:
            self._ticks.setdefault(agent, []).append(now)

    def intervals(self) -> list[float]:
        """Seconds between consecutive ticks of each agent (its first step left out)."""
        with self._lock:
            return [b - a for ticks in self._ticks.values() for a, b in itertools.pairwise(ticks)]

    def steps(self) -> int:
        """How many steps were ticked."""
        with self._lock:
            return sum(len(ticks) for ticks in self._ticks.values())


@dataclass
class StepRun:
    """One level's figures: ``agents`` at once, ``steps`` each, ``rounds`` times over."""

    agents: int
    steps: int
    rounds: int
    wall_s: float = 0.0
    done_steps: int = 0
    intervals: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The figures as JSON: steps/s, p50/p99 per-step latency (ms), what was run."""
        return {
            "agents": self.agents,
            "steps_per_agent": self.steps,
            "rounds": self.rounds,
            "steps_done": self.done_steps,
            "steps_expected": self.agents * self.steps * self.rounds,
            "wall_s": round(self.wall_s, 3),
            "steps_per_s": round(self.done_steps / self.wall_s, 1) if self.wall_s else 0.0,
            "p50_ms": round(quantile(self.intervals, 0.50) * 1000, 3),
            "p99_ms": round(quantile(self.intervals, 0.99) * 1000, 3),
            "samples": len(self.intervals),
            **self.extra,
        }


class Contender(Protocol):
    """One system under test: opened once per level, then asked to run rounds of agents."""

    name: str

    def open(self, folder: Path, agents: int, steps: int) -> None:
        """Prepare for rounds of ``agents`` agents of ``steps`` steps, storing in ``folder``."""
        ...

    def run_agents(self, first: int, count: int, steps: int, clock: StepClock) -> None:
        """Run agents ``first .. first+count-1`` at once, ``steps`` durable steps each;
        return when all are done (ticking ``clock`` after each step)."""
        ...

    def close(self) -> dict[str, Any]:
        """Release what :meth:`open` took; return extra figures for the level's row."""
        ...


BLOCK = b"x" * 4096
"""What the floor writes per step."""


class FsyncFloor:
    """The floor: per step, 4 KiB appended to the agent's own file and fsync'd (threads)."""

    name = "fsync"

    def __init__(self) -> None:
        """Nothing opened yet."""
        self._folder = Path()

    def open(self, folder: Path, agents: int, steps: int) -> None:
        """Use ``folder`` for the agents' files."""
        folder.mkdir(parents=True, exist_ok=True)
        self._folder = folder

    def durable_step(self, fd: int, agent: int, clock: StepClock) -> None:
        """One durable step of agent ``agent``: write 4 KiB to ``fd`` and fsync it."""
        os.write(fd, BLOCK)
        os.fsync(fd)
        clock.tick(agent)

    def _agent(self, agent: int, steps: int, clock: StepClock) -> None:
        fd = os.open(self._folder / f"agent-{agent}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for _ in range(steps):
                self.durable_step(fd, agent, clock)
        finally:
            os.close(fd)

    def run_agents(self, first: int, count: int, steps: int, clock: StepClock) -> None:
        """One thread per agent, each fsyncing its own file ``steps`` times."""
        with ThreadPoolExecutor(max_workers=count) as pool:
            done = [pool.submit(self._agent, i, steps, clock) for i in range(first, first + count)]
            for future in done:
                future.result()

    def close(self) -> dict[str, Any]:
        """Nothing to release."""
        return {}
