"""Fixtures of the control-socket tests: a writer in a child process, and a client of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import retinue
from control.writer import Writer
from retinue import RemoteRuntime


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Writer]:
    """A writer process on a fresh store under ``tmp_path`` (stopped after the test)."""
    proc = Writer(tmp_path / "store")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def remote(writer: Writer) -> Iterator[RemoteRuntime]:
    """A client connected to ``writer`` (disconnected after the test)."""
    with retinue.connect(writer.store) as client:
        yield client
