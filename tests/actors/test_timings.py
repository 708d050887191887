"""The runtime's timers (actors/supervisor/_timings.py): each commit and command told to every sink.

Sinks here are plain recorders attached through the runtime (as
``retinue.metrics`` attaches its collector); a sink that raises is logged and
costs the runtime nothing.
"""

from __future__ import annotations

import threading
from pathlib import Path

from retinue import Profile, Runtime
from retinue.testing import echo


class Recorder:
    """A sink that keeps what it is told (from the writer's and the supervisor's threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.commits: list[float] = []
        self.commands: list[tuple[str, float]] = []

    def observe_commit(self, seconds: float) -> None:
        with self.lock:
            self.commits.append(seconds)

    def observe_command(self, kind: str, seconds: float) -> None:
        with self.lock:
            self.commands.append((kind, seconds))

    def kinds(self) -> list[str]:
        with self.lock:
            return [kind for kind, _ in self.commands]


class Broken:
    """A sink that fails every time it is told something."""

    def observe_commit(self, seconds: float) -> None:
        raise RuntimeError("broken commit sink")

    def observe_command(self, kind: str, seconds: float) -> None:
        raise RuntimeError("broken command sink")


def run_one(rt: Runtime, name: str) -> None:
    rt.wait(rt.spawn("worker", "t", name=name).id, timeout=30)


def test_every_sink_is_told_until_it_detaches(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "store", profiles=[Profile("worker", runner=echo)]) as rt:
        first, second = Recorder(), Recorder()
        detach_first = rt._attach_timings(first)
        detach_second = rt._attach_timings(second)
        assert detach_first is not None and detach_second is not None
        run_one(rt, "both")
        assert first.kinds().count("Spawn") == second.kinds().count("Spawn") == 1
        assert first.commits and second.commits
        assert all(seconds >= 0 for seconds in first.commits)
        assert all(seconds >= 0 for _, seconds in first.commands)
        detach_first()
        detach_first()  # idempotent
        seen = len(first.commands), len(first.commits)
        run_one(rt, "second_only")
        assert (len(first.commands), len(first.commits)) == seen
        assert second.kinds().count("Spawn") == 2
        detach_second()
        seen = len(second.commands), len(second.commits)
        run_one(rt, "nobody")
        assert (len(second.commands), len(second.commits)) == seen


def test_a_failing_sink_never_stops_the_writer_or_the_supervisor(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "store", profiles=[Profile("worker", runner=echo)]) as rt:
        rt._attach_timings(Broken())
        for n in range(3):
            run_one(rt, f"w{n}")
        assert [a.state for a in rt.agents()] == ["completed"] * 3
    with Runtime.open(tmp_path / "store", profiles=[Profile("worker", runner=echo)]) as rt:
        assert len(rt.agents()) == 3  # everything was committed


def test_a_read_only_runtime_has_nothing_to_time(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "store", profiles=[Profile("worker", runner=echo)]) as rt:
        run_one(rt, "w")
    reader = Runtime.open(tmp_path / "store", readonly=True)
    try:
        assert reader._attach_timings(Recorder()) is None
    finally:
        reader.shutdown()
