"""Lifecycle benchmark: fresh agents spawned, run and awaited per second.

Baselines, measured in the same run: raw pykka, one ``ThreadingActor``
started, asked once and stopped per request, with the same number of
concurrent host threads; and AutoGen core 0.7.5's in-memory
``SingleThreadedAgentRuntime`` with as many concurrent callers (when installed:
``pip install -e '.[bench]'``). retinue does more per lifecycle (an
LMDB-durable spawn, a turn start, a settle and a completion, each committed)
and the ratios say what that costs.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pykka

from retinue import Durability, Limits, Profile, Runtime, Turn
from stress import bench_autogen


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


def retinue_lifecycles(folder: Path, callers: int, per_caller: int, durability: str) -> float:
    """Lifecycles per second of spawn + wait + close on retinue agents."""
    limits = Limits(max_agents=callers * 4, max_active_turns=callers)
    with Runtime.open(
        folder, profiles=[Profile("w", runner=_answer)], limits=limits, durability=durability
    ) as rt:

        def body() -> None:
            info = rt.spawn("w", "go")
            rt.wait(info.id, timeout=60)
            rt.close(info.id)

        return _work(callers, per_caller, body)


def run(callers: int = 32, per_caller: int = 20) -> dict[str, Any]:
    """Measure raw pykka, AutoGen (if installed) and retinue in both durability modes."""
    raw = raw_pykka(callers, per_caller)
    peer = bench_autogen.lifecycles(callers, per_caller)
    with tempfile.TemporaryDirectory() as tmp:
        full = retinue_lifecycles(Path(tmp) / "f", callers, per_caller, Durability.FULL)
        buffered = retinue_lifecycles(Path(tmp) / "b", callers, per_caller, Durability.BUFFERED)
    row: dict[str, Any] = {
        "callers": callers,
        "lifecycles": callers * per_caller,
        "raw_pykka_per_s": round(raw),
        "autogen_per_s": "not installed (pip install -e '.[bench]')"
        if peer is None
        else round(peer),
        "retinue_full_per_s": round(full),
        "retinue_buffered_per_s": round(buffered),
        "ratio_full_vs_pykka": round(full / raw, 2),
        "ratio_buffered_vs_pykka": round(buffered / raw, 2),
    }
    if peer is not None:
        row["ratio_full_vs_autogen"] = round(full / peer, 2)
        row["ratio_buffered_vs_autogen"] = round(buffered / peer, 2)
    return row
