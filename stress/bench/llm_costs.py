"""Where a one-call model turn's time goes, against a raw litellm call: the llm bench's diagnostic.

Wall and CPU ratios say how far retinue is from a raw ``litellm.acompletion``
call; these figures say why. One raw pass and one retinue pass on the offline
model (``retinue/scripted``: no HTTP, so nothing but the two sides' own work),
the same shape as :func:`stress.bench.llm.retinue_turns` (``turns`` in flight at
once, ``bound`` calls at a time, durability ``full``), each measured over its
timed window, per turn:

- ``user`` and ``sys`` CPU milliseconds and voluntary / involuntary context
  switches of the whole process (``resource.getrusage``): kernel work (fsync,
  futex wakes, self-pipe writes, epoll) shows as ``sys`` CPU and switches;
- CPU milliseconds by thread (``/proc/self/task/<tid>/schedstat``, in ns): the
  turns' event loop (the raw side's main thread), the supervisor, the store's
  writer, the host's own thread (the caller's loop; raw: none), litellm's
  worker threads, the rest; and the time threads were ready but waited for a
  CPU (the run queue: other processes on a shared machine, or our own threads);
- the garbage collector's collections and milliseconds (``gc.callbacks``);
- the cross-thread hand-offs: commands submitted to the supervisor, groups
  handed to the store's writer, loop wake-ups (``call_soon_threadsafe``: a
  self-pipe write each; retinue's own: a byte a ``Wakeup`` sends), and the
  commits and fsyncs (in ``full`` LMDB calls ``fdatasync`` once per commit,
  for its pages, and writes its meta page with ``O_DSYNC``; an explicit flush
  is one more).

The raw side runs twice: a plain call (model and messages, as the llm
bench's raw side) and the request a retinue turn sends (captured from one
turn: its tools, the offline model's zero prices), which litellm's own threads
handle differently (the ``same_request`` rows).

The counters wrap the methods they count (class attributes, put back after),
so the instrumented passes are separate from the timed ones and their wall
time is not reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from retinue import Durability, Limits, Profile, Runtime
from retinue.actors.calls._channel import Channel
from retinue.actors.calls._wakeup import Wakeup
from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner
from retinue.llm.model import load_litellm
from retinue.persistence.writer import Writer
from stress.bench.llm_instructions import captured_call

__all__ = ["THREAD_GROUPS", "Sample", "costs", "thread_group"]

WARM_UP = 10

THREAD_GROUPS = (
    ("loop", ("retinue-loop",)),
    ("supervisor", ("SupervisorActor",)),
    ("writer", ("retinue-store-writer",)),
    ("litellm", ("asyncio_",)),
)
"""Thread name prefixes of the figures' groups; the main thread is ``host``, the rest ``other``."""


def thread_group(name: str, main: bool) -> str:
    """Return the group of a thread named ``name`` (``main``: it is the main thread)."""
    if main:
        return "host"
    for group, prefixes in THREAD_GROUPS:
        if name.startswith(prefixes):
            return group
    return "other"


def _schedstat() -> dict[int, tuple[int, int]]:
    """Each thread's (ns on a CPU, ns ready but waiting for one), by native id."""
    found: dict[int, tuple[int, int]] = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ran, waited, _ = f.read().split()
            found[int(tid)] = (int(ran), int(waited))
    return found


