"""Whether a process still writes the store a read-only view shows.

A writer holds ``<store>/writer.lock`` (an exclusive ``flock``) with its pid
written in it, and empties the file when it closes; the kernel drops the lock
when the writer dies, killed or not (:mod:`retinue.persistence.lock`). A
reader cannot probe the lock without taking it for an instant (which would
refuse a writer starting at that moment), so it reads the pid instead: no
pid means no writer; a recorded pid whose process is gone means the writer
died without closing. (A pid reused since by another process reads as a live
writer; a process the writer forked that outlives it holds the lock yet
reads as gone.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from retinue.persistence.lock import pid_alive, read_holder_pid

__all__ = ["WriterStatus", "writer_status"]


@dataclass(frozen=True)
class WriterStatus:
    """Whether a writer process holds the store (``alive``), and its recorded ``pid``.

    ``pid`` is the live writer's, or the dead one's it left behind (None: the
    lock file names none, as after a clean close).
    """

    alive: bool
    pid: int | None = None

    def describe(self) -> str:
        """Say it for the page's badge title: ``writer pid 123 is running`` and the like."""
        if self.alive:
            return f"writer pid {self.pid} is running"
        if self.pid is not None:
            return (
                f"no process writes this store: its writer (pid {self.pid}) exited "
                "without closing it"
            )
        return "no process writes this store (its writer closed it)"


def writer_status(folder: Path) -> WriterStatus:
    """Return whether a live process holds ``folder``'s writer lock, by the pid it recorded."""
    pid = read_holder_pid(folder)
    return WriterStatus(pid is not None and pid_alive(pid), pid)
