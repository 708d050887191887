"""Per-call figures of model turns: added latency (p50, p99) and a multi-step turn's time per step.

Both against raw ``litellm.acompletion`` calls on the same server in the same
run (the child-process stub of :mod:`stress.bench.stub_server`, or the offline
model for the latency pair), alternated with retinue's:

- latency: ``calls`` one-call turns one after another (nothing else in flight):
  each retinue turn timed from ``spawn_async`` to its completion, each raw call
  from its call to its return; the added latency is the difference of the
  quantiles.
- steps: ``turns`` turns in flight (``bound`` calls at once) of a model that
  calls the host tool ``note`` :data:`STEPS` times and then answers
  (``steps-5`` on the child stub): 6 model calls a turn. Raw: the same loop by
  hand (call, run the tool, append, call again). Every retinue step commits
  the turn's usage and transcript (durability ``full``) before the next call.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from retinue import Durability, Limits, Profile, Runtime
from retinue.llm import LiteLLMRunner
from retinue.llm.model import load_litellm

__all__ = [
    "STEPS",
    "note",
    "quantiles_ms",
    "raw_latencies",
    "raw_openai",
    "raw_steps",
    "retinue_latencies",
    "retinue_steps",
]

STEPS = 5
"""Tool calls of a multi-step turn before its answer."""

NOTE_SCHEMA = {
    "type": "function",
    "function": {
        "name": "note",
        "description": "Take a note.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
}


def note(text: str) -> str:
    """Take a note (the multi-step turn's tool)."""
    return f"noted {text}"


def quantiles_ms(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 of ``samples`` (seconds), in milliseconds (nearest rank)."""
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return at(0.5), at(0.99)


def raw_latencies(model: str, calls: int, **kwargs: Any) -> list[float]:
    """Seconds of each of ``calls`` raw ``litellm.acompletion`` calls, one at a time."""
    litellm = load_litellm()

    async def main() -> list[float]:
        samples = []
        for i in range(calls + 5):
            start = time.perf_counter()
            await litellm.acompletion(
                model=model, messages=[{"role": "user", "content": f"task {i}"}], **kwargs
            )
            samples.append(time.perf_counter() - start)
        return samples[5:]

    return asyncio.run(main())


def raw_openai(url: str, turns: int, bound: int) -> float | None:
    """Wall seconds of ``turns`` calls of the openai client itself (the stretch's fastest peer).

    ``bound`` in flight, one ``AsyncOpenAI`` client, ten untimed calls first.
    None when the openai package is not installed.
    """
    try:
        from openai import AsyncOpenAI
    except ImportError:
        return None

    async def main() -> float:
        client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        semaphore = asyncio.Semaphore(bound)

        async def one(i: int) -> None:
            async with semaphore:
                await client.chat.completions.create(
                    model="stub-model", messages=[{"role": "user", "content": f"task {i}"}]
                )

        await asyncio.gather(*(one(i) for i in range(10)))
        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(turns)))
        seconds = time.perf_counter() - start
        await client.close()
        return seconds

    return asyncio.run(main())


def _limits(turns: int, bound: int) -> Limits:
    return Limits(
        max_agents=turns * 2 + 10,
        max_active_turns=max(turns, 1),
        max_concurrent_calls=bound,
        wait_max_s=3600.0,
    )


Body = Callable[[Runtime], Coroutine[Any, Any, Any]]


def _in_runtime(folder: Path, runner: LiteLLMRunner, limits: Limits, body: Body) -> Any:
    profiles = [Profile("agent", runner=runner)]
    with Runtime.open(folder, profiles=profiles, limits=limits, durability=Durability.FULL) as rt:
        return asyncio.run(body(rt))


def retinue_latencies(folder: Path, runner: LiteLLMRunner, calls: int) -> list[float]:
    """Seconds of each of ``calls`` one-call turns, one at a time (spawn to completion)."""

    async def body(rt: Runtime) -> list[float]:
        samples = []
        for i in range(calls + 5):
            start = time.perf_counter()
            info = await rt.spawn_async("agent", f"task {i}")
            done = await rt.wait_async(info.id, timeout=600)
            samples.append(time.perf_counter() - start)
            assert done.status == "completed", done
        return samples[5:]

    samples: list[float] = _in_runtime(folder, runner, _limits(calls + 5, 1), body)
    return samples


def raw_steps(
    model: str, turns: int, bound: int, tools: list[dict[str, Any]] | None = None, **kwargs: Any
) -> float:
    """Wall seconds of ``turns`` hand-written tool loops (``bound`` calls in flight).

    ``tools``: the tools every call offers (default: ``note`` alone).
    """
    litellm = load_litellm()
    offered = [NOTE_SCHEMA] if tools is None else tools

    async def main() -> float:
        semaphore = asyncio.Semaphore(bound)

        async def call(messages: list[dict[str, Any]]) -> Any:
            async with semaphore:
                reply = await litellm.acompletion(
                    model=model, messages=messages, tools=offered, **kwargs
                )
            return reply.choices[0].message

        async def one(i: int) -> None:
            messages: list[dict[str, Any]] = [{"role": "user", "content": f"task {i}"}]
            message = await call(messages)
            while message.tool_calls:
                messages.append(message.model_dump(exclude_none=True))
                for tool_call in message.tool_calls:
                    text = json.loads(tool_call.function.arguments)["text"]
                    result = {"role": "tool", "tool_call_id": tool_call.id, "content": note(text)}
                    messages.append(result)
                message = await call(messages)

        await asyncio.gather(*(one(i) for i in range(2)))
        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(turns)))
        return time.perf_counter() - start

    return asyncio.run(main())


def retinue_steps(folder: Path, runner: LiteLLMRunner, turns: int, bound: int) -> float:
    """Wall seconds of ``turns`` concurrent multi-step turns (``bound`` calls in flight)."""

    async def body(rt: Runtime) -> float:
        warm = await asyncio.gather(*(rt.spawn_async("agent", "warm") for _ in range(2)))
        await asyncio.gather(*(rt.wait_async(i.id, timeout=600) for i in warm))
        start = time.perf_counter()
        infos = await asyncio.gather(*(rt.spawn_async("agent", f"task {i}") for i in range(turns)))
        done = await asyncio.gather(*(rt.wait_async(i.id, timeout=600) for i in infos))
        seconds = time.perf_counter() - start
        assert all(c.status == "completed" for c in done)
        return seconds

    seconds: float = _in_runtime(folder, runner, _limits(turns + 2, bound), body)
    return seconds
