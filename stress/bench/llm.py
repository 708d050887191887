"""LLM benchmark: many concurrent model turns against a local OpenAI server, threads bounded.

``turns`` top-level agents (a ``LiteLLMRunner`` each, on litellm's OpenAI
provider path against the OpenAI server of :mod:`stress.bench.stub_server`,
which runs in a child process so that neither side shares its GIL with the
server, on 127.0.0.1) are spawned at once and awaited. Baseline, measured in
the same run against the same server: raw ``litellm.acompletion`` calls on one
event loop, with the same bound on calls in flight. A retinue turn does one
model call plus its durable bookkeeping (spawn, turn start, the LLM state read,
the usage and transcript step, the settle with its completion); the per-call
overhead is the difference of the wall times divided by the turns. The same
pair is measured on the scripted model (no HTTP) to show retinue's overhead
against litellm alone. The raw side runs twice: a plain call (model and
messages) and the request a turn sends (its agent's tools too: ``send_message``
alone for an agent that may not spawn; the ``*_same_request`` rows, as the
instruction counts compare). The pairs alternate ``reps`` times; each rate is the
median round's, each ratio the median of the rounds' own (with their range),
and the process's CPU per call or turn is printed beside it (a shared machine
disturbs it less than wall time). :mod:`stress.bench.llm_costs` adds where a
turn's time goes against a raw call (the ``costs_*`` rows: user and system CPU,
CPU by thread, context switches, the collector, hand-offs between threads,
commits and fsyncs per turn). :mod:`stress.bench.llm_calls` adds the latency of one call at
a time (p50, p99, raw beside retinue's) and a multi-step turn's time per step; the full
run adds :mod:`stress.bench.llm_instructions`, the instructions per one-call turn under
callgrind on the offline model (``--only llm_instructions`` runs it alone).

Threads are sampled every 10 ms during the retinue run; the stub server's
per-connection threads are not counted.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from retinue import Durability, Limits, Profile, Runtime
from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner
from retinue.llm.model import load_litellm
from stress.bench import llm_costs, llm_instructions
from stress.bench.llm_calls import (
    STEPS,
    note,
    quantiles_ms,
    raw_latencies,
    raw_openai,
    raw_steps,
    retinue_latencies,
    retinue_steps,
)
from stress.bench.llm_instructions import captured_call
from stress.bench.stub_server import ChildStub
from stress.parts import Options, Part, Result

STUB_THREAD_MARKS = ("process_request_thread", "openai-stub")
WARM_UP = 10
COSTS_TURNS = 200
"""The fewest turns of the diagnostic pair (:mod:`stress.bench.llm_costs`)."""


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


def raw_calls(model: str, turns: int, bound: int, **kwargs: Any) -> tuple[float, float]:
    """Wall and process CPU seconds of ``turns`` raw ``litellm.acompletion`` calls.

    ``bound`` in flight; ten untimed calls on the same loop warm the client up first.
    """
    litellm = load_litellm()

    async def main() -> tuple[float, float]:
        semaphore = asyncio.Semaphore(bound)

        async def one(i: int) -> None:
            async with semaphore:
                await litellm.acompletion(
                    model=model, messages=[{"role": "user", "content": f"task {i}"}], **kwargs
                )

        await asyncio.gather(*(one(i) for i in range(WARM_UP)))
        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(i) for i in range(turns)))
        return time.perf_counter() - start, time.process_time() - cpu

    return asyncio.run(main())


def retinue_turns(
    folder: Path, runner: LiteLLMRunner, turns: int, bound: int
) -> tuple[float, float, int, int]:
    """Wall and process CPU seconds of ``turns`` concurrent model turns; peak threads; completed.

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

        async def main() -> tuple[float, float, int]:
            warm = await asyncio.gather(*(rt.spawn_async("agent", "warm") for _ in range(WARM_UP)))
            await asyncio.gather(*(rt.wait_async(i.id, timeout=600) for i in warm))
            start, cpu = time.perf_counter(), time.process_time()
            infos = await asyncio.gather(
                *(rt.spawn_async("agent", f"task {i}") for i in range(turns))
            )
            done = await asyncio.gather(*(rt.wait_async(i.id, timeout=600) for i in infos))
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            return seconds, cpu, sum(c.status == "completed" for c in done)

        with _ThreadSampler() as sampler:
            seconds, cpu, completed = asyncio.run(main())
    return seconds, cpu, sampler.peak, completed


