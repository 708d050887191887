"""Helpers for the CLI tests: run ``retinue`` as a user would, in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import retinue

HERE = Path(__file__).parent
TEAM = HERE / "team.toml"
"""A six-agent Python-runner team: /root/review/{security/{secrets,injection},style/naming}."""
SOURCE = Path(retinue.__file__).resolve().parents[1]


def env(**extra: str) -> dict[str, str]:
    """The environment of a ``retinue`` subprocess: this checkout first on the path."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join([str(SOURCE), out.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    out["PYTHONFAULTHANDLER"] = "1"  # a hung run sent SIGABRT (see ``finish``) shows its threads
    out.pop("RETINUE_STORE", None)
    out.update(extra)
    return out


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    """Wait up to ``timeout`` seconds for ``proc`` to end; return its output and errors.

    A process that does not end is sent SIGABRT: the fault handler (``env``
    turns it on) prints every thread's stack, and the test fails with them.

    Raises:
        AssertionError: the process did not end in time (with its threads' stacks).
    """
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        raise AssertionError(
            f"{proc.args!r} did not end in {timeout} s; its output:\n{out[-4000:]}\n"
            f"its errors and threads:\n{err[-20000:]}"
        ) from None


def command(*args: str | Path) -> list[str]:
    """The argv that runs ``retinue ARGS`` with this interpreter."""
    return [sys.executable, "-m", "retinue.cli", *map(str, args)]


def retinue_cli(
    *args: str | Path, timeout: float = 60, cwd: Path | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    """Run ``retinue ARGS`` to its end; return the finished process (never raises on status)."""
    return subprocess.run(
        command(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env(**extra),
        cwd=cwd,
        check=False,
    )


def python_script(script: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the Python file ``script`` in a fresh interpreter, in its folder, to its end.

    Returns the finished process (never raises on status).
    """
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=script.parent,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def tree_json(store: Path) -> list[dict[str, Any]]:
    """The agents of ``store`` as ``retinue tree --json`` prints them (read-only)."""
    done = retinue_cli("tree", "--store", store, "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]
