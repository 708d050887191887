"""The retention machine's crash seam: a crash between a transition's commit and its spread deletes.

A transition that removes agents (retention after a close, or a compaction)
commits its writes in one transaction and the removal's deletes in small
transactions after it (:mod:`retinue.persistence.writer`). :class:`Cut`
wraps one live store's writer (its ``_commit_group`` and ``_commit``, the
same point ``tests/persistence/test_close_and_remove_cut.py`` kills a child
process at): armed, at the next transition with spread deletes it takes a
consistent copy of the store on the writer thread just before the spread
transaction drawn (the first, or a later one), i.e. what a crash there leaves,
then lets the writer carry on. The machine opens the copy while the old
runtime is thrown away.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retinue.persistence.commits import Write
from retinue.persistence.copies import backup_to
from retinue.persistence.store import Store

__all__ = ["Cut"]


class Cut:
    """A one-shot crash point inside a live store's writer, between spread transactions."""

    def __init__(self, store: Store) -> None:
        """Wrap ``store``'s writer (an open writer store); nothing is cut until :meth:`arm`.

        Raises:
            RuntimeError: ``store`` has no writer.
        """
        writer = store._writer
        if writer is None:
            raise RuntimeError("a cut needs a writer store")
        self._writer = writer
        self._version = store.schema_version()
        self._group = writer._commit_group
        self._commit = writer._commit
        writer._commit_group = self._cutting_group  # type: ignore[method-assign]
        writer._commit = self._cutting_commit  # type: ignore[method-assign]
        self._lock = threading.Lock()
        self._at: int | None = None  # armed: the spread transaction to cut before
        self._dest: Path | None = None
        self._left: int | None = None  # transactions of the group to commit before the cut
        self.fired = False
        self.spread_batches = 0  # how many spread transactions the cut group had
        self.error: BaseException | None = None

    def arm(self, at: int, dest: Path) -> None:
        """Cut before the ``at``-th spread transaction (0: the first; past the last: the
        last) of the next transition that has any, copying the store to ``dest``."""
        with self._lock:
            self._at, self._dest, self.fired, self.error = at, dest, False, None

    def disarm(self) -> bool:
        """Stop cutting; return whether the cut fired (call once the store was flushed)."""
        with self._lock:
            self._at = None
            return self.fired

    def _cutting_group(self, group: list[Any]) -> None:
        spread = group[-1].spread
        with self._lock:
            if self._at is not None and not self.fired and spread:
                batches = math.ceil(len(spread) / self._writer._spread_step())
                first = 1 if any(item.writes for item in group) else 0
                self._left = first + min(self._at, batches - 1)
                self.spread_batches = batches
        try:
            self._group(group)
        finally:
            self._left = None

    def _cutting_commit(self, writes: Sequence[Write], *, timed: bool = False) -> float:
        if self._left is not None:
            if self._left == 0:
                self._left = None
                self._copy()
            else:
                self._left -= 1
        return self._commit(writes, timed=timed)

    def _copy(self) -> None:
        """Copy what is committed now (writer thread: no transaction is open)."""
        dest = self._dest
        assert dest is not None
        try:
            backup_to(self._writer.env, self._writer.guard, dest, self._version)
        except BaseException as exc:  # reported by the machine, never the writer's end
            self.error = exc
        with self._lock:
            self.fired = True
            self._at = None
