"""A writer process for the web view's tests: a model lead over a blocked worker and a hostile leaf.

``python writer.py STORE RELEASE [wide]`` opens STORE as its writer and spawns
``/root/review`` (the offline model ``retinue/scripted``), which delegates to
``worker`` (a Python runner that blocks until the file RELEASE exists) and
``hostile`` (whose output is HTML that must be shown as text). ``wide`` adds
``checker``, which runs two leaves, ``one`` and ``two`` (``two`` fails): a tree
of six agents. It prints ``ready`` once the lead is spawned, waits for the
lead's completion, prints ``done`` and exits; it gives up after 120 s.
:class:`Writer` runs it from a test.
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

    def __init__(self, store: Path, release: Path, *, wide: bool = False) -> None:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        self.store = store
        self.release_file = release
        self.proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(store), str(release), *(["wide"] if wide else [])],
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

    def kill(self) -> None:
        """SIGKILL the writer: it dies holding the store, its running agents as they were."""
        self.proc.kill()
        self.proc.communicate(timeout=60)

    def stop(self) -> None:
        """Release and end the writer, whatever state it is in."""
        self.release()
        if self.proc.returncode is not None:
            return
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


WIDE_PATHS = (
    "/root/review",
    "/root/review/worker",
    "/root/review/hostile",
    "/root/review/checker",
    "/root/review/checker/one",
    "/root/review/checker/two",
)
"""Every agent of the ``wide`` tree."""


def checker(turn: Turn) -> str:
    """Run the leaves ``one`` and ``two`` (which fails) and report both."""
    done = [turn.run("leaf", f"check {name}", name=name, timeout=60) for name in ("one", "two")]
    return "; ".join(f"{c.path}: {c.status}" for c in done)


def leaf(turn: Turn) -> str:
    """Answer, or fail when named ``two``."""
    if turn.agent.name == "two":
        raise ValueError("two fails on purpose")
    return "leaf checked"


def main() -> None:
    """Run the tree and exit once the lead has settled."""
    store, release = sys.argv[1], sys.argv[2]
    wide = sys.argv[3:] == ["wide"]
    os.environ["RELEASE_FILE"] = release
    kids = ["worker", "hostile", *(["checker"] if wide else [])]
    profiles = [
        Profile("lead", subagents=kids, model="retinue/scripted", tools="none"),
        Profile("worker", runner=worker),
        Profile("hostile", runner=hostile),
        Profile("checker", subagents=["leaf"], runner=checker),
        Profile("leaf", runner=leaf),
    ]
    with Runtime.open(store, profiles=profiles) as rt:
        lead = rt.spawn("lead", "review the change", name="review")
        print("ready", flush=True)
        rt.wait(lead.id, timeout=120)
        print("done", flush=True)


if __name__ == "__main__":
    main()
