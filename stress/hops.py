"""How many of retinue's files and folders one call crosses: ``python -m stress.hops``.

A profiler hook on every thread (set before the runtime starts its threads)
records the source file of each Python function called while a window is
open; a window covers one operation, after a warm-up of the same operation:

- ``host spawn``: ``rt.spawn`` of a Python agent until it returns (every
  thread: the caller, the engine, the supervisor, the store's writer);
- ``routed completion``: from the release of a gated runner until the host's
  ``wait`` already blocked on it returns (settle, routing, the host wait);
- ``spawn_subagent(wait=true)``: the model's round: one scripted model turn
  whose first step spawns a scripted child and waits for it, from the host's
  ``spawn`` of the lead until its ``wait`` on the lead returns (the lead's two
  model steps, the child's turn, their commits), on retinue's own threads:
  the host's thread is not recorded, since its ``spawn`` is the ``host spawn``
  row and its ``wait`` the end of a routed completion, not the model's round;
- ``host spawn + spawn_subagent(wait=true) + host wait``: the same window on
  every thread, the host's too.

Counted: the files under ``retinue/`` and their folders (``actors/supervisor``,
``protocol``, ...). Only the public API is used, so the same script measures
any commit (``--checkout PATH`` runs it against another checkout's package).
The Python runners are the script's own (:func:`echo`, :class:`Gated`), not
``retinue.testing``'s: a harness's runner is not retinue's path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["Gated", "echo", "main", "measure"]

_POLL_S = 0.05
"""How often a gated turn looks at its cancellation while it waits."""


def echo(turn: Any) -> str:
    """A runner that settles at once with ``done:<task>``."""
    return f"done:{turn.task}"


class Gated:
    """A sync runner whose turns block until their task is released (or they are cancelled)."""

    def __init__(self) -> None:
        """No turn started, no task released."""
        self._cond = threading.Condition()
        self.started = 0
        self._open: set[str] = set()
        self._all = False

    def __call__(self, turn: Any) -> str:
        """Count the turn, wait until its task is released, return ``released:<task>``."""
        with self._cond:
            self.started += 1
            self._cond.notify_all()
            while not (self._all or turn.task in self._open or turn.cancelled.is_set()):
                self._cond.wait(_POLL_S)
        return f"released:{turn.task}"

    def release(self, task: str | None = None) -> None:
        """Let every turn (``task`` None) or the turns of ``task`` return."""
        with self._cond:
            if task is None:
                self._all = True
            else:
                self._open.add(task)
            self._cond.notify_all()

    def wait_started(self, count: int, timeout: float = 30.0) -> None:
        """Block until ``count`` turns started (a hang guard: ``timeout`` seconds).

        Raises:
            TimeoutError: fewer turns started in time.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: self.started >= count, timeout):
                raise TimeoutError(f"{count} gated turns did not start in {timeout} s")


class Recorder:
    """Collect the source files of functions called on any thread while open."""

    def __init__(self, package: Path) -> None:
        """Record files under ``package`` (the ``retinue`` folder)."""
        self.prefix = str(package) + os.sep
        self.files: set[str] = set()
        self.on = False
        self.skip: int | None = None  # a thread whose calls are not recorded

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        """The profiler hook: note the file of each Python call while a window is open."""
        if self.on and event == "call" and threading.get_ident() != self.skip:
            name = frame.f_code.co_filename
            if name.startswith(self.prefix):
                self.files.add(name[len(self.prefix) :])

    def install(self) -> None:
        """Hook this thread and every thread started from now on."""
        threading.setprofile(self.hook)
        sys.setprofile(self.hook)

    @contextmanager
    def window(self, *, host: bool = True) -> Iterator[set[str]]:
        """Record the files called inside the ``with`` block into the yielded set
        (``host`` False: not those called on this thread)."""
        self.files = set()
        self.skip = None if host else threading.get_ident()
        self.on = True
        found: set[str] = set()
        try:
            yield found
        finally:
            self.on = False
            self.skip = None
            found |= self.files


def _folders(files: set[str]) -> set[str]:
    return {str(Path(f).parent) if Path(f).parent != Path(".") else "." for f in files}


def _row(files: set[str]) -> dict[str, Any]:
    folders = _folders(files)
    return {
        "files": len(files),
        "folders": len(folders),
        "folder_names": sorted(folders),
        "file_names": sorted(files),
    }


