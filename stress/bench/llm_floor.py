"""The floor of a supervised, durable model turn: raw calls wrapped in the fewest hops.

Is issue 28's target (a one-call turn at >= 0.95x the wall throughput of a raw
``litellm.acompletion`` at scale) reachable with retinue's architecture on this
machine, whatever retinue's own code costs? The architecture sends every
turn's commands to ONE actor thread (pykka) and answers them only once they
are committed (fsynced, in ``full``) to LMDB. This part measures that floor
with the same real parts and none of retinue's logic:

- ``raw``: the llm bench's raw side (:func:`stress.bench.llm.raw_calls`'s loop:
  ten untimed warm-up calls, then ``turns`` calls at once, ``bound`` in flight),
  with the request a one-call turn sends (:func:`stress.bench.llm.same_request`:
  its tools, its prices), on the offline model and on the HTTP stub of
  :class:`~stress.bench.stub_server.ChildStub` (a child process);
- ``floor``: the same calls, each wrapped in the least a supervised, durable
  turn must do: before the call (outside the bound, as a spawn is), one
  command to a plain ``pykka.ThreadingActor`` (``tell``) that encodes a
  record of about 200 bytes (msgspec) into a real LMDB env opened as
  retinue's ``full`` durability opens it (``sync`` and ``metasync``); group
  commit: the actor keeps each command it serves until its inbox is empty,
  writes them all in one transaction and answers each after the commit, on
  the caller's loop (``loop.call_soon_threadsafe`` setting an asyncio
  future); after the call, a second command carrying the answer's text,
  committed and answered the same way. The caller awaits both. No tree, no
  journal, no events;
- ``floor_nosync``: the same with ``sync=False`` (the hops without the fsync);
- ``floor_batched``: ``floor`` with each group's answers sent to the caller's
  loop in one ``call_soon_threadsafe`` (one wake-up a group, not a command:
  retinue wakes its loop about 1.2 times a turn, the floor 3 times a call);
- ``retinue``: the llm bench's own turns (:func:`stress.bench.llm.retinue_turns`,
  spawn then wait, durability ``full``) in the same rounds, for the paired ratio.

The sides alternate ``reps`` times; each rate is the median round's, each ratio
the median of the rounds' own (with their range). Separate passes of each
side on both models (retinue's: offline only; ``reps`` rounds, the median of each figure),
instrumented as :mod:`stress.bench.llm_costs` samples (its
:class:`~stress.bench.llm_costs.Sample`), give CPU milliseconds per call by
thread (``host``: the caller's loop; ``litellm``: its executor threads;
``actor``: the floor's actor; retinue's: loop, supervisor, writer, host),
voluntary switches, loop wake-ups (``call_soon_threadsafe``) and commits per
call; the figures' machine is in the row.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pykka

from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner
from retinue.llm.model import load_litellm
from stress.bench import llm_costs
from stress.bench.llm import WARM_UP, raw_calls, retinue_turns, same_request
from stress.bench.stub_server import ChildStub
from stress.parts import Options, Part, Result

__all__ = ["PART", "FloorActor", "floor_calls", "run"]

SIDES = ("raw", "floor", "floor_nosync", "floor_batched", "retinue")
FLOORS = {"floor": (True, False), "floor_nosync": (False, False), "floor_batched": (True, True)}
"""Each floor side's settings: (``sync``, ``batched``)."""
MAP_SIZE = 1 << 30
PAD = "x" * 96
"""Fills a record to about 200 bytes encoded (a turn's state record is of that order)."""


class _Record(msgspec.Struct, array_like=True):
    """What one command writes: a turn's small durable record."""

    agent: str
    kind: str
    at: float
    text: str
    pad: str


_encode = msgspec.msgpack.Encoder().encode


class _Command:
    """One command: the record to write and where to answer (a future of the caller's loop)."""

    __slots__ = ("agent", "future", "kind", "loop", "text")

    def __init__(
        self,
        agent: str,
        kind: str,
        text: str,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[None],
    ) -> None:
        self.agent = agent
        self.kind = kind
        self.text = text
        self.loop = loop
        self.future = future


