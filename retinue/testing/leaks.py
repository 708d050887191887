"""What a runtime's shutdown must leave behind: nothing, and soon.

:class:`Leaks` notes the process's threads and child processes before a
runtime opens and watches the event loops' logs for tasks destroyed while
pending (or child processes that outlived them); :meth:`Leaks.check`, after
the shutdown, returns what is left over (each a
:class:`~retinue.testing.invariants.Broken`: ``thread_left_behind``,
``process_left_behind``, ``task_left_behind``). :func:`shutdown_within` shuts
a runtime down and reports ``shutdown_too_slow`` if that took longer than its
bound (the shutdown is left to finish on its own thread).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from types import TracebackType

from retinue.runtime import Runtime
from retinue.testing.invariants import Broken

__all__ = ["Leaks", "shutdown_within"]

_LOGGED = {
    "Task was destroyed but it is pending": "task_left_behind",
    "exception was never retrieved": "task_left_behind",  # a task's or a future's
    "that handles pid": "process_left_behind",  # a child that outlived its loop
}
"""What asyncio logs about work a closed loop left behind -> the invariant it breaks."""


def _children() -> set[int]:
    """The process ids of this process's children (Linux; elsewhere none are seen)."""
    found: set[int] = set()
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return found
    for task in tasks.iterdir():
        try:
            text = (task / "children").read_text()
        except OSError:
            continue
        found.update(int(pid) for pid in text.split())
    return found


class _AsyncioLog(logging.Handler):
    """Collects asyncio's reports of work a closed loop left behind (see :data:`_LOGGED`)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[Broken] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        for marker, invariant in _LOGGED.items():
            if marker in text:
                what = getattr(record, "task", None) or text
                self.seen.append(Broken(invariant, "", " ".join(str(what).split())[:300]))


class Leaks:
    """The threads and child processes of this process now; use it around a runtime's life.

    ``with Leaks() as leaks: ...open, use and shut down a runtime...`` then
    ``leaks.check()``. Take it after litellm is imported (its first call
    starts threads that live as long as the process).
    """

    def __init__(self) -> None:
        """Note the threads and child processes, and start watching asyncio's log."""
        self.threads = {t.ident for t in threading.enumerate()}
        self.children = _children()
        self._log = _AsyncioLog()
        logging.getLogger("asyncio").addHandler(self._log)

    def __enter__(self) -> Leaks:
        """Return the watch itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop watching asyncio's log."""
        self.close()

    def close(self) -> None:
        """Stop watching asyncio's log (idempotent)."""
        logging.getLogger("asyncio").removeHandler(self._log)

    def _extra(self) -> tuple[list[threading.Thread], set[int]]:
        threads = [t for t in threading.enumerate() if t.ident not in self.threads and t.is_alive()]
        return threads, _children() - self.children

    def check(self, grace_s: float = 5.0) -> list[Broken]:
        """Return what is left beyond the start: threads, child processes, pending tasks.

        Waits up to ``grace_s`` for threads and processes that are ending.
        """
        deadline = time.monotonic() + grace_s
        threads, children = self._extra()
        while (threads or children) and time.monotonic() < deadline:
            time.sleep(0.05)
            threads, children = self._extra()
        broken = [
            Broken("thread_left_behind", "", f"thread {t.name!r} (daemon={t.daemon}) still runs")
            for t in threads
        ]
        broken += [
            Broken("process_left_behind", "", f"child process {pid} {_command(pid)} still runs")
            for pid in sorted(children)
        ]
        return broken + self._log.seen


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "(gone)"
    return repr(raw.replace(b"\x00", b" ").decode("utf-8", "replace").strip()[:120])


def shutdown_within(rt: Runtime, seconds: float) -> list[Broken]:
    """Shut ``rt`` down; return ``[shutdown_too_slow]`` if it took longer than ``seconds``.

    The shutdown runs on a daemon thread: one that never ends cannot keep the
    caller (nor the process's exit) waiting.
    """
    thread = threading.Thread(target=rt.shutdown, name="retinue-check-shutdown", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        return [Broken("shutdown_too_slow", "", f"shutdown still running after {seconds:g} s")]
    return []
