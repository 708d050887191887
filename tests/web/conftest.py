"""Fixtures of the web view's tests: the extra, a store with a tree, a served view."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip(
    "starlette", reason="the web view needs the 'web' extra: pip install -e '.[web]'"
)
pytest.importorskip("uvicorn", reason="the web view needs the 'web' extra: pip install -e '.[web]'")

from web.writer import ROOT, Writer

__all__ = ["ROOT", "Writer", "wide_writer", "writer"]


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Writer]:
    """A writer process running the test tree in ``tmp_path/store``, stopped at teardown."""
    w = Writer(tmp_path / "store", tmp_path / "release")
    yield w
    w.stop()


@pytest.fixture
def wide_writer(tmp_path: Path) -> Iterator[Writer]:
    """A writer process running the six-agent tree (a failing leaf among them)."""
    w = Writer(tmp_path / "store", tmp_path / "release", wide=True)
    yield w
    w.stop()