def same_request(folder: Path, runner: LiteLLMRunner) -> dict[str, Any]:
    """The keywords of the first model call of ``runner``'s one-call turn, but its messages.

    A turn offers its agent's tools (an agent that may not spawn: ``send_message``
    alone), so the raw call that does what a turn does sends them too: the
    ``*_same_request`` rows compare against it.
    """
    request = captured_call(folder, runner)
    request.pop("messages", None)
    return request


def _throughput(url: str, tmp: Path, turns: int, bound: int, reps: int) -> dict[str, Any]:
    """Turns/s of both pairs (HTTP, offline), alternated ``reps`` times.

    Rates are the median round's; a ratio is the median of the ratios taken
    within each round (raw and retinue run back to back), with their range;
    CPU is the whole process's (every thread; the server is in its child).
    """
    runs: dict[str, list[tuple[float, float]]] = {
        "raw_http": [],
        "raw_http_same": [],
        "http": [],
        "raw_local": [],
        "raw_local_same": [],
        "local": [],
    }
    openai_walls: list[float] = []
    threads = 0
    completed = {"http": 0, "local": 0}
    http = {"api_base": url, "api_key": "x", "max_retries": 0}
    runners = {
        "http": LiteLLMRunner("openai/stub-model", api_base=url, api_key="x"),
        "local": LiteLLMRunner(SCRIPTED_MODEL),
    }
    same = {side: same_request(tmp / f"request-{side}", runners[side]) for side in runners}
    for rep in range(reps):
        runs["raw_http"].append(raw_calls("openai/stub-model", turns, bound, **http))
        runs["raw_http_same"].append(raw_calls(turns=turns, bound=bound, **same["http"]))
        client = raw_openai(url, turns, bound)
        openai_walls += [] if client is None else [client]
        for side in ("http", "local"):
            if side == "local":
                runs["raw_local"].append(raw_calls(SCRIPTED_MODEL, turns, bound))
                runs["raw_local_same"].append(raw_calls(turns=turns, bound=bound, **same["local"]))
            wall, cpu, peak, done = retinue_turns(tmp / f"{side}{rep}", runners[side], turns, bound)
            runs[side].append((wall, cpu))
            threads, completed[side] = max(threads, peak), done
    row: dict[str, Any] = {}
    for side, raw, ours in (("http", "raw_http", "http"), ("scripted", "raw_local", "local")):
        ratios = sorted(r[0] / o[0] for r, o in zip(runs[raw], runs[ours], strict=True))
        same_ratios = sorted(
            r[0] / o[0] for r, o in zip(runs[raw + "_same"], runs[ours], strict=True)
        )
        raw_wall = statistics.median(w for w, _ in runs[raw])
        our_wall = statistics.median(w for w, _ in runs[ours])
        raw_cpu = statistics.median(c for _, c in runs[raw]) / turns * 1000
        our_cpu = statistics.median(c for _, c in runs[ours]) / turns * 1000
        row[f"{side}_raw_litellm_calls_per_s"] = round(turns / raw_wall)
        row[f"{side}_retinue_turns_per_s"] = round(turns / our_wall)
        row[f"{side}_ratio_vs_raw_median_range"] = (
            round(statistics.median(ratios), 2),
            f"{ratios[0]:.2f}-{ratios[-1]:.2f}",
        )
        row[f"{side}_raw_same_request_calls_per_s"] = round(
            turns / statistics.median(w for w, _ in runs[raw + "_same"])
        )
        row[f"{side}_ratio_vs_raw_same_request_median_range"] = (
            round(statistics.median(same_ratios), 2),
            f"{same_ratios[0]:.2f}-{same_ratios[-1]:.2f}",
        )
        row[f"{side}_cpu_ms_raw_call_retinue_turn"] = (round(raw_cpu, 2), round(our_cpu, 2))
        row[f"{side}_cpu_ratio_raw_vs_retinue"] = round(raw_cpu / our_cpu, 2)
        row[f"{side}_completed"] = completed[ours]
    row["peak_threads"] = threads
    row["http_raw_openai_client_calls_per_s"] = (
        round(turns / statistics.median(openai_walls)) if openai_walls else "not installed"
    )
    row["peers_agentchat_langgraph_agents_sdk_pydantic_ai"] = "not run (not installed here)"
    return row