def _answer(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _answer_all(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


class _Stats:
    """What a :class:`FloorActor` did: its commits; its thread's native id."""

    __slots__ = ("commits", "native_id")

    def __init__(self) -> None:
        self.commits = 0
        self.native_id = 0


class FloorActor(pykka.ThreadingActor):
    """A plain pykka actor that commits the commands it serves to LMDB, in groups.

    Each command it receives is kept until its inbox is empty; then all those
    kept are written in one transaction, committed (fsynced when the env was
    opened with ``sync``), and each is answered on its caller's loop: one
    ``call_soon_threadsafe`` each, or (``batched``) one for all of a group's
    commands of each loop.
    """

    use_daemon_thread = True

    def __init__(self, env: lmdb.Environment, stats: _Stats, batched: bool = False) -> None:
        """Serve commands into ``env``; count into ``stats``; ``batched``: answer groups at once."""
        super().__init__()
        self.batched = batched
        self.env = env
        self.stats = stats
        self.pending: list[_Command] = []

    def on_start(self) -> None:
        """Note the actor thread's id (its CPU is read from ``/proc``)."""
        self.stats.native_id = threading.get_native_id()

    def on_receive(self, message: Any) -> Any:
        """Keep a command; commit the group once no other message waits behind it."""
        self.pending.append(message)
        if self.actor_inbox.empty():
            self._commit()
        return None

    def on_stop(self) -> None:
        """Commit (and answer) what is kept."""
        self._commit()

    def _commit(self) -> None:
        group, self.pending = self.pending, []
        if not group:
            return
        now = time.time()
        with self.env.begin(write=True) as txn:
            for command in group:
                record = _Record(command.agent, command.kind, now, command.text, PAD)
                txn.put(f"{command.agent}:{command.kind}".encode(), _encode(record))
        self.stats.commits += 1
        if not self.batched:
            for command in group:
                command.loop.call_soon_threadsafe(_answer, command.future)
            return
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for command in group:
            by_loop.setdefault(command.loop, []).append(command.future)
        for loop, futures in by_loop.items():
            loop.call_soon_threadsafe(_answer_all, futures)


@contextlib.contextmanager
def _actor(
    folder: Path, sync: bool, batched: bool = False
) -> Iterator[tuple[pykka.ActorRef[Any], _Stats]]:
    """A started :class:`FloorActor` on a new LMDB env in ``folder``; stopped and closed after."""
    folder.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(folder), map_size=MAP_SIZE, sync=sync, metasync=sync, readahead=False)
    stats = _Stats()
    ref = FloorActor.start(env, stats, batched)
    try:
        yield ref, stats
    finally:
        ref.stop()
        env.close()


def _thread_ms(native_id: int) -> float:
    """CPU milliseconds the thread ``native_id`` has run so far (0 if it is gone)."""
    ran, _ = llm_costs._schedstat().get(native_id, (0, 0))
    return ran / 1e6


class _Window:
    """The timed window of a pass: wall, process CPU, the actor's commits and CPU.

    ``sample`` (a :class:`~stress.bench.llm_costs.Sample`, optional) is read
    over the same window.
    """

    def __init__(self, stats: _Stats | None, sample: llm_costs.Sample | None = None) -> None:
        self.stats = stats
        self.sample = sample
        self.seconds = self.cpu = self.actor_ms = 0.0
        self.commits = 0

    def start(self) -> None:
        if self.sample is not None:
            self.sample.start()
        if self.stats is not None:
            self.commits = -self.stats.commits
            self.actor_ms = -_thread_ms(self.stats.native_id)
        self.seconds, self.cpu = -time.perf_counter(), -time.process_time()

    def stop(self, turns: int) -> None:
        self.seconds += time.perf_counter()
        self.cpu += time.process_time()
        if self.stats is not None:
            self.commits += self.stats.commits
            self.actor_ms += _thread_ms(self.stats.native_id)
        if self.sample is not None:
            self.sample.stop(turns)


async def _calls(
    ref: pykka.ActorRef[Any] | None,
    turns: int,
    bound: int,
    keywords: dict[str, Any],
    window: _Window,
) -> None:
    """``turns`` calls at once, ``bound`` in flight, after ten untimed ones; ``window`` timed.

    ``ref``: the floor's actor each call's two commands go to (None: raw calls,
    as :func:`stress.bench.llm.raw_calls` makes them).
    """
    litellm = load_litellm()
    loop = asyncio.get_running_loop()
    semaphore = asyncio.Semaphore(bound)

    async def raw(i: int) -> None:
        async with semaphore:
            await litellm.acompletion(
                **keywords, messages=[{"role": "user", "content": f"task {i}"}]
            )

    async def command(agent: str, kind: str, text: str) -> None:
        assert ref is not None
        future: asyncio.Future[None] = loop.create_future()
        ref.tell(_Command(agent, kind, text, loop, future))
        await future

    async def floor(i: int) -> None:
        agent = str(uuid.uuid4())
        await command(agent, "start", f"task {i}")
        async with semaphore:
            response = await litellm.acompletion(
                **keywords, messages=[{"role": "user", "content": f"task {i}"}]
            )
        await command(agent, "answer", response.choices[0].message.content or "")

    one = raw if ref is None else floor
    await asyncio.gather(*(one(i) for i in range(WARM_UP)))
    window.start()
    await asyncio.gather(*(one(i) for i in range(turns)))
    window.stop(turns)


def floor_calls(
    folder: Path, turns: int, bound: int, sync: bool, *, batched: bool = False, **keywords: Any
) -> tuple[float, float, int]:
    """Wall and process CPU seconds of ``turns`` floor-wrapped calls; the commits they made.

    ``bound`` calls in flight; ``keywords``: every call's but its messages (the
    model among them); ``sync``: the env commits durably (fsync); ``batched``:
    a group's answers go to the loop in one ``call_soon_threadsafe``. Ten untimed
    wrapped calls warm up first, as :func:`stress.bench.llm.raw_calls`.
    """
    with _actor(folder, sync, batched) as (ref, stats):
        window = _Window(stats)
        asyncio.run(_calls(ref, turns, bound, keywords, window))
    return window.seconds, window.cpu, window.commits


def _costs_side(
    folder: Path, side: str, turns: int, bound: int, request: dict[str, Any]
) -> dict[str, float]:
    """One instrumented pass of ``side`` on the offline model: its figures per call.

    CPU milliseconds (``user``, ``sys``, and by thread group), voluntary
    switches, loop wake-ups, the collector's milliseconds, commits.
    """
    if side == "retinue":
        figures = llm_costs._retinue(folder, turns, bound)
        threads = figures["threads_ms"]
        groups: tuple[str, ...] = ("loop", "supervisor", "writer", "host", "litellm", "other")
    else:
        counts = llm_costs._Counts()
        sample = llm_costs.Sample(counts)
        with llm_costs._counting(counts):
            if side == "raw":
                window = _Window(None, sample)
                asyncio.run(_calls(None, turns, bound, request, window))
            else:
                with _actor(folder, *FLOORS[side]) as (ref, stats):
                    window = _Window(stats, sample)
                    asyncio.run(_calls(ref, turns, bound, request, window))
        figures = sample.figures
        threads = dict(figures["threads_ms"])
        threads["actor"] = window.actor_ms / turns
        threads["other"] = threads.get("other", 0.0) - threads["actor"]
        figures["commits"] = window.commits / turns
        groups = ("host", "litellm", "actor", "other")
    shown = {
        "user": figures["user_ms"],
        "sys": figures["sys_ms"],
        **{group: threads.get(group, 0.0) for group in groups},
        "voluntary": figures["voluntary"],
        "wakes": figures.get("loop_wakes", 0.0),
        "gc_ms": figures["gc_ms"],
        "commits": figures["commits"],
    }
    return shown


def _median_line(passes: list[dict[str, float]]) -> str:
    """The median of each figure of ``passes`` (one side's), as one line."""
    return ", ".join(f"{key} {statistics.median(p[key] for p in passes):.3f}" for key in passes[0])


def _machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def run(turns: int, bound: int = 64, reps: int = 1, costs_turns: int = 1000) -> dict[str, Any]:
    """Measure every side on both models, alternating ``reps`` times; return the row."""
    load_litellm()
    row: dict[str, Any] = {"turns": turns, "calls_in_flight_bound": bound, "reps": reps}
    row["machine_before"] = _machine()
    with ChildStub() as stub, tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        runners = {
            "http": LiteLLMRunner("openai/stub-model", api_base=stub.url, api_key="x"),
            "offline": LiteLLMRunner(SCRIPTED_MODEL),
        }
        requests = {m: same_request(tmp / f"request-{m}", r) for m, r in runners.items()}
        requests["http"]["max_retries"] = 0  # as the raw side's plain HTTP calls
        walls: dict[tuple[str, str], list[float]] = {}
        cpus: dict[tuple[str, str], list[float]] = {}
        commits: dict[tuple[str, str], list[int]] = {}
        completed: dict[str, int] = {}
        for rep in range(reps):
            for model in ("http", "offline"):
                request = requests[model]
                for side in SIDES:
                    folder = tmp / f"{model}-{side}-{rep}"
                    if side == "raw":
                        wall, cpu = raw_calls(turns=turns, bound=bound, **request)
                    elif side == "retinue":
                        wall, cpu, _, completed[model] = retinue_turns(
                            folder, runners[model], turns, bound
                        )
                    else:
                        sync, batched = FLOORS[side]
                        wall, cpu, made = floor_calls(
                            folder, turns, bound, sync, batched=batched, **request
                        )
                        commits.setdefault((model, side), []).append(made)
                    walls.setdefault((model, side), []).append(wall)
                    cpus.setdefault((model, side), []).append(cpu)
        for model in ("http", "offline"):
            raw = walls[(model, "raw")]
            row[f"{model}_raw_calls_per_s"] = round(turns / statistics.median(raw))
            for side in SIDES[1:]:
                ours = walls[(model, side)]
                ratios = sorted(r / o for r, o in zip(raw, ours, strict=True))
                row[f"{model}_{side}_per_s"] = round(turns / statistics.median(ours))
                row[f"{model}_{side}_vs_raw_median_range"] = (
                    round(statistics.median(ratios), 3),
                    f"{ratios[0]:.3f}-{ratios[-1]:.3f}",
                )
            row[f"{model}_cpu_ms_per_call_raw_floor_nosync_batched_retinue"] = tuple(
                round(statistics.median(cpus[(model, side)]) / turns * 1000, 3) for side in SIDES
            )
            row[f"{model}_commits_per_call_floor_nosync_batched"] = tuple(
                round(statistics.median(commits[(model, side)]) / turns, 3) for side in FLOORS
            )
            row[f"{model}_retinue_completed"] = completed[model]
        # retinue's instrumented pass is llm_costs' own, on the offline model only
        shapes = [
            (m, s) for m in ("offline", "http") for s in SIDES if (m, s) != ("http", "retinue")
        ]
        passes: dict[tuple[str, str], list[dict[str, float]]] = {shape: [] for shape in shapes}
        for rep in range(reps):
            for model, side in shapes:
                folder = tmp / f"costs-{model}-{side}-{rep}"
                passes[(model, side)].append(
                    _costs_side(folder, side, costs_turns, bound, requests[model])
                )
        for model, side in shapes:
            row[f"costs_{model}_{side}_per_call_ms_median"] = _median_line(passes[(model, side)])
    row["machine_after"] = _machine()
    return row


def _part(options: Options) -> Result:
    row = run(200, reps=3, costs_turns=300) if options.quick else run(1000, reps=3)
    title = "llm_floor: raw calls wrapped in the fewest hops a durable turn needs, vs raw"
    return Result.row(title, row)


PART = Part("llm_floor", _part, in_quick=False)
"""Runs with ``--only llm_floor`` and in a full run (not in CI's quick run)."""


if __name__ == "__main__":
    print(run(1000, reps=3))
