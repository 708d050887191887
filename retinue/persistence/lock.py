"""The single-writer lock of a store folder.

A writer holds an exclusive ``flock`` on ``<store>/writer.lock`` for as long as
it is open, and writes its pid into the file. The kernel drops the lock when
the holder dies, so a crashed writer never keeps a store locked. ``flock``
locks belong to an open file description, so a second open in the same
process conflicts just like one from another process.

A forked child shares its parent's open file descriptions, and with them the
lock: a child that outlives the writer would keep the store locked. So the
descriptor is close-on-exec (an exec'd program never inherits it), and every
forked child closes its copy at once (``os.register_at_fork``), without
unlocking: the parent keeps its lock, and the lock dies with the parent.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import weakref
from pathlib import Path

from retinue.errors import StoreLocked

__all__ = ["LOCK_FILE", "WriterLock", "pid_alive", "read_holder_pid"]

LOCK_FILE = "writer.lock"
_PID_BYTES = 32  # a pid is a few digits; anything longer is garbage

_held: weakref.WeakSet[WriterLock] = weakref.WeakSet()
_held_guard = threading.Lock()


def read_holder_pid(folder: Path) -> int | None:
    """Return the pid written in ``folder``'s lock file, or None if unreadable or garbage."""
    try:
        with (folder / LOCK_FILE).open("rb") as handle:
            raw = handle.read(_PID_BYTES + 1)
    except OSError:
        return None
    text = raw.decode("ascii", "replace").strip()
    if len(raw) > _PID_BYTES or not text.isdigit():
        return None
    pid = int(text)
    return pid if pid > 0 else None


def pid_alive(pid: int) -> bool:
    """Return True if a process with ``pid`` exists (possibly owned by another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def _forget_in_child() -> None:
    """After a fork, close the child's copies of every held lock without unlocking them."""
    for lock in list(_held):
        lock._forget()


os.register_at_fork(after_in_child=_forget_in_child)


class WriterLock:
    """An exclusive, process-death-safe lock on one store folder."""

    def __init__(self, folder: Path) -> None:
        """Take the lock on ``folder``.

        Raises:
            StoreLocked: another writer (this process or another) holds it. Its
                ``.pid`` is the recorded writer's pid when that process is alive,
                and None when it is not (a process it forked still holds the lock).
        """
        self._path = folder / LOCK_FILE
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        os.set_inheritable(fd, False)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._locked(folder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd: int | None = fd
        with _held_guard:
            _held.add(self)

    @staticmethod
    def _locked(folder: Path) -> StoreLocked:
        pid = read_holder_pid(folder)
        if pid == os.getpid():
            return StoreLocked(
                f"store {folder} is already open for writing in this process (pid {pid}); "
                "use the runtime that holds it (or shut it down first): a process opens a "
                "store once, so readonly=True here fails too; read it beside its writer from "
                "another process",
                pid=pid,
            )
        if pid is None:
            return StoreLocked(
                f"store {folder} is open for writing by another process (its lock file "
                "names no pid); close that runtime or open this one with readonly=True"
            )
        if not pid_alive(pid):
            return StoreLocked(
                f"store {folder} is locked, but its recorded writer (pid {pid}) is no longer "
                "running: a process it started (forked) still holds the lock. Stop that "
                "process (`fuser writer.lock` in the store folder lists it), or open this "
                "one with readonly=True",
                pid=None,
            )
        return StoreLocked(
            f"store {folder} is open for writing by pid {pid}; close that runtime "
            "or open this one with readonly=True",
            pid=pid,
        )

    def _forget(self) -> None:
        """Drop this process's copy of the descriptor, leaving the lock to its owner."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def release(self) -> None:
        """Release the lock (idempotent)."""
        with _held_guard:
            _held.discard(self)
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
