"""A writer process for the web view's tests: a model lead over a blocked worker and a hostile leaf.

``python writer.py STORE RELEASE`` opens STORE as its writer and spawns
``/root/review`` (the offline model ``retinue/scripted``), which delegates to
``worker`` (a Python runner that blocks until the file RELEASE exists) and
``hostile`` (whose output is HTML that must be shown as text). It prints
``ready`` once the lead is spawned, waits for the lead's completion, prints
``done`` and exits; it gives up after 120 s. :class:`Writer` runs it from a test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from retinue import Profile, Runtime, Turn

WRITER = Path(__file__)
ROOT = Path(__file__).resolve().parents[2]


class Writer:
    """The writer process of :mod:`writer` and the file that releases its worker."""

    def __init__(self, store: Path, release: Path) -> None:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        self.store = store
        self.release_file = release
        self.proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(store), str(release)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            raise AssertionError(f"writer did not start: {line!r} {self.proc.stderr.read()}")

    def release(self) -> None:
        """Let the worker (and so the lead) finish."""
        self.release_file.write_text("go")

    def finish(self, timeout: float = 60.0) -> str:
        """Wait for the writer to exit; return what it printed after ``ready``."""
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        return out

    def stop(self) -> None:
        """Release and end the writer, whatever state it is in."""
        self.release()
        try:
            self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()


HOSTILE = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'


def worker(turn: Turn) -> str:
    """Block until the release file exists (or the turn is interrupted)."""
    release = Path(os.environ["RELEASE_FILE"])
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        if turn.cancelled.wait(0.05):
            return "cancelled"
    return "worker finished"


def hostile(turn: Turn) -> str:
    """Answer with markup that a careless page would run."""
    return HOSTILE


def main() -> None:
    """Run the tree and exit once the lead has settled."""
    store, release = sys.argv[1], sys.argv[2]
    os.environ["RELEASE_FILE"] = release
    profiles = [
        Profile("lead", subagents=["worker", "hostile"], model="retinue/scripted", tools="none"),
        Profile("worker", runner=worker),
        Profile("hostile", runner=hostile),
    ]
    with Runtime.open(store, profiles=profiles) as rt:
        lead = rt.spawn("lead", "review the change", name="review")
        print("ready", flush=True)
        rt.wait(lead.id, timeout=120)
        print("done", flush=True)


if __name__ == "__main__":
    main()
