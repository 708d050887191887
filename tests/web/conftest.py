"""Fixtures of the web view's tests: the extra, a store with a tree, a served view."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web view needs the 'web' extra: pip install -e '.[web]'")
pytest.importorskip("uvicorn", reason="the web view needs the 'web' extra: pip install -e '.[web]'")

WRITER = Path(__file__).with_name("writer.py")
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
        assert self.proc.stdout is not None
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


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Writer]:
    """A writer process running the test tree in ``tmp_path/store``, stopped at teardown."""
    w = Writer(tmp_path / "store", tmp_path / "release")
    yield w
    w.stop()
