"""A read-only runtime's running parts: a store opened beside its writer, and its reader.

:class:`ReadOnlySystem` is what :class:`~retinue.actors.system.System` is for
a writer: it opens the store read-only, reads what a restore would skip or
repair, serves the read commands through a
:class:`~retinue.actors.system._reader.StoreReader` behind the same
:class:`~retinue.actors.calls._engine.Engine`, and releases it all once, whoever
asks and however often.
"""

from __future__ import annotations

import threading
from pathlib import Path

from retinue.actors.calls import Channel, Engine, RuntimeState
from retinue.actors.events import EventBus
from retinue.actors.system._agent_read import PATHS_RENAMED
from retinue.actors.system._boot import read_diagnostics
from retinue.actors.system._reader import StoreReader
from retinue.persistence.store import Store
from retinue.protocol.limits import Limits

__all__ = ["ReadOnlySystem"]


class ReadOnlySystem:
    """A store opened read-only beside its writer, and the reader that serves it."""

    def __init__(self, path: Path, limits: Limits) -> None:
        """Open the store at ``path`` read-only.

        Raises:
            StoreVersionError: the store was written by a newer schema.
            StoreError, StoreCorrupted: no readable store there.
        """
        self.path = path
        self.limits = limits
        self.bus = EventBus(limits.event_queue_capacity)
        store = Store(path, readonly=True)
        try:
            store.refuse_newer()
            self.diagnostics = read_diagnostics(store)
        except BaseException:
            store.close()
            raise
        self.store = store
        renamed = any(d.code in PATHS_RENAMED for d in self.diagnostics)
        self.reader = StoreReader(store, limits, direct=not renamed)
        self.engine = Engine(Channel(after_close=False))
        self.engine.channel.connect(self.reader.submit)
        self._lock = threading.Lock()
        self._shutting_down = False
        self._released = threading.Event()

    @property
    def state(self) -> RuntimeState:
        """Open or closed."""
        return self.engine.channel.state

    @property
    def abandoned_runners(self) -> int:
        """None: a reader runs no turn."""
        return 0

    def shutdown(self) -> None:
        """Release the store (waiting for reads in progress); idempotent, from any thread."""
        with self._lock:
            first = not self._shutting_down
            self._shutting_down = True
        if not first:
            self._released.wait()
            return
        try:
            self.engine.channel.close(RuntimeState.CLOSED)
            self.reader.close()
            self.store.close()
            self.bus.close()
        finally:
            self._released.set()