def _latency(url: str, tmp: Path, calls: int) -> dict[str, Any]:
    """p50/p99 of one call at a time: raw calls and one-call turns, HTTP and offline."""
    http: dict[str, Any] = {"api_base": url, "api_key": "x", "max_retries": 0}
    row: dict[str, Any] = {}
    http_runner = LiteLLMRunner("openai/stub-model", api_base=url, api_key="x")
    pairs: tuple[tuple[str, str, dict[str, Any], LiteLLMRunner], ...] = (
        ("http", "openai/stub-model", http, http_runner),
        ("scripted", SCRIPTED_MODEL, {}, LiteLLMRunner(SCRIPTED_MODEL)),
    )
    for side, model, kwargs, runner in pairs:
        raw = quantiles_ms(raw_latencies(model, calls, **kwargs))
        ours = quantiles_ms(retinue_latencies(tmp / f"lat-{side}", runner, calls))
        row[f"{side}_raw_call_p50_p99_ms"] = raw
        row[f"{side}_retinue_turn_p50_p99_ms"] = ours
        row[f"{side}_added_p50_p99_ms"] = (
            round(ours[0] - raw[0], 2),
            round(ours[1] - raw[1], 2),
        )
    return row


def _steps(url: str, tmp: Path, turns: int, bound: int, reps: int) -> dict[str, Any]:
    """Time per step of a 5-tool-call turn, raw loop against retinue's (median of ``reps``)."""
    model = f"openai/steps-{STEPS}"
    http: dict[str, Any] = {"api_base": url, "api_key": "x", "max_retries": 0}
    runner = LiteLLMRunner(model, api_base=url, api_key="x", host_tools={"note": note})
    tools = same_request(tmp / "request-steps", runner)["tools"]
    raw, raw_same, ours = [], [], []
    for rep in range(reps):
        raw.append(raw_steps(model, turns, bound, **http))
        raw_same.append(raw_steps(model, turns, bound, tools=tools, **http))
        ours.append(retinue_steps(tmp / f"steps{rep}", runner, turns, bound))
    calls = turns * (STEPS + 1)
    ratios = sorted(r / o for r, o in zip(raw, ours, strict=True))
    same_ratios = sorted(r / o for r, o in zip(raw_same, ours, strict=True))
    return {
        "steps_turns": turns,
        "steps_raw_ms_per_step": round(statistics.median(raw) / calls * 1000, 3),
        "steps_retinue_ms_per_step": round(statistics.median(ours) / calls * 1000, 3),
        "steps_ratio_vs_raw_median_range": (
            round(statistics.median(ratios), 2),
            f"{ratios[0]:.2f}-{ratios[-1]:.2f}",
        ),
        "steps_raw_same_request_ms_per_step": round(statistics.median(raw_same) / calls * 1000, 3),
        "steps_ratio_vs_raw_same_request_median_range": (
            round(statistics.median(same_ratios), 2),
            f"{same_ratios[0]:.2f}-{same_ratios[-1]:.2f}",
        ),
    }


def run(turns: int, bound: int = 64, reps: int = 1, latency_calls: int = 200) -> dict[str, Any]:
    """Measure every pair, alternating ``reps`` times; return the row."""
    load_litellm()
    row: dict[str, Any] = {"turns": turns, "calls_in_flight_bound": bound, "reps": reps}
    with ChildStub() as stub, tempfile.TemporaryDirectory() as tmp:
        row.update(_throughput(stub.url, Path(tmp), turns, bound, reps))
        row.update(llm_costs.costs(Path(tmp) / "costs", max(turns, COSTS_TURNS), bound))
        row.update(_latency(stub.url, Path(tmp), latency_calls))
        row.update(_steps(stub.url, Path(tmp), max(turns // 5, 10), bound, reps))
    return row


if __name__ == "__main__":
    print(run(100))


def _part(options: Options) -> Result:
    if options.quick:
        row = run(50, reps=1, latency_calls=10)
    else:
        # Instructions per turn under callgrind: too slow for --quick (30-100x).
        row = {**run(1000, reps=3), **llm_instructions.run(20)}
    title = "llm: model turns vs raw litellm.acompletion, OpenAI server in a child process"
    return Result.row(title, row)


PART = Part("llm", _part)
