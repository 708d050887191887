"""One life of the service soak's host: an asyncio program keeping trees in flight on one store.

``python -m stress.service_soak.host PLAN FOLDER LIFE STUB_URL STARTED`` opens
the store ``FOLDER/store`` (durability ``full``, the default limits and
retention), finishes what the lives before it left open (``FOLDER/open-<life>.json``,
written by the parent from their ledgers),
then keeps ``plan.trees`` trees in flight until the parent kills it (SIGKILL)
or stops it (SIGTERM: the trees in flight get a grace period, then the
runtime shuts down). Slots alternate model trees and Python trees
(:mod:`stress.service_soak.team`). Beside them: the loop-lag ticker, a
compaction every ``plan.compact_s`` and a sample every ``plan.sample_s``,
appended to ``FOLDER/samples-<life>.jsonl``. Every acknowledgement goes to the
life's ledger after its call returned (:mod:`stress.service_soak.ledger`).

A tree: spawn its lead under an idempotency key (``intent`` logged first),
wait for its completion, ``close_tree``. A tree a kill left open is finished
by the next life: its spawn is repeated with the same key (it must return
the agent the first spawn made, if it made one: acknowledged or not), then every
completion not received yet is waited for (a completion received before the
kill must not come again), and the tree is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
import time
from pathlib import Path

from retinue import Runtime
from retinue.errors import AgentClosed, NothingToWaitFor, RetinueError, UnknownAgent
from stress.service_soak.ledger import LedgerWriter, TreeState, open_trees
from stress.service_soak.plan import Plan
from stress.service_soak.sampler import Window, sample, tick_lag
from stress.service_soak.team import LEADS, profiles, task_of

__all__ = ["Host", "main"]

WAIT_S = 600.0
"""A tree's wait bound: a hang guard, not a timing expectation."""
STOP_GRACE_S = 60.0
"""How long the trees in flight may take to finish once the parent asks the host to stop;
a tree still open then is noted ``stalled`` (a hang guard: they take about a second)."""


class Host:
    """One life's trees: spawned, waited for and closed, each call acknowledged in the ledger."""

    def __init__(self, rt: Runtime, ledger: LedgerWriter, window: Window, life: int) -> None:
        """Drive ``rt``, writing to ``ledger`` and counting in ``window``."""
        self.rt, self.ledger, self.window, self.life = rt, ledger, window, life
        self.stop = asyncio.Event()
        self.compactions = 0
        self.in_flight: dict[str, float] = {}  # tree key -> when this life took it up

    async def slot(self, index: int) -> None:
        """Run trees one after the other until asked to stop (even slots: model trees)."""
        profile = LEADS[index % 2]
        n = 0
        while not self.stop.is_set():
            n += 1
            await self.tree(f"{self.life}.{index}.{n}", profile)

    async def tree(self, key: str, profile: str) -> None:
        """Spawn a tree under ``key``, wait for its lead's completion, close it."""
        self.ledger.write("intent", key=key, profile=profile)
        agent_id = await self._spawn(key, profile, retry=False)
        if agent_id is not None:
            await self._finish(key, agent_id, recovered=False)

    async def recover(self, tree: TreeState) -> None:
        """Finish a tree an earlier life left open (see the module docstring)."""
        agent_id = await self._spawn(tree.key, tree.profile, retry=True)
        if agent_id is not None and tree.agent_id not in (None, agent_id):
            error = f"the spawn repeated with its key made {agent_id}, not {tree.agent_id}"
            self.ledger.write("error", key=tree.key, call="spawn", error=error)
        if agent_id is not None:
            await self._finish(tree.key, agent_id, recovered=True)

    async def _spawn(self, key: str, profile: str, retry: bool) -> str | None:
        started = time.perf_counter()
        try:
            info = await self.rt.spawn_async(profile, task_of(key), idempotency_key=key)
        except RetinueError as exc:
            self._failed(key, "spawn", exc)
            return None
        self.window.spawned(time.perf_counter() - started)
        self.ledger.write("spawn", key=key, id=info.id, retry=retry)
        return info.id

    async def _finish(self, key: str, agent_id: str, recovered: bool) -> None:
        """Receive the lead's completions (every one left, if ``recovered``), close the tree."""
        self.in_flight[key] = time.monotonic()
        try:
            await self._receive_and_close(key, agent_id, recovered)
        finally:
            self.in_flight.pop(key, None)

    async def _receive_and_close(self, key: str, agent_id: str, recovered: bool) -> None:
        while True:
            try:
                done = await self.rt.wait_async(agent_id, timeout=WAIT_S)
            except (NothingToWaitFor, AgentClosed):
                break
            except UnknownAgent:
                self.ledger.write("gone", key=key, id=agent_id)
                return
            except RetinueError as exc:
                self._failed(key, "wait", exc)
                break
            self.ledger.write(
                "got",
                key=key,
                id=agent_id,
                gen=done.generation,
                cid=done.id,
                status=str(done.status),
                recovered=recovered,
            )
            if not recovered:
                break
        try:
            closed = await self.rt.close_tree_async(agent_id)
        except (AgentClosed, UnknownAgent):  # a close the kill left unacknowledged went through
            self.ledger.write("closed", key=key, ids=[], found_closed=True)
            return
        except RetinueError as exc:
            self._failed(key, "close_tree", exc)
            return
        self.ledger.write("closed", key=key, ids=[info.id for info in closed])
        self.window.tree_done()

    def _failed(self, key: str, call: str, exc: RetinueError) -> None:
        self.window.error()
        self.ledger.write("error", key=key, call=call, error=f"{type(exc).__name__}: {exc}"[:300])

    async def compact_every(self, seconds: float) -> None:
        """Compact the store every ``seconds`` (beside the runtime's own timer)."""
        while True:
            await asyncio.sleep(seconds)
            await self.rt.compact_async()
            self.compactions += 1


