"""AutoGen core 0.7.5's in-memory runtime on the same workloads as retinue's benchmarks.

``SingleThreadedAgentRuntime`` is the peer baseline: an asyncio runtime that
keeps nothing durable. Install it with ``pip install -e '.[bench]'``; when it
is missing every function here returns None and the tables say "not installed".

Workloads, matched to retinue's:

- lifecycles: N fresh agents (a new ``AgentId`` each) handle one message and
  reply, with ``callers`` concurrent callers (asyncio tasks). AutoGen has no
  close, so its lifecycle is spawn + ask; instantiated agents stay in memory.
- trees: a lead asks 2 fresh mids at once, each mid asks 2 fresh leaves at
  once (7 agents per tree), ``trees`` trees in flight at a time. Routing
  latency is measured as in retinue's: from a mid's last leaf returning to
  the mid's gather returning.
"""

import asyncio
import itertools
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["installed", "lifecycles", "trees"]

_ids = itertools.count()


def installed() -> bool:
    """True if autogen-core can be imported."""
    try:
        import autogen_core  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class _Task:
    text: str


def _agents(routes: list[float] | None = None) -> tuple[Any, Any, Any]:
    """The leaf (echo), mid and lead agent classes; mids add routing latencies to ``routes``."""
    from autogen_core import AgentId, MessageContext, RoutedAgent, message_handler

    class Echo(RoutedAgent):
        def __init__(self) -> None:
            super().__init__("echo")

        @message_handler
        async def on_task(self, message: _Task, ctx: MessageContext) -> _Task:
            return _Task(repr(time.perf_counter()))  # the moment the child returns

    class Mid(RoutedAgent):
        def __init__(self) -> None:
            super().__init__("mid")

        @message_handler
        async def on_task(self, message: _Task, ctx: MessageContext) -> _Task:
            replies = await asyncio.gather(
                *(
                    self.send_message(_Task(message.text), AgentId("leaf", f"l{next(_ids)}"))
                    for _ in range(2)
                )
            )
            if routes is not None:
                routes.append(time.perf_counter() - max(float(r.text) for r in replies))
            return _Task(",".join(r.text for r in replies))

    class Lead(RoutedAgent):
        def __init__(self) -> None:
            super().__init__("lead")

        @message_handler
        async def on_task(self, message: _Task, ctx: MessageContext) -> _Task:
            replies = await asyncio.gather(
                *(
                    self.send_message(_Task(message.text), AgentId("mid", f"m{next(_ids)}"))
                    for _ in range(2)
                )
            )
            return _Task("|".join(r.text for r in replies))

    return Echo, Mid, Lead


def lifecycles(callers: int, per_caller: int) -> float | None:
    """Fresh-agent lifecycles per second on AutoGen's runtime, or None if not installed."""
    if not installed():
        return None
    from autogen_core import AgentId, SingleThreadedAgentRuntime

    echo, _, _ = _agents()

    async def main() -> float:
        runtime = SingleThreadedAgentRuntime()
        await echo.register(runtime, "echo", lambda: echo())
        runtime.start()

        async def caller() -> None:
            for _ in range(per_caller):
                await runtime.send_message(_Task("go"), AgentId("echo", f"e{next(_ids)}"))

        start = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(callers)))
        elapsed = time.perf_counter() - start
        await runtime.stop()
        return callers * per_caller / elapsed

    return asyncio.run(main())


def trees(concurrent: int, per_slot: int) -> dict[str, float] | None:
    """3-level trees on AutoGen: agents/s, tree and routing latency p50/p99 (ms), or None."""
    if not installed():
        return None
    from autogen_core import AgentId, SingleThreadedAgentRuntime

    routes: list[float] = []
    echo, mid, lead = _agents(routes)

    async def main() -> dict[str, float]:
        runtime = SingleThreadedAgentRuntime()
        await echo.register(runtime, "leaf", lambda: echo())
        await mid.register(runtime, "mid", lambda: mid())
        await lead.register(runtime, "lead", lambda: lead())
        runtime.start()
        latencies: list[float] = []

        async def slot() -> None:
            for _ in range(per_slot):
                t0 = time.perf_counter()
                await runtime.send_message(_Task("go"), AgentId("lead", f"t{next(_ids)}"))
                latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        await asyncio.gather(*(slot() for _ in range(concurrent)))
        elapsed = time.perf_counter() - start
        await runtime.stop()
        return {
            "agents_per_s": 7 * concurrent * per_slot / elapsed,
            "p50_ms": percentile(latencies, 50) * 1000,
            "p99_ms": percentile(latencies, 99) * 1000,
            "route_p50_ms": percentile(routes, 50) * 1000,
            "route_p99_ms": percentile(routes, 99) * 1000,
        }

    return asyncio.run(main())


def percentile(values: list[float], pct: float) -> float:
    """Return the ``pct`` percentile of ``values`` (nearest rank); 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]
