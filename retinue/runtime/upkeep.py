"""The store's upkeep from the host: a hot backup, and compaction on demand.

:class:`UpkeepCalls` holds ``backup`` and ``compact`` (with its
``*_async`` twin).
"""

from __future__ import annotations

import os
from pathlib import Path

from retinue.actors.commands import Barrier, Compact
from retinue.actors.compaction import CompactionReport
from retinue.runtime.calls import Calls

__all__ = ["UpkeepCalls"]


class UpkeepCalls(Calls):
    """A compacted hot copy of the store, and compaction beyond the ``retain_*`` limits."""

    def backup(self, dest: str | os.PathLike[str]) -> Path:
        """Write a compacted hot copy of the live store to ``dest``; return its path."""
        self._ask(Barrier())
        return self._store.backup(dest)

    def compact(self) -> CompactionReport:
        """Compact now (it also runs every ``compact_interval_s``); return what went.

        Removes closed agents, read messages and delivered completions beyond
        the ``retain_*`` limits; never anything unread, undelivered or live.
        """
        return self._ask(Compact())

    async def compact_async(self) -> CompactionReport:
        """Like :meth:`compact`, without blocking the event loop."""
        return await self._ask_async(Compact())