class _Counts:
    """Counters of one pass: method calls (wrapped) and the collector's work."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.gc_collections = 0
        self.gc_seconds = 0.0
        self._gc_began = 0.0

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter()
        else:
            self.gc_collections += 1
            self.gc_seconds += time.perf_counter() - self._gc_began


@contextlib.contextmanager
def _counting(counts: _Counts) -> Iterator[None]:
    """Count the hand-offs and the collector's work while the block runs."""
    wrapped: list[tuple[type, str, Callable[..., Any]]] = []

    def count(cls: type, name: str, key: str) -> None:
        original = cls.__dict__[name]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts.calls[key] = counts.calls.get(key, 0) + 1
            return original(*args, **kwargs)

        wrapped.append((cls, name, original))
        setattr(cls, name, wrapper)

    count(asyncio.BaseEventLoop, "call_soon_threadsafe", "loop_wakes")
    # retinue wakes a loop it watches a socket of with a Wakeup (a byte sent: no
    # call_soon_threadsafe); each made in the pass counts its wake-ups too.
    made = Wakeup.__init__

    def counted_wakeup(self: Wakeup, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        send = self.wake

        def wake() -> object:
            counts.calls["loop_wakes"] = counts.calls.get("loop_wakes", 0) + 1
            return send()

        self.wake = wake

    wrapped.append((Wakeup, "__init__", made))
    Wakeup.__init__ = counted_wakeup  # type: ignore[method-assign]
    count(Channel, "submit", "commands")
    count(Writer, "submit_group", "writer_groups")
    count(Writer, "submit_queued", "writer_groups")  # the supervisor's groups
    count(Writer, "submit", "writer_submits")
    gc.callbacks.append(counts.on_gc)
    try:
        yield
    finally:
        gc.callbacks.remove(counts.on_gc)
        for cls, name, original in wrapped:
            setattr(cls, name, original)


class Sample:
    """What the process did between :meth:`start` and :meth:`stop` (call both on one thread)."""

    def __init__(self, counts: _Counts) -> None:
        """Sample into ``counts``' pass."""
        self.counts = counts
        self.figures: dict[str, Any] = {}

    def start(self) -> None:
        """Take the first reading."""
        self._calls = dict(self.counts.calls)
        self._gc = (self.counts.gc_collections, self.counts.gc_seconds)
        self._usage = resource.getrusage(resource.RUSAGE_SELF)
        self._sched = _schedstat()

    def stop(self, turns: int) -> None:
        """Take the second reading; keep the figures per turn in :attr:`figures`."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        sched = _schedstat()
        main = threading.main_thread().native_id
        names = {t.native_id: t.name for t in threading.enumerate()}
        by_group: dict[str, float] = {}
        queued = 0
        for tid, (ran, waited) in sched.items():
            ran0, waited0 = self._sched.get(tid, (0, 0))
            group = thread_group(names.get(tid, ""), tid == main)
            by_group[group] = by_group.get(group, 0.0) + (ran - ran0) / 1e6 / turns
            queued += waited - waited0
        before = self._usage
        calls = {k: (v - self._calls.get(k, 0)) / turns for k, v in self.counts.calls.items()}
        collections, seconds = self._gc
        self.figures = {
            "user_ms": (usage.ru_utime - before.ru_utime) * 1000 / turns,
            "sys_ms": (usage.ru_stime - before.ru_stime) * 1000 / turns,
            "voluntary": (usage.ru_nvcsw - before.ru_nvcsw) / turns,
            "involuntary": (usage.ru_nivcsw - before.ru_nivcsw) / turns,
            "threads_ms": by_group,
            "run_queue_ms": queued / 1e6 / turns,
            "gc_collections": (self.counts.gc_collections - collections) / turns,
            "gc_ms": (self.counts.gc_seconds - seconds) * 1000 / turns,
            **calls,
        }


def _raw(turns: int, bound: int, request: dict[str, Any] | None = None) -> dict[str, Any]:
    """The figures of ``turns`` raw calls on the offline model, ``bound`` in flight.

    ``request``: the keywords of every call but its messages (default: the model only).
    """
    litellm = load_litellm()
    keywords = {"model": SCRIPTED_MODEL} if request is None else request
    counts = _Counts()
    sample = Sample(counts)

    async def main() -> None:
        semaphore = asyncio.Semaphore(bound)

        async def one(i: int) -> None:
            async with semaphore:
                await litellm.acompletion(
                    **keywords, messages=[{"role": "user", "content": f"task {i}"}]
                )

        await asyncio.gather(*(one(i) for i in range(WARM_UP)))
        sample.start()
        await asyncio.gather(*(one(i) for i in range(turns)))
        sample.stop(turns)

    with _counting(counts):
        asyncio.run(main())
    return sample.figures


def _retinue(folder: Path, turns: int, bound: int) -> dict[str, Any]:
    """The figures of ``turns`` one-call turns on the offline model, as :mod:`stress.bench.llm`."""
    limits = Limits(
        max_agents=turns * 2 + WARM_UP,
        max_active_turns=turns,
        max_concurrent_calls=bound,
        wait_max_s=3600.0,
    )
    profiles = [Profile("agent", runner=LiteLLMRunner(SCRIPTED_MODEL))]
    counts = _Counts()
    sample = Sample(counts)
    with (
        _counting(counts),
        Runtime.open(folder, profiles=profiles, limits=limits, durability=Durability.FULL) as rt,
    ):
        system = rt._system  # the bench's own look at the store's counters
        assert system is not None
        stats = system.store.stats

        async def main() -> tuple[int, int]:
            warm = await asyncio.gather(*(rt.spawn_async("agent", "warm") for _ in range(WARM_UP)))
            await asyncio.gather(*(rt.wait_async(i.id, timeout=600) for i in warm))
            commits, syncs = stats.commits, stats.syncs
            sample.start()
            infos = await asyncio.gather(
                *(rt.spawn_async("agent", f"task {i}") for i in range(turns))
            )
            await asyncio.gather(*(rt.wait_async(i.id, timeout=600) for i in infos))
            sample.stop(turns)
            return stats.commits - commits, stats.syncs - syncs

        commits, syncs = asyncio.run(main())
    sample.figures["commits"] = commits / turns
    # full: one fdatasync per commit (strace: its pages; the meta page is an O_DSYNC write)
    sample.figures["fsyncs"] = (commits + syncs) / turns
    return sample.figures


def _pair(raw: float, ours: float, digits: int = 3) -> tuple[float, float]:
    return round(raw, digits), round(ours, digits)


def costs(folder: Path, turns: int, bound: int) -> dict[str, Any]:
    """Return the diagnostic rows: raw call against retinue turn, per turn (see the module)."""
    raw = _raw(turns, bound)
    ours = _retinue(folder, turns, bound)
    request = captured_call(folder.with_name(folder.name + "-request"))
    request.pop("messages", None)
    same = _raw(turns, bound, request)
    threads = ours["threads_ms"]
    split = ", ".join(
        f"{group} {threads.get(group, 0.0):.3f}"
        for group in ("loop", "supervisor", "writer", "host", "litellm", "other")
    )

    def raw_split(figures: dict[str, Any]) -> str:
        threads = figures["threads_ms"]
        return ", ".join(
            f"{group} {threads.get(group, 0.0):.3f}" for group in ("host", "litellm", "other")
        )

    return {
        "costs_turns": turns,
        "costs_user_cpu_ms_raw_call_retinue_turn": _pair(raw["user_ms"], ours["user_ms"]),
        "costs_user_cpu_ms_raw_same_request": round(same["user_ms"], 3),
        "costs_sys_cpu_ms_raw_call_retinue_turn": _pair(raw["sys_ms"], ours["sys_ms"]),
        "costs_cpu_ms_by_thread_raw": raw_split(raw),
        "costs_cpu_ms_by_thread_raw_same_request": raw_split(same),
        "costs_cpu_ms_by_thread_retinue": split,
        "costs_run_queue_wait_ms_raw_retinue": _pair(raw["run_queue_ms"], ours["run_queue_ms"]),
        "costs_switches_voluntary_raw_retinue": _pair(raw["voluntary"], ours["voluntary"], 2),
        "costs_switches_involuntary_raw_retinue": _pair(raw["involuntary"], ours["involuntary"], 2),
        "costs_gc_collections_raw_retinue": _pair(raw["gc_collections"], ours["gc_collections"]),
        "costs_gc_ms_raw_retinue": _pair(raw["gc_ms"], ours["gc_ms"]),
        "costs_loop_wakes_raw_retinue": _pair(raw.get("loop_wakes", 0), ours.get("loop_wakes", 0)),
        "costs_retinue_commands_writer_groups": (
            round(ours.get("commands", 0), 3),
            round(ours.get("writer_groups", 0) + ours.get("writer_submits", 0), 3),
        ),
        "costs_retinue_commits_fsyncs": _pair(ours["commits"], ours["fsyncs"]),
    }