def _team(folder: Path) -> Path:
    team = folder / "team.toml"
    team.write_text(
        'name = "hops"\n\n[defaults]\nmodel = "retinue/scripted"\n\n'
        '[agents.lead]\nsubagents = ["leaf"]\n\n[agents.leaf]\n'
    )
    return team


def measure(rounds: int = 3) -> dict[str, Any]:
    """Measure the three windows in this process; return their rows."""
    import retinue
    from retinue import Profile, Runtime
    from retinue.team import load_team

    recorder = Recorder(Path(retinue.__file__).resolve().parent)
    recorder.install()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="retinue-hops-") as tmp:
        gate = Gated()
        profiles = [Profile("echo", runner=echo), Profile("gated", runner=gate)]
        rt = Runtime.open(Path(tmp) / "py", profiles=profiles)
        try:
            out["host spawn"] = _repeat(rounds, recorder, lambda: rt.spawn("echo", "x"))
            out["routed completion"] = _routed(rounds, recorder, rt, gate)
        finally:
            gate.release()
            rt.shutdown()
        team = load_team(_team(Path(tmp)))
        rt = Runtime.open(Path(tmp) / "llm", profiles=team.profiles())
        try:
            out["spawn_subagent(wait=true)"] = _subagent(rounds, recorder, rt, host=False)
            out["host spawn + spawn_subagent(wait=true) + host wait"] = _subagent(
                rounds, recorder, rt, host=True
            )
        finally:
            rt.shutdown()
    threading.setprofile(None)
    sys.setprofile(None)
    return out


def _repeat(
    rounds: int, recorder: Recorder, call: Callable[[], object], *, host: bool = True
) -> dict[str, Any]:
    call()  # warm-up: imports and first-time paths stay out of the window
    seen: set[str] = set()
    for _ in range(rounds):
        with recorder.window(host=host) as found:
            call()
        seen |= found
    return _row(seen)


def _routed(rounds: int, recorder: Recorder, rt: Any, gate: Any) -> dict[str, Any]:
    seen: set[str] = set()
    for n in range(rounds + 1):
        info = rt.spawn("gated", f"t{n}")
        gate.wait_started(n + 1)
        waiter = threading.Thread(target=rt.wait, args=(info.id,), kwargs={"timeout": 30})
        waiter.start()
        _until_waiting(rt)
        with recorder.window() as found:
            gate.release(f"t{n}")
            waiter.join(30)
        if n:  # the first round is the warm-up
            seen |= found
    return _row(seen)


def _until_waiting(rt: Any) -> None:
    """Give the host's wait time to reach the supervisor (a blocked wait shows no state;
    a tracer, not a test: a late wait only moves its files out of the window)."""
    time.sleep(0.2)


def _subagent(rounds: int, recorder: Recorder, rt: Any, *, host: bool) -> dict[str, Any]:
    def one() -> object:
        lead = rt.spawn(
            "lead",
            'Call spawn_subagent with {"profile": "leaf", "task": "hi", "wait": true}, '
            "then answer done.",
        )
        return rt.wait(lead.id, timeout=60)

    return _repeat(rounds, recorder, one, host=host)


def main(argv: list[str] | None = None) -> int:
    """Print the rows (and write JSON with ``--json``); ``--checkout`` measures another tree."""
    parser = argparse.ArgumentParser(prog="python -m stress.hops", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkout", type=Path, help="measure the package of this checkout")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--files", action="store_true", help="list the files of each window")
    args = parser.parse_args(argv)
    if args.checkout is not None:
        env = {**os.environ, "PYTHONPATH": str(args.checkout.resolve())}
        here = Path(__file__).resolve()
        code = (
            f"import sys, json; sys.path.insert(0, {str(here.parent)!r}); "
            f"import hops; print(json.dumps(hops.measure({args.rounds})))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=args.checkout,  # its package first on the path, before an editable install's
            capture_output=True,
            text=True,
            check=True,
        )
        rows = json.loads(done.stdout.strip().splitlines()[-1])
    else:
        rows = measure(args.rounds)
    for name, row in rows.items():
        print(f"{name}: {row['files']} files in {row['folders']} folders")
        print("   ", ", ".join(row["folder_names"]))
        if args.files:
            print("   ", ", ".join(row["file_names"]))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
