"""Group-commit benchmark: durable transitions per second with 32 concurrent callers.

Three rows, measured in one run on this machine:

- ``raw lmdb, commit per put``: the baseline, py-lmdb with one fsynced
  commit per transition (what a store without group commit can do at best);
- ``retinue, group commit off``: ``rt.send`` with one commit per transition;
- ``retinue, group commit on``: ``rt.send`` as shipped.

Every row is in ``full`` durability (fsync before the caller is answered).
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import lmdb

from retinue import Limits, Profile, Runtime, Turn
from stress.parts import Options, Part, Result


def _idle(turn: Turn) -> str:
    return "ok"


def _threads(n: int, target: Any) -> float:
    barrier = threading.Barrier(n + 1)

    def run(i: int) -> None:
        barrier.wait()
        target(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def raw_lmdb(folder: Path, callers: int, per_caller: int) -> float:
    """Transitions per second of one fsynced LMDB commit per put."""
    env = lmdb.open(str(folder), map_size=256 << 20, sync=True, metasync=True)

    def work(i: int) -> None:
        for j in range(per_caller):
            with env.begin(write=True) as txn:
                txn.put(f"{i}:{j}".encode(), b"x" * 200)

    elapsed = _threads(callers, work)
    env.close()
    return callers * per_caller / elapsed


def retinue_sends(folder: Path, callers: int, per_caller: int, group_commit: bool) -> float:
    """Transitions per second of ``rt.send`` from ``callers`` threads."""
    limits = Limits(mailbox_capacity=per_caller + 1, max_agents=callers + 1)
    with Runtime.open(
        folder,
        profiles=[Profile("sink", runner=_idle)],
        limits=limits,
        group_commit=group_commit,
    ) as rt:
        agents = [rt.spawn("sink", "idle") for _ in range(callers)]
        for a in agents:
            rt.wait(a.id, timeout=30)

        def work(i: int) -> None:
            for j in range(per_caller):
                rt.send(agents[i].id, f"message {j}")

        elapsed = _threads(callers, work)
    return callers * per_caller / elapsed


def run(callers: int = 32, per_caller: int = 100) -> dict[str, Any]:
    """Measure the three rows; return them with the ratios."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        raw = raw_lmdb(base / "raw", callers, per_caller)
        off = retinue_sends(base / "off", callers, per_caller, group_commit=False)
        on = retinue_sends(base / "on", callers, per_caller, group_commit=True)
    return {
        "callers": callers,
        "transitions": callers * per_caller,
        "raw_lmdb_per_s": round(raw),
        "retinue_group_off_per_s": round(off),
        "retinue_group_on_per_s": round(on),
        "ratio_on_vs_raw": round(on / raw, 2),
        "ratio_on_vs_off": round(on / off, 2),
    }


def _part(options: Options) -> Result:
    row = run(32, 40 if options.quick else 300)
    return Result.row("group commit: durable transitions/s, 32 callers, full durability", row)


PART = Part("commit", _part)
