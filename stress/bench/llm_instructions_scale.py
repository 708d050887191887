"""Instructions per one-call turn at scale: ``n`` turns with 64 in flight, under callgrind.

:mod:`stress.bench.llm_instructions` counts turns made one after another; the
llm bench's wall and CPU pairs run 64 at once. This part counts the second
shape the first way, so the two lenses can be compared: whether a raw call
or a turn costs other instructions when many are in flight (batched commits,
the writer's groups, litellm's logging worker on a busy loop). The raw side
sends the request a turn sends (:func:`~stress.bench.llm_instructions.captured_call`),
the retinue side is ``spawn_async`` then ``wait_async`` (gathered), both after the
same warm-up and with litellm's logging settled around the measured window;
the count is (run of ``2n`` - run of ``n``) / ``n``, every thread included.

Run alone: ``python -m stress --only llm_instructions_scale`` (callgrind makes it slow:
about 5 minutes for ``n`` = 100 on two cores).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from stress.bench.litellm_logging import model_call_loop, settle_logging
from stress.bench.llm_instructions import (
    VALGRIND,
    WARM_UP,
    captured_call,
    instructions_of,
    start_measuring,
)
from stress.parts import Options, Part, Result

__all__ = ["BOUND", "PART", "drive", "measure"]

BOUND = 64
"""Calls or turns in flight at once (the llm bench's bound)."""


def _raw(n: int) -> int:
    """Warm up, then ``n`` raw calls with a turn's request, ``BOUND`` at a time."""
    from retinue.llm.model import load_litellm

    litellm = load_litellm()
    request = captured_call(Path(tempfile.mkdtemp()) / "request")
    request.pop("messages", None)

    async def main() -> int:
        semaphore = asyncio.Semaphore(BOUND)

        async def one(i: int) -> None:
            async with semaphore:
                await litellm.acompletion(
                    **request, messages=[{"role": "user", "content": f"task {i}"}]
                )

        await asyncio.gather(*(one(i) for i in range(WARM_UP)))
        await settle_logging()
        start_measuring()
        await asyncio.gather(*(one(i) for i in range(n)))
        await settle_logging()
        return n

    return asyncio.run(main())


def _retinue(n: int) -> int:
    """Warm up, then ``n`` one-call turns spawned at once and awaited; return those completed."""
    from retinue import Durability, Limits, Profile, Runtime
    from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner

    limits = Limits(
        max_agents=n + WARM_UP + 10,
        max_active_turns=n + WARM_UP,
        max_concurrent_calls=BOUND,
        wait_max_s=3600.0,
        compact_interval_s=86_400.0,  # no compaction timer inside one run and not the other
    )
    profiles = [Profile("agent", runner=LiteLLMRunner(SCRIPTED_MODEL))]
    folder = Path(tempfile.mkdtemp())
    with Runtime.open(folder, profiles=profiles, limits=limits, durability=Durability.FULL) as rt:

        async def main() -> int:
            with model_call_loop() as loops:
                warm = await asyncio.gather(*(rt.spawn_async("agent", "w") for _ in range(WARM_UP)))
                await asyncio.gather(*(rt.wait_async(i.id, timeout=600) for i in warm))
            await settle_logging(loops[-1])
            start_measuring()
            infos = await asyncio.gather(*(rt.spawn_async("agent", f"t {i}") for i in range(n)))
            done = await asyncio.gather(*(rt.wait_async(i.id, timeout=600) for i in infos))
            await settle_logging(loops[-1])
            return sum(final.status == "completed" for final in done)

        return asyncio.run(main())


_DRIVERS = {"raw": _raw, "retinue": _retinue}


def drive(side: str, n: int) -> int:
    """Warm up and do ``n`` raw calls or one-call turns at scale (``side``); return those done.

    Raises:
        ValueError: ``side`` is not ``raw`` or ``retinue``, or ``n`` < 0.
    """
    if side not in _DRIVERS or n < 0:
        raise ValueError(f"unknown side {side!r} or negative n {n}")
    return _DRIVERS[side](n)


def measure(n: int) -> dict[str, Any]:
    """Instructions per raw call and per turn at scale: (runs of ``2n`` - runs of ``n``) / ``n``.

    Raises:
        RuntimeError: a driver process failed under callgrind.
    """
    per: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for side in _DRIVERS:
            counts = [
                instructions_of(__name__, side, k, Path(tmp) / f"{side}-{k}.out", toggle=True)
                for k in (n, 2 * n)
            ]
            per[side] = (counts[1] - counts[0]) / n
    return {
        "scale_instructions_turns_in_flight": (n, BOUND),
        "scale_instructions_per_raw_call_same_request": round(per["raw"]),
        "scale_instructions_per_retinue_turn": round(per["retinue"]),
        "scale_instructions_ratio_raw_vs_retinue": round(per["raw"] / per["retinue"], 3),
    }


def _part(options: Options) -> Result:
    if shutil.which(VALGRIND) is None:
        row: dict[str, Any] = {"instructions": "skipped: valgrind is not installed"}
    else:
        row = measure(50 if options.quick else 100)
    title = "llm_instructions_scale: instructions per one-call turn, 64 in flight (callgrind)"
    return Result.row(title, row)


PART = Part("llm_instructions_scale", _part, in_quick=False, in_full=False)
"""Runs alone (``--only llm_instructions_scale``)."""


if __name__ == "__main__":
    if len(sys.argv) != 3 or not sys.argv[2].isdigit():
        sys.exit("usage: python -m stress.bench.llm_instructions_scale raw|retinue N")
    sys.stdout.write(f"{drive(sys.argv[1], int(sys.argv[2]))}\n")
