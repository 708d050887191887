"""LLM benchmark: many concurrent model turns against a local OpenAI server, threads bounded.

``turns`` top-level agents (a ``LiteLLMRunner`` each, on litellm's OpenAI
provider path against :class:`~retinue.testing.OpenAIStub` on 127.0.0.1) are
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
from retinue.testing import OpenAIStub
from stress.parts import Options, Part, Result

STUB_THREAD_MARKS = ("process_request_thread", "openai-stub")
WARM_UP = 10


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
    """Wall seconds of ``turns`` raw ``litellm.acompletion`` calls, ``bound`` in flight.

    Ten untimed calls on the same loop warm the client up first.
    """
    litellm = load_litellm()

    async def main() -> float:
        semaphore = asyncio.Semaphore(bound)

        async def one(i: int) -> None:
            async with semaphore:
                await litellm.acompletion(
                    model=model, messages=[{"role": "user", "content": f"task {i}"}], **kwargs
                )

        await asyncio.gather(*(one(i) for i in range(WARM_UP)))
        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(turns)))
        return time.perf_counter() - start

    return asyncio.run(main())


def retinue_turns(
    folder: Path, runner: LiteLLMRunner, turns: int, bound: int
) -> tuple[float, int, int]:
    """Wall seconds of ``turns`` concurrent model turns; peak threads; completed turns.

    Ten untimed turns warm the runtime's loop and client up first.
    """
    limits = Limits(
        max_agents=turns * 2 + WARM_UP,
        max_active_turns=turns,
        max_concurrent_calls=bound,
        wait_max_s=3600.0,
    )
    profiles = [Profile("agent", runner=runner)]
    with Runtime.open(folder, profiles=profiles, limits=limits, durability=Durability.FULL) as rt:

        async def main() -> tuple[float, int]:
            warm = await asyncio.gather(*(rt.spawn_async("agent", "warm") for _ in range(WARM_UP)))
            await asyncio.gather(*(rt.wait_async(i.id, timeout=600) for i in warm))
            start = time.perf_counter()
            infos = await asyncio.gather(
                *(rt.spawn_async("agent", f"task {i}") for i in range(turns))
            )
            done = await asyncio.gather(*(rt.wait_async(i.id, timeout=600) for i in infos))
            return time.perf_counter() - start, sum(c.status == "completed" for c in done)

        with _ThreadSampler() as sampler:
            seconds, completed = asyncio.run(main())
    return seconds, sampler.peak, completed


def run(turns: int, bound: int = 64, reps: int = 1) -> dict[str, Any]:
    """Measure both pairs, alternating ``reps`` times (best wall time of each); return the row."""
    load_litellm()
    row: dict[str, Any] = {"turns": turns, "calls_in_flight_bound": bound, "reps": reps}
    walls: dict[str, list[float]] = {"raw_http": [], "http": [], "raw_local": [], "local": []}
    threads = 0
    completed = {"http": 0, "local": 0}
    with OpenAIStub() as stub, tempfile.TemporaryDirectory() as tmp:
        http = {"api_base": stub.url, "api_key": "x", "max_retries": 0}
        http_runner = LiteLLMRunner("openai/stub-model", api_base=stub.url, api_key="x")
        local_runner = LiteLLMRunner(SCRIPTED_MODEL)
        for rep in range(reps):
            walls["raw_http"].append(raw_calls("openai/stub-model", turns, bound, **http))
            seconds, peak, done = retinue_turns(Path(tmp) / f"http{rep}", http_runner, turns, bound)
            walls["http"].append(seconds)
            threads, completed["http"] = max(threads, peak), done
            walls["raw_local"].append(raw_calls(SCRIPTED_MODEL, turns, bound))
            seconds, peak, done = retinue_turns(
                Path(tmp) / f"local{rep}", local_runner, turns, bound
            )
            walls["local"].append(seconds)
            threads, completed["local"] = max(threads, peak), done
    best = {k: min(v) for k, v in walls.items()}
    row.update(
        {
            "http_raw_litellm_calls_per_s": round(turns / best["raw_http"]),
            "http_retinue_turns_per_s": round(turns / best["http"]),
            "http_overhead_ms_per_call": round((best["http"] - best["raw_http"]) / turns * 1000, 2),
            "http_ratio_vs_raw": round(best["raw_http"] / best["http"], 2),
            "http_completed": completed["http"],
            "scripted_raw_litellm_calls_per_s": round(turns / best["raw_local"]),
            "scripted_retinue_turns_per_s": round(turns / best["local"]),
            "scripted_overhead_ms_per_call": round(
                (best["local"] - best["raw_local"]) / turns * 1000, 2
            ),
            "scripted_ratio_vs_raw": round(best["raw_local"] / best["local"], 2),
            "scripted_completed": completed["local"],
            "peak_threads": threads,
        }
    )
    return row


if __name__ == "__main__":
    print(run(100))


def _part(options: Options) -> Result:
    row = run(50 if options.quick else 1000, reps=1 if options.quick else 3)
    title = "llm: concurrent model turns vs raw litellm.acompletion, local OpenAI server"
    return Result.row(title, row)


PART = Part("llm", _part)
