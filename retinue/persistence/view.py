"""One consistent read of a few records: gets, key-prefix scans and value searches.

:meth:`Store.view <retinue.persistence.store.Store.view>` opens a
:class:`StoreView` over one read transaction, so every read through it sees
the same committed state. It serves the reads of one agent (its record and
its parents', its mailbox, the completions routed to it through the
``undelivered`` index, its transcript)
without reading the whole store as :meth:`~retinue.persistence.store.Store.snapshot`
does. A search walks every page of its database: on a read-only store, whose
pages a writer elsewhere may have damaged, the pages are checked first (once
per view), as before a snapshot; a get or a prefix scan reads only the pages
on its way, as :meth:`~retinue.persistence.store.Store.get` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["StoreView"]


class StoreView:
    """Reads within one read transaction of a store (see the module docstring)."""

    def __init__(
        self, txn: Any, databases: Mapping[str, Any], check_pages: Callable[[Any], None] | None
    ) -> None:
        """Read ``databases`` in ``txn``; ``check_pages(txn)`` runs before the first search
        (None: no check, the store is its own writer's)."""
        self._txn = txn
        self._dbs = databases
        self._check_pages = check_pages

    def get(self, database: str, key: bytes) -> bytes | None:
        """Return one value, or None (also for an empty key or a database the store lacks)."""
        db = self._dbs.get(database)
        if db is None or not key:
            return None
        value: bytes | None = self._txn.get(key, db=db)
        return value

    def prefix(self, database: str, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Return the records whose key starts with ``prefix``, in key order."""
        db = self._dbs.get(database)
        if db is None or not prefix:
            return []
        found: list[tuple[bytes, bytes]] = []
        with self._txn.cursor(db=db) as cursor:
            if not cursor.set_range(prefix):
                return found
            for key, value in cursor.iternext(keys=True, values=True):
                if not key.startswith(prefix):
                    break
                found.append((key, value))
        return found

    def listed(self, database: str, index: str) -> list[tuple[bytes, bytes]] | None:
        """Return the records of ``database`` whose keys the key-only database ``index``
        lists, in key order (None: the store has no such index, an older store).

        Only the pages on the way are read, as for a get.
        """
        listing = self._dbs.get(index)
        db = self._dbs.get(database)
        if listing is None or db is None:
            return None
        found: list[tuple[bytes, bytes]] = []
        get = self._txn.get
        with self._txn.cursor(db=listing) as cursor:
            for key in cursor.iternext(keys=True, values=False):
                value = get(key, None, db)
                if value is not None:
                    found.append((key, value))
        return found

    def containing(self, database: str, needle: bytes) -> list[tuple[bytes, bytes]]:
        """Return the records whose value holds the bytes ``needle``, in key order.

        It reads every record of ``database`` (the pages are checked first on a
        read-only store).

        Raises:
            StoreCorrupted: a page is damaged.
        """
        db = self._dbs.get(database)
        if db is None:
            return []
        check, self._check_pages = self._check_pages, None
        if check is not None:
            check(self._txn)  # against this view's own snapshot (no nested read)
        found: list[tuple[bytes, bytes]] = []
        with self._txn.cursor(db=db) as cursor:
            for value in cursor.iternext(keys=False, values=True):
                if needle in value:
                    found.append((cursor.key(), value))
        return found
