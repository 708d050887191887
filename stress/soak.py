"""Soak: a long-lived runtime under spawn/close churn and many short turns must level off.

A child process opens one runtime and runs caller threads that each loop:
spawn an agent, wait for its turn, send it a message and run follow-up
turns, close it (and now and then a small tree closed with ``close_tree``).
One event subscriber is blocked for the whole run and another counts every
event, so the event queue bound is exercised too. Every window the child
prints one JSON line: RSS, ``data.mdb`` size, agents held in memory, turns
and lifecycles in the window.

The parent judges the run: after a warm-up, the late windows' RSS and store
size must not exceed the early windows' by more than a slack (growth that
keeps going is a leak; growth that stops is a working set). Runs of five
minutes or more are also judged by RSS's trend after warm-up (least squares,
at most 8 MiB/h): the empty completion queue left per agent, a few dozen bytes
per lifecycle, trended at 31 MiB/h and passed the slack. Retention limits are
set low so the steady state is reached within a quick run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stress.parts import Options, Part, Result

if TYPE_CHECKING:  # the child imports retinue once LITELLM_LOCAL_MODEL_COST_MAP is set
    from retinue import Event, Limits, Profile, Runtime, Turn

CALLERS = 6
FOLLOW_UPS = 3
RSS_SLACK = (1.15, 12 * 1024 * 1024)  # late <= early * factor + bytes
STORE_SLACK = (1.25, 2 * 1024 * 1024)
# Runs this long are also judged by the trend of RSS after warm-up (least squares):
# a leak of a few bytes per lifecycle shows up there long before it passes the slack.
TREND_MIN_S = 300.0
RSS_TREND_MIB_PER_H = 8.0


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class _Counts:
    """What the churn did so far (turns, lifecycles, errors, events), counted from many threads."""

    def __init__(self) -> None:
        """Start at zero."""
        self._lock = threading.Lock()
        self._counts = {"turns": 0, "lifecycles": 0, "errors": 0, "events": 0}

    def add(self, key: str, n: int = 1) -> None:
        """Count ``n`` more of ``key``."""
        with self._lock:
            self._counts[key] += n

    def now(self) -> dict[str, int]:
        """Return a copy of the counts."""
        with self._lock:
            return dict(self._counts)


def child_main(store: str, seconds: float, window: float) -> None:
    """Run the churn for ``seconds``, printing one JSON sample per ``window``."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from retinue import Runtime

    counts = _Counts()
    stop = threading.Event()
    blocker = threading.Event()
    profiles, limits = _team()
    with Runtime.open(store, profiles=profiles, limits=limits, durability="buffered") as rt:

        def held(event: Event) -> None:  # a subscriber blocked for the whole run
            blocker.wait()

        rt.subscribe(held)
        rt.subscribe(lambda event: counts.add("events"))
        threads = [
            threading.Thread(target=_churn, args=(rt, i, stop, counts), daemon=True)
            for i in range(CALLERS)
        ]
        for thread in threads:
            thread.start()
        _sample(rt, Path(store) / "data.mdb", seconds, window, counts)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        blocker.set()
    print(json.dumps({"done": True, "turns": counts.now()["turns"]}), flush=True)


def _team() -> tuple[list[Profile], Limits]:
    """The churn's profiles (a worker, a lead of two workers) and its low retention limits."""
    from retinue import Limits, Profile

    def worker(turn: Turn) -> str:
        return f"{turn.task[:10]}:{len(turn.messages)}"

    def lead(turn: Turn) -> str:
        for i in range(2):  # received here, so nothing is left pending for the host
            turn.run("worker", f"sub {i}", timeout=30)
        return "lead"

    limits = Limits(
        retain_closed_agents=300,
        retain_read_messages=600,
        compact_interval_s=5.0,
        event_queue_capacity=2_000,
        max_agents=2_000,
        max_tree_agents=64,
    )
    profiles = [
        Profile("lead", subagents=["worker"], runner=lead),
        Profile("worker", runner=worker),
    ]
    return profiles, limits


def _churn(rt: Runtime, index: int, stop: threading.Event, counts: _Counts) -> None:
    """One caller: spawn, wait, message and follow up, close; now and then a small tree."""
    from retinue.errors import RetinueError

    n = 0
    while not stop.is_set():
        n += 1
        try:
            if n % 10 == 0:  # a small tree: lead + two children, closed as one
                info = rt.spawn("lead", f"tree {index} {n}")
                rt.wait(info.id, timeout=30)
                rt.close_tree(info.id)
                counts.add("turns", 3)
                counts.add("lifecycles", 3)
                continue
            info = rt.spawn("worker", f"task {index} {n}")
            rt.wait(info.id, timeout=30)
            for k in range(FOLLOW_UPS):
                rt.send(info.id, f"message {k}")
                rt.follow_up(info.id, f"again {k}")
                rt.wait(info.id, timeout=30)
            rt.close(info.id)
            counts.add("turns", 1 + FOLLOW_UPS)
            counts.add("lifecycles")
        except RetinueError as exc:
            counts.add("errors")
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:200]}), flush=True)


