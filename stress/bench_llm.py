"""LLM benchmark: many concurrent model turns against a local OpenAI server, threads bounded.

``turns`` top-level agents (a ``LiteLLMRunner`` each, on litellm's OpenAI
provider path against :class:`~retinue.llm.stub.OpenAIStub` on 127.0.0.1) are
spawned at once and awaited. Baseline, measured in the same run against the
same server: raw ``litellm.acompletion`` calls on one event loop, with the same
bound on calls in flight. A retinue turn does one model call plus its durable
bookkeeping (spawn, turn start, the LLM state read, the usage and transcript
step, the settle with its completion); the per-call overhead is the difference
of the wall times divided by the turns. The same pair is measured on the
scripted model (no HTTP) to show retinue's overhead against litellm alone.

Threads are sampled every 10 ms during the retinue run; the stub server's
per-connection threads are not counted.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from retinue import Durability, Limits, Profile, Runtime
from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner
from retinue.llm.provider import load_litellm
from retinue.llm.stub import OpenAIStub

STUB_THREAD_MARKS = ("process_request_thread", "openai-stub")


class _ThreadSampler:
    """Samples the process's thread count (stub threads excluded) until stopped."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            own = [
                t
                for t in threading.enumerate()
                if not any(mark in t.name for mark in STUB_THREAD_MARKS)
            ]
            self.peak = max(self.peak, len(own))

    def __enter__(self) -> _ThreadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def raw_calls(model: str, turns: int, bound: int, **kwargs: Any) -> float:
    """Wall seconds of ``turns`` raw ``litellm.acompletion`` calls, ``bound`` in flight."""
    litellm = load_litellm()

    async def main() -> float:
        semaphore = asyncio.Semaphore(bound)

        async def one(i: int) -> None:
            async with semaphore:
                await litellm.acompletion(
                    model=model, messages=[{"role": "user", "content": f"task {i}"}], **kwargs
                )

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(turns)))
        return time.perf_counter() - start

    return asyncio.run(main())


def retinue_turns(
    folder: Path, runner: LiteLLMRunner, turns: int, bound: int
) -> tuple[float, int, int]:
    """Wall seconds of ``turns`` concurrent model turns; peak threads; completed turns."""
    limits = Limits(
        max_agents=turns * 2,
        max_active_turns=turns,
        max_concurrent_calls=bound,
        wait_max_s=3600.0,
    )
    profiles = [Profile("agent", runner=runner)]
    with Runtime.open(folder, profiles=profiles, limits=limits, durability=Durability.FULL) as rt:

        async def main() -> tuple[float, int]:
            start = time.perf_counter()
            infos = await asyncio.gather(
                *(rt.spawn_async("agent", f"task {i}") for i in range(turns))
            )
            done = await asyncio.gather(*(rt.wait_async(i.id, timeout=600) for i in infos))
            return time.perf_counter() - start, sum(c.status == "completed" for c in done)

        with _ThreadSampler() as sampler:
            seconds, completed = asyncio.run(main())
    return seconds, sampler.peak, completed


def run(turns: int, bound: int = 64) -> dict[str, Any]:
    """Measure both pairs; return the row."""
    load_litellm()
    row: dict[str, Any] = {"turns": turns, "calls_in_flight_bound": bound}
    with OpenAIStub() as stub, tempfile.TemporaryDirectory() as tmp:
        http = {"api_base": stub.url, "api_key": "x", "max_retries": 0}
        raw_calls("openai/stub-model", min(turns, 20), bound, **http)  # warm up the client
        raw_http = raw_calls("openai/stub-model", turns, bound, **http)
        runner = LiteLLMRunner("openai/stub-model", api_base=stub.url, api_key="x")
        ours_http, threads, completed = retinue_turns(Path(tmp) / "http", runner, turns, bound)
        raw_local = raw_calls(SCRIPTED_MODEL, turns, bound)
        ours_local, threads_local, completed_local = retinue_turns(
            Path(tmp) / "scripted", LiteLLMRunner(SCRIPTED_MODEL), turns, bound
        )
    row.update(
        {
            "http_raw_litellm_calls_per_s": round(turns / raw_http),
            "http_retinue_turns_per_s": round(turns / ours_http),
            "http_overhead_ms_per_call": round((ours_http - raw_http) / turns * 1000, 2),
            "http_completed": completed,
            "scripted_raw_litellm_calls_per_s": round(turns / raw_local),
            "scripted_retinue_turns_per_s": round(turns / ours_local),
            "scripted_overhead_ms_per_call": round((ours_local - raw_local) / turns * 1000, 2),
            "scripted_completed": completed_local,
            "peak_threads": max(threads, threads_local),
        }
    )
    return row


if __name__ == "__main__":
    print(run(100))
