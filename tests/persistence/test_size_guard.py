"""The size check of an open store under threads: an older look is not a truncation.

Every read transaction and every commit look at ``data.mdb``'s size and refuse
a file smaller than the size last recorded (another process truncated it).
Threads look at once while the writer grows the file: a thread that looked
before the file grew may compare after another thread recorded the grown
size. That ordering happened in a cluster benchmark (a model turn failed with
"data.mdb shrank from 167936 to 155648 bytes"); these tests force it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from retinue import StoreCorrupted
from retinue.persistence.damage import Guard

PAGE = 4096


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[Guard, Path]]:
    """A guard over a two-page data file that has looked at its size once."""
    data = tmp_path / "data.mdb"
    data.write_bytes(b"\0" * 2 * PAGE)
    fd = os.open(data, os.O_RDONLY)
    guard = Guard(tmp_path, None, fd)
    assert guard.check_size("open") == 2 * PAGE
    try:
        yield guard, data
    finally:
        os.close(fd)


def test_a_look_older_than_the_recorded_size_is_not_a_truncation(
    guarded: tuple[Guard, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    guard, data = guarded
    real_lseek = os.lseek
    looked, grown = threading.Event(), threading.Event()
    late = threading.current_thread()

    def lseek(fd: int, position: int, whence: int) -> int:
        result = real_lseek(fd, position, whence)
        if threading.current_thread() is late and not looked.is_set():
            looked.set()  # this thread has its (soon old) size; hold it back
            assert grown.wait(10)
        return result

    outcome: list[object] = []

    def slow_reader() -> None:
        try:
            outcome.append(guard.check_size("read"))
        except StoreCorrupted as exc:
            outcome.append(exc)

    monkeypatch.setattr(os, "lseek", lseek)  # the guard looks with os.lseek
    late = threading.Thread(target=slow_reader)
    late.start()
    assert looked.wait(10)
    with data.open("ab") as handle:  # the writer grows the file by three pages
        handle.write(b"\0" * 3 * PAGE)
    assert guard.check_size("commit") == 5 * PAGE  # another thread records the grown size
    grown.set()
    late.join(10)
    assert outcome == [5 * PAGE]


def test_a_file_that_really_shrank_is_still_refused(guarded: tuple[Guard, Path]) -> None:
    guard, data = guarded
    with data.open("ab") as handle:
        handle.write(b"\0" * 3 * PAGE)
    assert guard.check_size("commit") == 5 * PAGE
    os.truncate(data, 4 * PAGE)
    with pytest.raises(StoreCorrupted, match="shrank from 20480 to 16384 bytes"):
        guard.check_size("read")
