"""The store's upkeep from the host: a hot backup, and compaction (and reclaim) on demand.

:class:`UpkeepCalls` holds ``backup`` and ``compact`` (with its
``*_async`` twin).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import msgspec

from retinue.actors.commands import Barrier, Compact
from retinue.protocol.details import CompactionReport
from retinue.runtime.calls import Calls

__all__ = ["UpkeepCalls"]


class UpkeepCalls(Calls):
    """A compacted hot copy of the store, and compaction beyond the ``retain_*`` limits."""

    def backup(self, dest: str | os.PathLike[str]) -> Path:
        """Write a compacted hot copy of the live store to ``dest``; return its path."""
        self._ask(Barrier())
        return self._store.backup(dest)

    def compact(self, *, reclaim: bool = False) -> CompactionReport:
        """Compact now (it also runs every ``compact_interval_s``); return what went.

        Removes closed agents, read messages and delivered completions beyond
        the ``retain_*`` limits; never anything unread, undelivered or live.
        ``reclaim=True`` then gives the store file's free pages back to the
        file system: a compacting copy of the file is swapped in at a quiet
        point of the store's writer (what is committed meanwhile waits while
        the file is copied: 0.25 s for 33 MiB here; nothing acknowledged is
        lost, and a crash at any step leaves a store that opens whole). The report's
        ``file_bytes_before`` and ``file_bytes_after`` say what it gave back.

        Raises:
            StoreReadOnly: the runtime is read-only.
            StoreCorrupted: the store is damaged (nothing was changed).
            StoreError: the copy failed, e.g. for lack of disk (nothing was changed).
        """
        report = self._ask(Compact())
        if not reclaim:
            return report
        before, after = self._store.reclaim()
        return msgspec.structs.replace(report, file_bytes_before=before, file_bytes_after=after)

    async def compact_async(self, *, reclaim: bool = False) -> CompactionReport:
        """Like :meth:`compact`, without blocking the event loop."""
        report = await self._ask_async(Compact())
        if not reclaim:
            return report
        before, after = await asyncio.to_thread(self._store.reclaim)
        return msgspec.structs.replace(report, file_bytes_before=before, file_bytes_after=after)
