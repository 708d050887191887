"""A writer process for the control socket's tests: ``python writer.py STORE [no-control]``.

It opens STORE as its writer (with ``control=False`` when told ``no-control``)
with four profiles: ``echo`` (answers its task), ``herald`` (sends its task to
the host, then answers), ``blocker`` (runs until it is interrupted; ``holder`` too, and may
spawn ``blocker``) and
``reader`` (the offline model reading the workspace ``<STORE>-ws``, each
``read_file`` waiting for approval). It prints ``ready`` once open, then runs
until its stdin closes (or it is killed), and closes the runtime.
:class:`Writer` runs it from a test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from retinue import Profile, Runtime, Turn

WRITER = Path(__file__)
ROOT = Path(__file__).resolve().parents[2]


class Writer:
    """The writer process of :mod:`writer`."""

    def __init__(self, store: Path, *, control: bool = True) -> None:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        workspace = Path(f"{store}-ws")
        workspace.mkdir(exist_ok=True)
        (workspace / "notes.txt").write_text("ship on Tuesday\n")
        self.store = store
        self.proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(store), *([] if control else ["no-control"])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            _, err = self.proc.communicate(timeout=60)
            raise AssertionError(f"writer did not start: {line!r} {err}")

    def stop(self) -> None:
        """Close the writer's runtime (its stdin) and wait for it to exit."""
        if self.proc.returncode is not None:
            return
        try:
            self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()

    def kill(self) -> None:
        """SIGKILL the writer: it dies holding the store, its socket file left behind."""
        self.proc.kill()
        self.proc.communicate(timeout=60)


def echo(turn: Turn) -> str:
    """Answer with the task."""
    return turn.task


def herald(turn: Turn) -> str:
    """Send the task to the host, then answer."""
    turn.send(turn.agent.parent_path, turn.task)
    return "sent"


def blocker(turn: Turn) -> str:
    """Run until interrupted (at most two minutes)."""
    turn.cancelled.wait(120)
    return "cancelled"


def profiles() -> list[Profile]:
    """The writer's profiles (see the module)."""
    return [
        Profile("echo", runner=echo),
        Profile("herald", runner=herald),
        Profile("blocker", runner=blocker),
        Profile("holder", subagents=["blocker"], runner=blocker),
        Profile("reader", model="retinue/scripted", tools="read", approve=["read_file"]),
    ]


def main() -> None:
    """Serve the store until stdin closes."""
    store = sys.argv[1]
    control = sys.argv[2:] != ["no-control"]
    with Runtime.open(store, profiles=profiles(), workspace=f"{store}-ws", control=control):
        print("ready", flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
