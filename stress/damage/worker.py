"""The damage suite's worker: a child process that opens each store it is sent, one verdict a line.

The parent sends one JSON request a line (a store's path, the mode, and a
damage to apply while the store is open); the worker answers one JSON
verdict a line: the store opened (with its agents and diagnostics, after one
turn of work for a writer), or the typed or untyped error. If it dies, the
signal is the verdict for that case and a new worker takes the next case.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from stress.damage.cases import Case, worker_runner

__all__ = ["CASE_TIMEOUT_S", "Worker", "worker_main"]

CASE_TIMEOUT_S = 60.0


def worker_main() -> None:
    """Open each store named on stdin; print one JSON verdict line per request."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from retinue import Profile, Runtime
    from retinue.errors import RetinueError

    profiles = [
        Profile("lead", subagents=["worker"], runner=worker_runner),
        Profile("worker", runner=worker_runner),
    ]
    for line in sys.stdin:
        request = json.loads(line)
        path, mode = request["path"], request["mode"]
        verdict: dict[str, Any] = {"mode": mode}
        try:
            if mode.startswith("readonly"):
                rt = Runtime.open(path, readonly=True)
            else:
                rt = Runtime.open(path, profiles=profiles)
            try:
                if "damage" in request:  # damaged under the open runtime
                    Case(**request["damage"]).apply(Path(path), request["page"])
                verdict["agents"] = len(rt.agents(include_closed=True))
                verdict["diagnostics"] = len(rt.diagnostics)
                if mode.startswith("writer"):  # one turn of work on the damaged store
                    info = rt.spawn("worker", "after the damage")
                    rt.wait(info.id, timeout=20)
            finally:
                rt.shutdown()
            verdict["outcome"] = "open"
        except RetinueError as exc:
            verdict.update(outcome="typed", error=type(exc).__name__, message=str(exc)[:300])
        except Exception as exc:
            verdict.update(outcome="untyped", error=type(exc).__name__, message=str(exc)[:300])
        print(json.dumps(verdict), flush=True)


class Worker:
    """A worker child process fed one request at a time."""

    def __init__(self) -> None:
        """Start the worker."""
        repo = Path(__file__).resolve().parents[2]
        env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stress.damage", "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=repo,
            env=env,
        )

    def ask(
        self, path: Path, mode: str, damage: Case | None = None, page: int = 0
    ) -> dict[str, Any]:
        """Have the worker open ``path`` (and damage it while open); return its verdict."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        request: dict[str, Any] = {"path": str(path), "mode": mode}
        if damage is not None:
            request.update(damage=dataclasses.asdict(damage), page=page)
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = _readline(self.proc, CASE_TIMEOUT_S)
        if line:
            verdict: dict[str, Any] = json.loads(line)
            return verdict
        if line is None:  # silent for the whole timeout
            self.proc.kill()
            self.proc.wait()
            return {"mode": mode, "outcome": "hang"}
        code = self.proc.wait()  # it closed its output: it is exiting
        return {"mode": mode, "outcome": "signal" if code < 0 else "exit", "code": code}

    @property
    def alive(self) -> bool:
        """True while the worker runs."""
        return self.proc.poll() is None

    def close(self) -> None:
        """Stop the worker."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=CASE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _readline(proc: subprocess.Popen[str], timeout: float) -> str | None:
    """Read one line from ``proc``: '' if it closed its output, None if silent for ``timeout``."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            return None
    return proc.stdout.readline()
