"""The peers of the durable-steps benchmark: DBOS Transact and LangGraph, each on SQLite.

Both are in the ``bench`` extra; a peer that is not installed is skipped
with the reason (:func:`missing`). Everything stays on this machine: temp
folders, SQLite files, no server (a quick run under ``strace -f -e
trace=connect`` made no ``connect`` call at all).

- :class:`DbosSteps`: DBOS Transact 3.4 with its system database on a SQLite
  file (``system_database_url="sqlite:///..."``; no Postgres), no Conductor
  key, OTLP off. One ``@DBOS.workflow()`` per agent runs ``steps``
  ``@DBOS.step()`` calls in sequence; the workflows run at once on DBOS's own
  executor threads (``DBOS.start_workflow``), as its synchronous API does. A
  step's output is committed before the workflow goes on.
- :class:`LangGraphSteps`: LangGraph 1.2 with ``SqliteSaver`` on one SQLite
  file; a graph of one ``tool`` node that loops back to itself ``steps``
  times per ``thread_id``, run with ``durability="sync"`` (each super-step's
  checkpoint written before the next step starts); one thread per agent
  (``SqliteSaver`` is synchronous and serialises its connection with a lock).

Each peer's SQLite runs with the settings it chooses (DBOS: the rollback
journal; LangGraph: WAL; both ``synchronous=FULL``, kept in the JSON row as
``sqlite``); both go on from a step only after its commit.
"""

from __future__ import annotations

import importlib.util
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any, TypedDict

from stress.bench.durable_common import StepClock

__all__ = ["PEERS", "DbosSteps", "LangGraphSteps", "missing"]

PEERS = ("dbos", "langgraph")
"""The peers, by the contender names of the benchmark."""

PACKAGES = {"dbos": ("dbos",), "langgraph": ("langgraph", "langgraph.checkpoint.sqlite")}
"""The modules each peer needs."""


def missing(peer: str) -> str | None:
    """Why ``peer`` cannot run here (a module not installed), or None when it can."""
    for module in PACKAGES[peer]:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{module} is not installed (pip install -e '.[bench]')"
    return None


def _pragmas(path: Path) -> str:
    """The journal mode and synchronous level of the SQLite file at ``path``."""
    with sqlite3.connect(path) as conn:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    conn.close()
    return f"journal_mode={mode} synchronous={sync}"


_clock = StepClock()
"""The clock of the round running now (DBOS's registered functions reach it here)."""


@cache
def _dbos_workflow() -> Callable[[int, int], int]:
    """DBOS's workflow of one agent, decorated once per process (DBOS's registry is global)."""
    from dbos import DBOS

    @DBOS.step()
    def note(agent: int, step: int) -> str:
        return f"noted {agent}-{step}"

    @DBOS.workflow()
    def agent_workflow(agent: int, steps: int) -> int:
        for step in range(steps):
            durable_step_dbos(note, agent, step)
        return steps

    workflow: Callable[[int, int], int] = agent_workflow
    return workflow


def durable_step_dbos(note: Callable[[int, int], str], agent: int, step: int) -> None:
    """One durable step of DBOS: the ``@DBOS.step()`` call (its output committed on return)."""
    note(agent, step)
    _clock.tick(agent)


class DbosSteps:
    """DBOS Transact: a workflow per agent, a ``@DBOS.step()`` per tool step, SQLite."""

    name = "dbos"

    def __init__(self) -> None:
        """Nothing launched yet."""
        self._path = Path()

    def open(self, folder: Path, agents: int, steps: int) -> None:
        """Launch DBOS on a new SQLite system database in ``folder``."""
        from dbos import DBOS, DBOSConfig

        _dbos_workflow()  # registered before launch
        folder.mkdir(parents=True, exist_ok=True)
        self._path = folder / "dbos.sqlite"
        config: DBOSConfig = {
            "name": "retinue-durable-steps",
            "system_database_url": f"sqlite:///{self._path}",
            "enable_otlp": False,
            "log_level": "WARNING",
        }
        DBOS(config=config)
        DBOS.launch()

    def run_agents(self, first: int, count: int, steps: int, clock: StepClock) -> None:
        """Start ``count`` workflows at once; wait for each one's result."""
        from dbos import DBOS

        global _clock
        _clock = clock
        workflow = _dbos_workflow()
        handles = [DBOS.start_workflow(workflow, i, steps) for i in range(first, first + count)]
        for handle in handles:
            handle.get_result()

    def close(self) -> dict[str, Any]:
        """Destroy the DBOS instance; return the SQLite settings it ran with."""
        from dbos import DBOS

        DBOS.destroy()
        return {"sqlite": _pragmas(self._path)}


class _State(TypedDict):
    agent: int
    step: int
    steps: int
    note: str


class LangGraphSteps:
    """LangGraph: one ``tool`` node looping ``steps`` times per thread, ``SqliteSaver``."""

    name = "langgraph"

    def __init__(self) -> None:
        """Nothing opened yet."""
        self._path = Path()
        self._conn: sqlite3.Connection | None = None
        self._graph: Any = None
        self._clock = StepClock()

    def durable_step(self, state: _State) -> dict[str, Any]:
        """One durable step of LangGraph: the tool node (its checkpoint written before the next)."""
        self._clock.tick(state["agent"])
        return {"step": state["step"] + 1, "note": f"noted {state['agent']}-{state['step']}"}

    def open(self, folder: Path, agents: int, steps: int) -> None:
        """Open a SQLite checkpointer in ``folder``; compile the graph."""
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph

        folder.mkdir(parents=True, exist_ok=True)
        self._path = folder / "langgraph.sqlite"
        self._conn = sqlite3.connect(self._path, check_same_thread=False)
        saver = SqliteSaver(self._conn)
        saver.setup()

        def again(state: _State) -> str:
            return "tool" if state["step"] < state["steps"] else END

        graph = StateGraph(_State)
        graph.add_node("tool", self.durable_step)
        graph.add_edge(START, "tool")
        graph.add_conditional_edges("tool", again)
        self._graph = graph.compile(checkpointer=saver)

    def _agent(self, agent: int, steps: int) -> None:
        config = {"configurable": {"thread_id": f"agent-{agent}"}, "recursion_limit": steps + 10}
        start = {"agent": agent, "step": 0, "steps": steps, "note": ""}
        self._graph.invoke(start, config, durability="sync")

    def run_agents(self, first: int, count: int, steps: int, clock: StepClock) -> None:
        """Run ``count`` graphs at once, one thread each."""
        self._clock = clock
        with ThreadPoolExecutor(max_workers=count) as pool:
            done = [pool.submit(self._agent, i, steps) for i in range(first, first + count)]
            for future in done:
                future.result()

    def close(self) -> dict[str, Any]:
        """Close the SQLite connection; return the settings it ran with."""
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        return {"sqlite": _pragmas(self._path)}