def _sample(rt: Runtime, data: Path, seconds: float, window: float, counts: _Counts) -> None:
    """Print one JSON sample per ``window`` for ``seconds``: RSS, store size, agents, rates."""
    started = time.monotonic()
    last = counts.now()
    next_at = started + window
    while next_at <= started + seconds:
        time.sleep(max(0.0, next_at - time.monotonic()))
        now = counts.now()
        sample = {
            "t": round(time.monotonic() - started, 1),
            "rss": _rss_bytes(),
            "store": data.stat().st_size,
            "agents": len(rt.agents(include_closed=True)),
            "turns_per_s": round((now["turns"] - last["turns"]) / window, 1),
            "lifecycles_per_s": round((now["lifecycles"] - last["lifecycles"]) / window, 1),
            "events": now["events"],
            "errors": now["errors"],
        }
        last = now
        print(json.dumps(sample), flush=True)
        next_at += window


def _slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(seconds, value)`` points, per hour."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return 0.0
    return 3600 * sum((t - mean_t) * (v - mean_v) for t, v in points) / spread


def _grew(early: list[int], late: list[int], slack: tuple[float, int]) -> bool:
    factor, extra = slack
    return max(late) > max(early) * factor + extra


def run(workdir: Path, seconds: float, window: float) -> dict[str, Any]:
    """Run the soak in a child for ``seconds``; return figures and ``problems``."""
    started = time.perf_counter()
    proc = _run_child(workdir / "store", seconds, window)
    samples: list[dict[str, Any]] = []
    errors: list[str] = []
    done = False
    for line in proc.stdout.splitlines():
        record = json.loads(line)
        if "error" in record:
            errors.append(record["error"])
        elif record.get("done"):
            done = True
        else:
            samples.append(record)
    problems: list[str] = []
    if proc.returncode != 0 or not done:
        problems.append(f"soak child exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    problems += [f"call failed: {e}" for e in errors[:5]]
    row: dict[str, Any] = {
        "seconds": round(time.perf_counter() - started, 1),
        "windows": len(samples),
    }
    if len(samples) >= 6:
        row |= _judge(samples, window, problems)
    else:
        problems.append(f"only {len(samples)} windows sampled")
    row["timeline"] = [
        {k: s[k] for k in ("t", "rss", "store", "agents", "turns_per_s")} for s in samples
    ]
    row["problems"] = problems
    return row


def _run_child(store: Path, seconds: float, window: float) -> subprocess.CompletedProcess[str]:
    """Run :func:`child_main` in a child process on ``store``; return it once it ended."""
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "stress.soak", "--child", str(store), str(seconds), str(window)],
        capture_output=True,
        text=True,
        cwd=repo,
        env=env,
        timeout=seconds + 180,
        check=False,
    )


def _judge(samples: list[dict[str, Any]], window: float, problems: list[str]) -> dict[str, Any]:
    """Judge the samples after warm-up (growth past the slack, RSS's trend); return figures."""
    warm = max(1, len(samples) // 5)
    body = samples[warm:]
    third = max(2, len(body) // 3)
    early, late = body[:third], body[-third:]
    rss_early, rss_late = [s["rss"] for s in early], [s["rss"] for s in late]
    store_early, store_late = [s["store"] for s in early], [s["store"] for s in late]
    if _grew(rss_early, rss_late, RSS_SLACK):
        problems.append(f"RSS keeps growing: {max(rss_early) >> 20} -> {max(rss_late) >> 20} MiB")
    if _grew(store_early, store_late, STORE_SLACK):
        problems.append(
            f"store keeps growing: {max(store_early) >> 20} -> {max(store_late) >> 20} MiB"
        )
    trend = _slope_per_hour([(s["t"], s["rss"] / 2**20) for s in body])
    if samples[-1]["t"] >= TREND_MIN_S and trend > RSS_TREND_MIB_PER_H:
        problems.append(
            f"RSS trends up {trend:.1f} MiB/h after warm-up "
            f"(more than {RSS_TREND_MIB_PER_H} MiB/h): a leak"
        )
    return {
        "turns": round(sum(s["turns_per_s"] for s in samples) * window),
        "turns_per_s_first": samples[0]["turns_per_s"],
        "turns_per_s_last": samples[-1]["turns_per_s"],
        "lifecycles_per_s_last": samples[-1]["lifecycles_per_s"],
        "rss_mib_early": round(max(rss_early) / 2**20, 1),
        "rss_mib_late": round(max(rss_late) / 2**20, 1),
        "rss_trend_mib_per_h": round(trend, 1),
        "store_mib_early": round(max(store_early) / 2**20, 2),
        "store_mib_late": round(max(store_late) / 2**20, 2),
        "agents_held_last": samples[-1]["agents"],
        "events_counted": samples[-1]["events"],
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child_main(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            result = run(Path(tmp), float(sys.argv[1]) if len(sys.argv) > 1 else 40, 2.0)
        print(json.dumps({k: v for k, v in result.items() if k != "timeline"}, indent=2))
        for point in result["timeline"]:
            print(point)


def _part(options: Options) -> Result:
    """Churn for a while; RSS and the store's size must level off."""
    seconds = options.soak_seconds or (36.0 if options.quick else 600.0)
    with tempfile.TemporaryDirectory() as tmp:
        row = run(Path(tmp), seconds, window=2.0 if seconds <= 120 else 10.0)
    problems = list(row["problems"])
    shown = {k: v for k, v in row.items() if k not in ("problems", "timeline")}
    title = "soak: spawn/close churn and short turns; RSS and store size must level off"
    result = Result.row(title, shown, problems)
    result.data = row
    return result


PART = Part("soak", _part, check=True)
