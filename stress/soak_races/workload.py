"""The races soak's workload: runners, and host threads and asyncio tasks calling at random.

On a shared pool of top-level agents, whose runners settle at once, fail,
hold until interrupted, or run a child (``turn.run``) and close it, host
threads call spawn, follow-up, send, wait (tiny and longer timeouts),
interrupt and close-tree; asyncio tasks (on one event loop) wait, cancel
their ``wait_async``, follow up, interrupt and close. Every receipt is
counted in the :class:`~stress.soak_races.ledger.Ledger`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time

from retinue import Profile, Runtime, Turn
from retinue.errors import RetinueError, WaitTimeout
from retinue.protocol.messages import Completion
from stress.soak_races.ledger import Ledger

__all__ = ["POOL", "TASKS", "chaos", "profiles"]

POOL = 24  # top-level agents per round
TASKS = ["quick", "quick", "quick", "fail", "hold", "child", "child"]


def profiles(ledger: Ledger, holder: list[Runtime]) -> list[Profile]:
    def worker(turn: Turn) -> str:
        ledger.took(
            turn.ref.agent_id,
            turn.ref.generation,
            (m.id for m in turn.messages if m.kind == "completion"),
        )
        if turn.task == "fail":
            raise ValueError("on purpose")
        if turn.task == "hold":
            turn.cancelled.wait(0.2)
        elif turn.task == "shutdown":
            holder[0].shutdown()
        elif turn.task == "child" and turn.reason != "wake":
            child = turn.spawn("leaf", "leaf")
            done = _wait(turn, child.id)
            if done is not None:
                ledger.took(turn.ref.agent_id, turn.ref.generation, [done.id])
            turn.close(child.id)
        return f"out:{turn.task}"

    async def async_worker(turn: Turn) -> str:
        ledger.took(
            turn.ref.agent_id,
            turn.ref.generation,
            (m.id for m in turn.messages if m.kind == "completion"),
        )
        if turn.task == "fail":
            raise ValueError("on purpose")
        if turn.task == "hold":
            await asyncio.sleep(0.2)
        elif turn.task == "shutdown":
            holder[0].shutdown()  # from the runtime's own event loop
        elif turn.task == "child" and turn.reason != "wake":
            child = await turn.spawn_async("leaf", "leaf")
            try:
                event = await turn.wait_async(child.id, timeout=0.5)
            except WaitTimeout:
                event = None
            if isinstance(event, Completion):
                ledger.took(turn.ref.agent_id, turn.ref.generation, [event.id])
            await turn.close_async(child.id)
        return f"out:{turn.task}"

    def leaf(turn: Turn) -> str:
        return "leaf"

    return [
        Profile("w", subagents=["leaf"], runner=worker, wake_on_completion=True),
        Profile("aw", subagents=["leaf"], runner=async_worker, wake_on_completion=True),
        Profile("leaf", runner=leaf),
    ]


def _wait(turn: Turn, child: str) -> Completion | None:
    """Wait for the child's completion; None if the wait ran out of time."""
    try:
        event = turn.wait(child, timeout=0.5)
    except WaitTimeout:
        return None
    return event if isinstance(event, Completion) else None


def _forget(pool: list[str], agent_id: str, ledger: Ledger) -> None:
    with ledger.lock:
        if agent_id in pool:
            pool.remove(agent_id)


def _calm(agent_id: str) -> bool:
    """Half the agents are not interrupted by the host and seldom closed: their waits end.

    (With every agent interrupted or closed dozens of times a second, nearly
    every turn ended before its child returned: turns hardly ever received a
    completion, and the turn side of the ledger went untested.)
    """
    return int(agent_id[-1], 16) % 2 == 0


def _host_op(rt: Runtime, rng: random.Random, pool: list[str], ledger: Ledger) -> None:
    op = rng.choice(["wait", "wait", "wait", "follow", "follow", "interrupt", "send", "spawn"])
    agent_id = rng.choice(pool) if pool else None
    if agent_id is None or op == "spawn":
        if agent_id is not None and len(pool) >= POOL:
            if not _calm(agent_id) or rng.random() < 0.05:
                ledger.op("close_tree")
                _forget(pool, agent_id, ledger)
                rt.close_tree(agent_id)
                return
            op = "wait"  # a calm agent lives on
        else:
            info = rt.spawn(rng.choice(["w", "aw"]), rng.choice(TASKS))
            with ledger.lock:
                ledger.top.add(info.id)
                pool.append(info.id)
            ledger.op("spawn")
            return
    if op == "interrupt" and _calm(agent_id):
        op = "wait"
    ledger.op(op)
    if op == "wait":
        ledger.got(rt.wait(agent_id, timeout=rng.choice([0, 0.001, 0.05])))
    elif op == "follow":
        rt.follow_up(agent_id, rng.choice(TASKS))
    elif op == "interrupt":
        rt.interrupt(agent_id)
    else:
        rt.send(agent_id, "hi")


async def _task_op(rt: Runtime, rng: random.Random, pool: list[str], ledger: Ledger) -> None:
    if not pool:
        await asyncio.sleep(0.001)
        return
    agent_id = rng.choice(pool)
    op = rng.choice(["wait", "cancel", "cancel", "follow", "interrupt", "close"])
    ledger.op(f"async_{op}")
    if op == "wait":
        ledger.got(await rt.wait_async(agent_id, timeout=rng.choice([0, 0.01])))
    elif op == "cancel":
        task = asyncio.ensure_future(rt.wait_async(agent_id, timeout=1))
        for _ in range(rng.randrange(8)):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            ledger.got(await task)
    elif op == "follow":
        await rt.follow_up_async(agent_id, rng.choice(TASKS))
    elif op == "interrupt" and not _calm(agent_id):
        await rt.interrupt_async(agent_id)
    elif rng.random() < (0.0025 if _calm(agent_id) else 0.05):
        _forget(pool, agent_id, ledger)
        await rt.close_tree_async(agent_id)


def chaos(
    rt: Runtime,
    seconds: float,
    threads: int,
    tasks: int,
    seed: int,
    pool: list[str],
    ledger: Ledger,
) -> None:
    stop = time.monotonic() + seconds

    def host(n: int) -> None:
        rng = random.Random(seed * 1_000 + n)
        while time.monotonic() < stop:
            try:
                _host_op(rt, rng, pool, ledger)
            except RetinueError:
                pass
            except Exception as exc:
                ledger.problem(f"host thread: {type(exc).__name__}: {exc}")

    async def one(n: int) -> None:
        rng = random.Random(seed * 1_000_000 + n)
        while time.monotonic() < stop:
            try:
                await _task_op(rt, rng, pool, ledger)
            except RetinueError:
                pass
            except Exception as exc:
                ledger.problem(f"async task: {type(exc).__name__}: {exc}")

    async def loop_main() -> None:
        await asyncio.gather(*(one(n) for n in range(tasks)))

    workers = [threading.Thread(target=host, args=(n,)) for n in range(threads)]
    workers.append(threading.Thread(target=asyncio.run, args=(loop_main(),)))
    for w in workers:
        w.start()
    for w in workers:
        w.join()
