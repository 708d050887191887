"""A store that fails for good answers every caller with StoreError; nobody hangs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import lmdb
import pytest

from retinue import Profile, Runtime, StoreError, Turn


def _echo(turn: Turn) -> str:
    return turn.task


def test_a_failed_commit_is_an_error_for_that_caller_and_every_later_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = Runtime.open(tmp_path / "s", profiles=[Profile("w", runner=_echo)])
    try:
        a = rt.spawn("w", "before", name="a")
        assert rt.wait(a.id, timeout=10).output == "before"
        # A fault injected below the API: no public call makes the disk fail, so the
        # store's writer is reached directly (the only way to stage a failed commit).
        store: Any = rt._store

        def broken(writes: object) -> None:  # fault injection: the disk went away
            raise lmdb.DiskError("injected: no space left on device")

        monkeypatch.setattr(store._writer, "_commit", broken)
        with pytest.raises(StoreError, match="injected"):
            rt.send(a.id, "lost?")
        # The store is marked failed: later calls fail fast instead of hanging.
        with pytest.raises(StoreError):
            rt.spawn("w", "after")
        with pytest.raises(StoreError):
            rt.get(a.id)
    finally:
        monkeypatch.undo()
        rt.shutdown()
    # What was acknowledged before the failure is intact.
    with Runtime.open(tmp_path / "s", profiles=[Profile("w", runner=_echo)]) as again:
        assert [x.name for x in again.agents()] == ["a"]
        assert again.get("/root/a").output == "before"


def test_a_wait_on_a_running_agent_after_the_store_failed_is_answered_with_the_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait registered once the store failed for good gets StoreError, not its timeout:
    the agent it waits on may never commit again."""
    release = threading.Event()

    def _held(turn: Turn) -> str:
        release.wait(30)
        return turn.task

    rt = Runtime.open(
        tmp_path / "s", profiles=[Profile("w", runner=_echo), Profile("h", runner=_held)]
    )
    try:
        a = rt.spawn("w", "before", name="a")
        assert rt.wait(a.id, timeout=10).output == "before"
        running = rt.spawn("h", "held", name="held")
        store: Any = rt._store  # fault injection below the API, as above

        def broken(writes: object) -> None:
            raise lmdb.DiskError("injected: no space left on device")

        monkeypatch.setattr(store._writer, "_commit", broken)
        with pytest.raises(StoreError, match="injected"):
            rt.send(a.id, "lost?")
        with pytest.raises(StoreError):
            rt.wait(running.id, timeout=20)
    finally:
        release.set()
        monkeypatch.undo()
        rt.shutdown()