async def _sampling(host: Host, plan: Plan, folder: Path, started: float) -> None:
    """Append one sample per ``plan.sample_s`` to this life's samples file."""
    opened = time.monotonic()
    path = folder / f"samples-{host.life}.jsonl"
    with path.open("a", buffering=1) as out:
        last = opened
        while True:
            await asyncio.sleep(max(0.0, last + plan.sample_s - time.monotonic()))
            now = time.monotonic()
            row = await sample(host.rt, host.window, now - last)
            last = now
            row |= {
                "life": host.life,
                "t": round(time.time() - started, 1),
                "life_t": round(now - opened, 1),
                "compactions": host.compactions,
            }
            out.write(json.dumps(row) + "\n")


async def _run(host: Host, plan: Plan, folder: Path, started: float, term: threading.Event) -> None:
    """Recover, then run the slots until SIGTERM; give the trees in flight a grace period."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, host.stop.set)
    if term.is_set():  # asked to stop while the store was opening
        host.stop.set()
    left = open_trees(folder, host.life)
    helpers = [
        asyncio.create_task(tick_lag(host.window)),
        asyncio.create_task(host.compact_every(plan.compact_s)),
        asyncio.create_task(_sampling(host, plan, folder, started)),
    ]
    work = [asyncio.create_task(host.recover(tree)) for tree in left]
    work += [asyncio.create_task(host.slot(i)) for i in range(plan.trees)]
    await host.stop.wait()
    _, pending = await asyncio.wait(work, timeout=STOP_GRACE_S)
    now = time.monotonic()
    for key, since in host.in_flight.items():
        host.ledger.write("stalled", key=key, seconds=round(now - since, 1))
    for task in [*pending, *helpers]:
        task.cancel()
    await asyncio.gather(*pending, *helpers, return_exceptions=True)


def main(plan: Plan, folder: Path, life: int, stub_url: str, started: float) -> None:
    """Open the store, note it in the ledger, run until stopped, shut down."""
    term = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: term.set())
    ledger = LedgerWriter(folder, life)
    t0 = time.perf_counter()
    rt = Runtime.open(folder / "store", profiles=profiles(stub_url), durability="full")
    ledger.write("opened", life=life, open_s=round(time.perf_counter() - t0, 3))
    window = Window()
    rt.subscribe(window.on_event)
    host = Host(rt, ledger, window, life)
    try:
        asyncio.run(_run(host, plan, folder, started, term))
    finally:
        with contextlib.suppress(RetinueError):
            rt.shutdown()
        ledger.write("stopped", life=life, errors=window.total_errors)
        ledger.close()


if __name__ == "__main__":
    main(
        Plan.loads(sys.argv[1]),
        Path(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        float(sys.argv[5]),
    )
