"""CPU instructions per one-call model turn, retinue against raw litellm, counted by callgrind.

Wall and CPU time swing on a shared machine; the instructions a piece of work
executes do not. The driver
(``python -m stress.bench.llm_instructions raw|retinue|retinue_run N``)
warms up (imports, litellm's first call, the runtime open, a few turns) and
then does ``N`` pieces of work one after another on the offline model
``retinue/scripted`` (no HTTP, no sockets):

- ``raw``: ``N`` ``litellm.acompletion`` calls with the messages and tools a
  retinue turn sends (captured from one retinue turn during the warm-up);
- ``retinue``: ``N`` one-call turns (``spawn_async`` then ``wait_async`` of an
  agent whose runner is ``LiteLLMRunner(SCRIPTED_MODEL)``, durability ``full``
  as in :mod:`stress.bench.llm`);
- ``retinue_run``: the same turns, each one ``rt.run_async`` (the spawn and
  the wait in one supervisor command).

:func:`measure` runs the driver under ``valgrind --tool=callgrind`` twice per
side, with ``N`` and ``2N``, and takes the difference of the totals divided by
``N``: the warm-up and the shutdown cancel out, so only the measured work is
counted, in every thread (``--separate-threads=no``, callgrind's default).
Every run has the same hash seed (``PYTHONHASHSEED=0``) and freezes the
warm-up's heap (:func:`settle_heap`): without them two runs of the same code
differed by ~13 million instructions in total and the per-call figure of the
raw side by millions between runs (8.5 to 13.7 million); with them, by 0.2
million in total.
The ratio raw/retinue is the issue's figure (target >= 0.95); raw/retinue_run is
the same figure for a host that runs its agents with ``run``.

Every side settles litellm's success logging (:func:`settle_logging`) as its
warm-up ends and again after its measured work, on the loop its model calls
ran on. litellm runs a call's success callback (``async_success_handler``:
cost, zero-cost diagnostic, logging payload; ~2.7 million instructions, on the
calling loop's thread) as a task after the call has returned. Unsettled, the
raw side's count had two modes at random: the last warm-up call's callback ran
inside the counted window or before it, and at the end ``asyncio.run``
cancelled a callback litellm's worker had taken but not started (lost) or left
it queued for the worker's ``atexit`` flush on a fresh event loop (counted).
The windows of ``N`` and ``2N`` calls did not always hold the same surplus of
callbacks, and one callback more or less is ~0.5 million per call at ``N`` = 5:
9 pairs of runs gave 13.15 to 13.73 million per raw call. retinue's sides had
no such modes (14.02 to 14.05 million per spawn-and-wait turn, 13.92 to 13.98
per ``run`` turn): a turn's callback ends on the runtime's loop before its
completion reaches the host, and the runtime flushes litellm's logging as it
shuts down. Settled, every window holds exactly its own calls' callbacks, as a
long-lived process runs each call's callback once: 9 pairs gave 13.17 to 13.19
million per raw call (the lower mode), and retinue's sides did not move
(14.01 to 14.05, 13.91 to 13.93). Which of the default executor's threads runs
a call (``run_in_executor``) still varies from run to run, with no effect on
the total.

Callgrind counts nothing until the warm-up is done (``--instr-atstart=no``):
the driver says ``measure`` on its output as it ends the warm-up
(:func:`start_measuring`) and waits, while :func:`instructions_of` turns the
instrumentation on (``callgrind_control --instr=on``) and lets it go on.
litellm's import alone is ~15.6 billion instructions under instrumentation
(the measured work of ``N`` = 5 turns, ~70 million): uninstrumented, it runs
several times faster, and the difference of the two runs is the same.
"""

from __future__ import annotations

import asyncio
import gc
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stress.bench.litellm_logging import model_call_loop, settle_logging
from stress.parts import Options, Part, Result

if TYPE_CHECKING:
    from retinue.llm import LiteLLMRunner

__all__ = [
    "PART",
    "SIDES",
    "VALGRIND",
    "WARM_UP",
    "callgrind_total",
    "captured_call",
    "drive",
    "instructions_of",
    "measure",
    "run",
    "start_measuring",
]

VALGRIND = "valgrind"
"""The valgrind executable looked up on ``PATH``."""

CALLGRIND_CONTROL = "callgrind_control"
"""valgrind's tool that turns a running process's instrumentation on (``--instr=on``)."""

TOGGLE_ENV = "RETINUE_INSTRUCTIONS_TOGGLE"
"""Set to ``1`` by :func:`instructions_of`: the driver waits at :func:`start_measuring`."""

MEASURE = "measure"
"""The line a toggled driver writes as its warm-up ends."""

WARM_UP = 5
"""Untimed turns (or raw calls) before the measured ones."""

