"""What a closed runtime's event loop left behind, as its logs tell it.

A turn's task left pending when the runtime's loop closes is never reported:
asyncio logs ``Task was destroyed but it is pending`` once the task is
collected, and the loop's own close logs that calls and tasks were still
coming after its last passes. :class:`LeftBehind` collects those lines (one
handler on the ``asyncio`` and ``retinue.executor`` loggers, installed once);
the machine reads them after every close (:meth:`LeftBehind.take`, after a
collection of the young generations, so a task dropped by the close is
reported by then).
"""

from __future__ import annotations

import gc
import logging
import threading

__all__ = ["LEFT_BEHIND", "LeftBehind"]

_MARKERS = (
    "Task was destroyed but it is pending",  # asyncio: a task its closed loop never ran out
    "still coming after",  # retinue.executor: the loop closed with calls or tasks left
)


class LeftBehind(logging.Handler):
    """Collects the log lines that say a closed loop left a task or a call behind."""

    def __init__(self) -> None:
        """Collect nothing yet; :meth:`install` starts listening."""
        super().__init__(logging.WARNING)
        self._seen: list[str] = []
        self._guard = threading.Lock()
        self._installed = False

    def emit(self, record: logging.LogRecord) -> None:
        """Keep a line that says something was left behind."""
        text = record.getMessage()
        if any(marker in text for marker in _MARKERS):
            what = getattr(record, "task", None) or text
            with self._guard:
                self._seen.append(" ".join(str(what).split())[:300])

    def install(self) -> None:
        """Listen to the loggers (once per process)."""
        with self._guard:
            if self._installed:
                return
            self._installed = True
        for name in ("asyncio", "retinue.executor"):
            logging.getLogger(name).addHandler(self)

    def take(self, *, full: bool = False) -> list[str]:
        """Collect garbage (a dropped pending task is reported then), return and forget
        what was seen since the last call.

        The young generations only (well under a millisecond: what a close just
        dropped is young) unless ``full`` (some 50 ms in the machine's process).
        """
        gc.collect() if full else gc.collect(1)
        with self._guard:
            seen, self._seen = self._seen, []
        return seen


LEFT_BEHIND = LeftBehind()
"""The one collector the machine reads after each close."""
