"""Lifecycle benchmark: fresh agents spawned, run and awaited per second.

Baselines, measured in the same run: raw pykka, one ``ThreadingActor``
started, asked once and stopped per request, with the same number of
concurrent host threads; and AutoGen core 0.7.5's in-memory
``SingleThreadedAgentRuntime`` with as many concurrent callers (when installed:
``pip install -e '.[bench]'``). retinue does more per lifecycle (an
LMDB-durable spawn, a turn start, a settle and a completion, each committed)
and the ratios say what that costs.

Tracing (issue 19): the buffered runtime also runs with tracing off
(``OTEL_SDK_DISABLED=true``), with the OpenTelemetry API only (no SDK
configured: what a host that installed the extra but set up nothing pays)
and with the SDK recording every span to an in-memory exporter, in the same
rounds; the row gives their ratios and the cost per lifecycle in µs.

Metrics (issue 19): the buffered runtime also runs with a
``retinue.metrics.RetinueCollector`` attached (when ``prometheus-client`` is
installed), which times every store commit and supervisor command and counts
every event, in the same rounds: ``metrics_vs_plain`` and its µs per lifecycle.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pykka

from retinue import Durability, Limits, Profile, Runtime, Turn
from stress.bench import autogen as bench_autogen
from stress.parts import Options, Part, Result


class _Echo(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


def _work(callers: int, per_caller: int, body: Any) -> float:
    threads = [
        threading.Thread(target=lambda: [body() for _ in range(per_caller)]) for _ in range(callers)
    ]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return callers * per_caller / (time.perf_counter() - start)


def raw_pykka(callers: int, per_caller: int) -> float:
    """Lifecycles per second of start + ask + stop on raw pykka actors."""

    def body() -> None:
        ref = _Echo.start()
        ref.ask("ping")
        ref.stop()

    return _work(callers, per_caller, body)


def _answer(turn: Turn) -> str:
    return "done"


@contextlib.contextmanager
def _tracing(mode: str) -> Iterator[Any]:
    """The tracer provider of a tracing ``mode`` (``off``, ``api``, ``sdk``), for one open.

    ``off`` sets ``OTEL_SDK_DISABLED`` while the runtime opens; ``api`` gives
    none (the global provider: no SDK configured); ``sdk`` records every span
    to an in-memory exporter.
    """
    if mode == "sdk":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        yield provider
        provider.shutdown()
        return
    before = os.environ.get("OTEL_SDK_DISABLED")
    if mode == "off":
        os.environ["OTEL_SDK_DISABLED"] = "true"
    try:
        yield None
    finally:
        if before is None:
            os.environ.pop("OTEL_SDK_DISABLED", None)
        else:
            os.environ["OTEL_SDK_DISABLED"] = before


def retinue_lifecycles(
    folder: Path,
    callers: int,
    per_caller: int,
    durability: str,
    tracing: str = "api",
    metrics: bool = False,
) -> float:
    """Lifecycles per second of spawn + wait + close on retinue agents (``metrics``: with a
    Prometheus collector attached, timing every commit and command)."""
    limits = Limits(max_agents=callers * 4, max_active_turns=callers)
    with (
        _tracing(tracing) as provider,
        Runtime.open(
            folder,
            profiles=[Profile("w", runner=_answer)],
            limits=limits,
            durability=durability,
            tracer_provider=provider,
        ) as rt,
    ):

        def body() -> None:
            info = rt.spawn("w", "go")
            rt.wait(info.id, timeout=60)
            rt.close(info.id)

        if not metrics:
            return _work(callers, per_caller, body)
        from retinue.metrics import RetinueCollector

        collector = RetinueCollector(rt)
        try:
            return _work(callers, per_caller, body)
        finally:
            collector.close()


def run(callers: int = 32, per_caller: int = 20, rounds: int = 3) -> dict[str, Any]:
    """Measure raw pykka, AutoGen (if installed) and retinue in both durability modes.

    The four are measured in turn, ``rounds`` times over, so that a slow
    stretch of the machine hits every contender alike. Each rate is the
    median over the rounds; each ratio is the median of the ratios taken
    within one round, with their range beside it.
    """
    raws: list[float] = []
    peers: list[float] = []
    fulls: list[float] = []
    buffereds: list[float] = []
    traced: dict[str, list[float]] = {"off": [], "sdk": []} if _has_sdk() else {}
    metered: list[float] = []
    with_metrics = importlib.util.find_spec("prometheus_client") is not None
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(rounds):
            raws.append(raw_pykka(callers, per_caller))
            peer = bench_autogen.lifecycles(callers, per_caller)
            if peer is not None:
                peers.append(peer)
            folder = Path(tmp) / str(index)
            fulls.append(retinue_lifecycles(folder / "f", callers, per_caller, Durability.FULL))
            buffereds.append(
                retinue_lifecycles(folder / "b", callers, per_caller, Durability.BUFFERED)
            )
            if with_metrics:
                metered.append(
                    retinue_lifecycles(
                        folder / "m", callers, per_caller, Durability.BUFFERED, metrics=True
                    )
                )
            for mode, rates in traced.items():
                rates.append(
                    retinue_lifecycles(
                        folder / mode, callers, per_caller, Durability.BUFFERED, mode
                    )
                )
    row: dict[str, Any] = {
        "callers": callers,
        "lifecycles": callers * per_caller,
        "rounds": rounds,
        "raw_pykka_per_s": round(statistics.median(raws)),
        "autogen_per_s": round(statistics.median(peers))
        if peers
        else "not installed (pip install -e '.[bench]')",
        "retinue_full_per_s": round(statistics.median(fulls)),
        "retinue_buffered_per_s": round(statistics.median(buffereds)),
    }
    row |= ratios("full_vs_pykka", fulls, raws)
    row |= ratios("buffered_vs_pykka", buffereds, raws)
    if peers:
        row |= ratios("full_vs_autogen", fulls, peers)
        row |= ratios("buffered_vs_autogen", buffereds, peers)
    if traced:
        row |= _tracing_row(traced["off"], buffereds, traced["sdk"])
    if metered:
        row["buffered_metrics_per_s"] = round(statistics.median(metered))
        row |= ratios("metrics_vs_plain", metered, buffereds)
        extra = [1e6 / a - 1e6 / b for a, b in zip(metered, buffereds, strict=True)]
        row["metrics_us_per_lifecycle"] = round(statistics.median(extra), 1)
    return row


def _has_sdk() -> bool:
    return importlib.util.find_spec("opentelemetry.sdk") is not None


def _tracing_row(off: list[float], api: list[float], sdk: list[float]) -> dict[str, Any]:
    """Tracing's cost: buffered lifecycles with no spans, the API only, the SDK recording."""
    row: dict[str, Any] = {
        "buffered_tracing_off_per_s": round(statistics.median(off)),
        "buffered_tracing_sdk_per_s": round(statistics.median(sdk)),
    }
    row |= ratios("tracing_api_vs_off", api, off)
    row |= ratios("tracing_sdk_vs_off", sdk, off)
    for name, rates in (("api", api), ("sdk", sdk)):
        extra = [1e6 / a - 1e6 / b for a, b in zip(rates, off, strict=True)]
        row[f"tracing_{name}_us_per_lifecycle"] = round(statistics.median(extra), 1)
    return row


def ratios(name: str, ours: list[float], theirs: list[float]) -> dict[str, Any]:
    """``ratio_<name>``: the median of the per-round ratios; ``..._range``: their span."""
    each = sorted(a / b for a, b in zip(ours, theirs, strict=True))
    row: dict[str, Any] = {f"ratio_{name}": round(statistics.median(each), 2)}
    if len(each) > 1:
        row[f"ratio_{name}_range"] = f"{each[0]:.2f}-{each[-1]:.2f}"
    return row


def _part(options: Options) -> Result:
    row = run(32, 10 if options.quick else 100, rounds=1 if options.quick else 3)
    title = "lifecycles/s (spawn + wait + close), 32 callers, vs raw pykka and AutoGen"
    return Result.row(title, row)


PART = Part("lifecycle", _part)
