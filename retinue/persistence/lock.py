"""The single-writer lock of a store folder.

A writer holds an exclusive ``flock`` on ``<store>/writer.lock`` for as long as
it is open, and writes its pid into the file. The kernel drops the lock when
the holder dies, so a crashed writer never keeps a store locked. ``flock``
locks belong to an open file description, so a second open in the same
process conflicts just like one from another process.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from retinue.errors import StoreLocked

__all__ = ["LOCK_FILE", "WriterLock", "read_holder_pid"]

LOCK_FILE = "writer.lock"


def read_holder_pid(folder: Path) -> int | None:
    """Return the pid written in ``folder``'s lock file, or None if unreadable."""
    try:
        text = (folder / LOCK_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class WriterLock:
    """An exclusive, process-death-safe lock on one store folder."""

    def __init__(self, folder: Path) -> None:
        """Take the lock on ``folder``.

        Raises:
            StoreLocked: another live writer (this process or another) holds it.
        """
        self._path = folder / LOCK_FILE
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = read_holder_pid(folder)
            holder = f"pid {pid}" if pid is not None else "another writer"
            raise StoreLocked(
                f"store {folder} is open for writing by {holder}; close that runtime "
                "or open this one with readonly=True",
                pid=pid,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