_TOTAL = re.compile(r"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def callgrind_total(text: str) -> int:
    """Return the total instructions (``Ir``) of a callgrind output file's ``text``.

    Reads the ``summary:`` line (or, without one, ``totals:``); the first
    number is the first event, ``Ir`` by default.

    Raises:
        ValueError: the text has neither line.
    """
    found = {m.group(0).split(":")[0]: int(m.group(1)) for m in _TOTAL.finditer(text)}
    for key in ("summary", "totals"):
        if key in found:
            return found[key]
    raise ValueError("no 'summary:' or 'totals:' line: not a callgrind output file")


def captured_call(folder: Path, runner: LiteLLMRunner | None = None) -> dict[str, Any]:
    """Run one retinue turn; return the kwargs its first model call passed to litellm.

    ``runner``: the agent's ``LiteLLMRunner`` (default: one on the offline model).
    """
    from retinue import Durability, Profile, Runtime
    from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner
    from retinue.llm.model import load_litellm

    litellm = load_litellm()
    seen: list[dict[str, Any]] = []
    original = litellm.acompletion

    async def probe(**kwargs: Any) -> Any:
        seen.append(dict(kwargs))
        return await original(**kwargs)

    setattr(litellm, "acompletion", probe)  # noqa: B010 (a probe, put back below)
    try:
        agent = LiteLLMRunner(SCRIPTED_MODEL) if runner is None else runner
        profiles = [Profile("agent", runner=agent)]
        with Runtime.open(folder, profiles=profiles, durability=Durability.FULL) as rt:
            info = rt.spawn("agent", "task 0")
            rt.wait(info.id, timeout=600)
    finally:
        setattr(litellm, "acompletion", original)  # noqa: B010
    if not seen:
        raise RuntimeError("the probe turn made no model call")
    return seen[0]


def settle_heap() -> None:
    """Collect, then freeze what the imports and the warm-up left (``gc.freeze``).

    A full collection walks every tracked object, and litellm's imports leave
    hundreds of thousands: whether one lands among ``n`` or ``2n`` measured
    pieces of work is a discrete event worth tens of millions of instructions,
    which divided by ``n`` swung the per-call count by millions. Frozen, the
    warm-up's heap is no longer walked; the objects the measured work makes
    are collected as before, on both sides.
    """
    gc.collect()
    gc.freeze()


def start_measuring() -> None:
    """End the warm-up: settle the heap (:func:`settle_heap`); toggled, wait to be counted.

    Under :func:`instructions_of` (:data:`TOGGLE_ENV` is ``1``) the driver writes
    :data:`MEASURE` and waits for a line on its input, sent once callgrind
    counts. It polls, so the process keeps running code and callgrind sees
    the command (a thread blocked in a read would not run it).
    """
    settle_heap()
    if os.environ.get(TOGGLE_ENV) != "1":
        return
    print(MEASURE, flush=True)
    while not select.select([sys.stdin], [], [], 0.01)[0]:
        pass
    sys.stdin.readline()


def _drive_raw(folder: Path, n: int) -> int:
    """Warm up, then ``n`` raw calls with a retinue turn's kwargs; return the calls made."""
    from retinue.llm.model import load_litellm

    litellm = load_litellm()
    kwargs = captured_call(folder)

    async def main() -> int:
        for _ in range(WARM_UP):
            await litellm.acompletion(**kwargs)
        await settle_logging()
        start_measuring()
        for _ in range(n):
            await litellm.acompletion(**kwargs)
        await settle_logging()
        return n

    return asyncio.run(main())


def _drive_retinue(folder: Path, n: int, *, fused: bool = False) -> int:
    """Warm up, then ``n`` one-call turns one after another; return the turns completed.

    ``fused``: each turn is one ``run_async`` instead of ``spawn_async`` then ``wait_async``.
    """
    from retinue import Durability, Limits, Profile, Runtime
    from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner

    # No background compaction: its 60 s timer lands in the run of n or of 2n (valgrind runs
    # last minutes), and one Compact is worth tens of thousands of instructions per turn.
    limits = Limits(max_agents=n + WARM_UP + 10, wait_max_s=3600.0, compact_interval_s=86_400.0)
    profiles = [Profile("agent", runner=LiteLLMRunner(SCRIPTED_MODEL))]
    with Runtime.open(folder, profiles=profiles, limits=limits, durability=Durability.FULL) as rt:

        async def turn(i: int) -> bool:
            if fused:
                final = await rt.run_async("agent", f"task {i}", timeout=600)
            else:
                info = await rt.spawn_async("agent", f"task {i}")
                final = await rt.wait_async(info.id, timeout=600)
            return final.status == "completed"

        async def main() -> int:
            with model_call_loop() as loops:
                for i in range(WARM_UP):
                    await turn(i)
            await settle_logging(loops[-1])
            start_measuring()
            done = 0
            for i in range(WARM_UP, WARM_UP + n):
                done += await turn(i)
            await settle_logging(loops[-1])
            return done

        return asyncio.run(main())


def _drive_retinue_run(folder: Path, n: int) -> int:
    """As :func:`_drive_retinue`, each turn one ``run_async``."""
    return _drive_retinue(folder, n, fused=True)


_DRIVERS = {"raw": _drive_raw, "retinue": _drive_retinue, "retinue_run": _drive_retinue_run}
SIDES = tuple(_DRIVERS)
"""The driver's sides: raw calls, spawn-then-wait turns, ``run`` turns."""


def drive(side: str, n: int) -> int:
    """Warm up and do ``n`` raw calls or one-call turns (``side``); return how many completed.

    Raises:
        ValueError: ``side`` is not one of :data:`SIDES`, or ``n`` < 0.
    """
    driver = _DRIVERS.get(side)
    if driver is None or n < 0:
        raise ValueError(f"usage: raw|retinue|retinue_run N (N >= 0), got {side!r} {n}")
    with tempfile.TemporaryDirectory() as tmp:
        return driver(Path(tmp), n)


def _instructions(side: str, n: int, out: Path) -> int:
    """Total instructions of one driver process under callgrind (every thread)."""
    return instructions_of("stress.bench.llm_instructions", side, n, out, toggle=True)


def instructions_of(module: str, kind: str, n: int, out: Path, *, toggle: bool = False) -> int:
    """Total instructions of ``python -m module kind n`` under callgrind (every thread).

    ``toggle``: the driver calls :func:`start_measuring` as its warm-up ends,
    and only what it does from then on is counted (see the module docstring).

    Raises:
        RuntimeError: the process failed, or (``toggle``) ended its warm-up
            without saying so, or callgrind did not turn its counting on.
    """
    cmd = [
        VALGRIND,
        "--tool=callgrind",
        "--separate-threads=no",
        *(["--instr-atstart=no"] if toggle else []),
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        module,
        kind,
        str(n),
    ]
    # One hash seed for every run: with random ones, dict and set layouts differ between the
    # runs of n and 2n, and their totals by ~10 million instructions (measured).
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONHASHSEED="0")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    if not toggle:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"{kind} {n} under callgrind failed: {done.stderr[-2000:]}")
        return callgrind_total(out.read_text())
    env[TOGGLE_ENV] = "1"
    with tempfile.TemporaryFile("w+") as errors:
        with subprocess.Popen(
            cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True
        ) as process:
            assert process.stdin is not None and process.stdout is not None
            try:
                _count_from_warm_up_end(process)
                process.stdin.close()
                process.stdout.read()
                code = process.wait(timeout=3600)
            except BaseException:
                process.kill()
                raise
        errors.seek(0)
        if code != 0:
            raise RuntimeError(f"{kind} {n} under callgrind failed: {errors.read()[-2000:]}")
    return callgrind_total(out.read_text())


