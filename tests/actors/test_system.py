"""A writable runtime's parts start and stop together: a failed start leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from retinue import Limits, Profile, Runtime, StoreLocked
from retinue.actors.system import System
from retinue.persistence.options import check_store_options
from retinue.testing import echo


def start(path: Path, closes: list[str]) -> System:
    """Start a System on ``path`` whose before-stop function records its call."""
    options = check_store_options(
        path, durability="full", map_size=1 << 24, readonly=False, group_commit=True
    )
    return System.start(
        options,
        create=False,
        profiles={"worker": Profile("worker", runner=echo)},
        runners={"worker": echo},
        limits=Limits(),
        before_stop=[lambda: closes.append("closed")],
    )


def test_a_failed_start_calls_its_before_stop_functions(tmp_path: Path) -> None:
    """What the host's layers started for the runtime (MCP sessions) is closed by the
    start that failed, as a shutdown would close it."""
    closes: list[str] = []
    holder = Runtime.open(tmp_path / "s", profiles=[Profile("worker", runner=echo)])
    try:
        with pytest.raises(StoreLocked):
            start(tmp_path / "s", closes)
    finally:
        holder.shutdown()
    assert closes == ["closed"]


def test_a_started_system_calls_its_before_stop_functions_once_at_shutdown(
    tmp_path: Path,
) -> None:
    closes: list[str] = []
    system = start(tmp_path / "s", closes)
    assert closes == []
    system.shutdown()
    system.shutdown()
    assert closes == ["closed"]