def _count_from_warm_up_end(process: subprocess.Popen[str]) -> None:
    """Wait for the driver's :data:`MEASURE` line; turn counting on; let the driver go on.

    Raises:
        RuntimeError: the driver's output ended first, or callgrind_control failed.
    """
    assert process.stdin is not None and process.stdout is not None
    for line in process.stdout:
        if line.strip() == MEASURE:
            break
    else:
        raise RuntimeError("the driver ended before its warm-up did (no 'measure' line)")
    switched = subprocess.run(
        [CALLGRIND_CONTROL, "--instr=on", str(process.pid)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if switched.returncode != 0:
        raise RuntimeError(f"callgrind_control --instr=on failed: {switched.stderr[-2000:]}")
    process.stdin.write("go\n")
    process.stdin.flush()


def measure(n: int) -> dict[str, Any]:
    """Instructions per raw call and per one-call turn: (runs of ``2n`` - runs of ``n``) / ``n``.

    Each side (:data:`SIDES`) is measured alike; ``retinue_run``'s turns have their own keys.

    Raises:
        RuntimeError: a driver process failed under callgrind.
    """
    per: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for side in SIDES:
            one = _instructions(side, n, Path(tmp) / f"{side}-{n}.out")
            two = _instructions(side, 2 * n, Path(tmp) / f"{side}-{2 * n}.out")
            per[side] = (two - one) / n
    return {
        "instructions_turns": n,
        "instructions_per_raw_call": round(per["raw"]),
        "instructions_per_retinue_turn": round(per["retinue"]),
        "instructions_ratio_raw_vs_retinue": round(per["raw"] / per["retinue"], 3),
        "instructions_per_retinue_run_turn": round(per["retinue_run"]),
        "instructions_ratio_raw_vs_retinue_run": round(per["raw"] / per["retinue_run"], 3),
    }


def run(n: int) -> dict[str, Any]:
    """The row: :func:`measure`'s, or a skip with its reason when valgrind is missing."""
    if shutil.which(VALGRIND) is None:
        return {"instructions": "skipped: valgrind is not installed (apt-get install valgrind)"}
    return measure(n)


def _part(options: Options) -> Result:
    row = run(5 if options.quick else 20)
    title = "llm_instructions: instructions per one-call turn vs raw litellm (callgrind, offline)"
    return Result.row(title, row)


PART = Part("llm_instructions", _part, in_quick=False, in_full=False)
"""Runs alone (``--only llm_instructions``); the full ``llm`` part includes its row."""


if __name__ == "__main__":
    if len(sys.argv) != 3 or not sys.argv[2].isdigit():
        sys.exit("usage: python -m stress.bench.llm_instructions raw|retinue|retinue_run N")
    print(drive(sys.argv[1], int(sys.argv[2])))
