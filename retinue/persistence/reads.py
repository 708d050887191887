"""A store's reads: consistent snapshots, a few records, one value, the file's space.

:class:`StoreReads` is the reading half of :class:`~retinue.persistence.store.Store`:
every read runs in one LMDB read transaction, inside the store's
``_reading`` block (the gate held shared; a reader follows a reclaimed file).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retinue.errors import StoreError
from retinue.persistence.damage import Guard
from retinue.persistence.migrations import stamped_version
from retinue.persistence.space import StoreSpace, measure
from retinue.persistence.view import StoreView

__all__ = ["RESTORE_DATABASES", "Snapshot", "StoreReads"]

RESTORE_DATABASES = ("agents", "messages", "completions", "meta")
"""What :meth:`StoreReads.snapshot` reads by default (transcripts are read one by one)."""


@dataclass
class Snapshot:
    """Every record of every database, read in one read transaction."""

    records: dict[str, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    migrated_from: list[int] = field(default_factory=list)
    partial: bool = False
    """True if ``completions`` holds only the undelivered ones (the rest stay stored)."""


class StoreReads:
    """The reads of a store; :class:`~retinue.persistence.store.Store` provides the parts."""

    folder: Path
    readonly: bool
    migrated_from: list[int]
    env: Any
    _guard: Guard
    _dbs: dict[str, Any]

    def _reading(self) -> contextlib.AbstractContextManager[None]:
        """The block every read runs in (see ``Store._reading``)."""
        raise NotImplementedError

    def schema_version(self) -> int:
        """Return the schema version stamped in the store (0 if none).

        Raises:
            StoreCorrupted, StoreError: LMDB could not read it.
        """
        with (
            self._reading(),
            self._guard.lmdb_errors("read the schema version"),
            self._guard.read_txn() as txn,
        ):
            return stamped_version(txn, self._dbs)

    def snapshot(
        self, databases: Iterable[str] = RESTORE_DATABASES, *, undelivered_only: bool = False
    ) -> Snapshot:
        """Read every record of ``databases`` in one consistent read transaction.

        ``undelivered_only``: of ``completions``, read only those the
        ``undelivered`` index lists (the open's; a store without the index,
        an older one a reader opens, is read whole, and ``Snapshot.partial``
        says which).

        A read-only store checks its pages first (see :meth:`_verify`): damage
        made in place since it opened is a :class:`StoreCorrupted`, not an abort.

        Raises:
            StoreCorrupted: a page on the way is damaged.
            StoreError: LMDB refused the read for another reason.
        """
        snap = Snapshot(migrated_from=list(getattr(self, "migrated_from", [])))
        with self._reading():
            if self.readonly:
                # A reader's store may be damaged in place since it opened (no writer
                # here notices), and LMDB aborts on a damaged page: check the pages
                # first, as on open. The snapshot reads every record anyway.
                with self._guard.lmdb_errors("check before a snapshot"):
                    self._guard.verify()
            with self._guard.lmdb_errors("read a snapshot"), self._guard.read_txn() as txn:
                for name in databases:
                    if name == "completions" and undelivered_only:
                        # The pages were checked above: the view checks nothing more.
                        listed = StoreView(txn, self._dbs, None).listed(name, "undelivered")
                        if listed is not None:
                            snap.records[name] = listed
                            snap.partial = True
                            continue
                    if name not in self._dbs:  # an optional database an older store lacks
                        snap.records[name] = []
                        continue
                    with txn.cursor(db=self._dbs[name]) as cur:
                        snap.records[name] = list(cur.iternext(keys=True, values=True))
        return snap

    @contextlib.contextmanager
    def view(self) -> Iterator[StoreView]:
        """Read a few records in one consistent read transaction (see :class:`StoreView`).

        Raises:
            StoreCorrupted: a page on the way is damaged.
            StoreError: LMDB refused the read for another reason.
        """
        with self._reading(), self._guard.lmdb_errors("read"), self._guard.read_txn() as txn:
            yield StoreView(txn, self._dbs, self._guard.verify if self.readonly else None)

    def get(self, database: str, key: bytes) -> bytes | None:
        """Return one committed value, or None (also for a database the store lacks).

        Raises:
            StoreCorrupted: a page on the way is damaged.
            StoreError: LMDB refused the read for another reason.
        """
        with self._reading(), self._guard.lmdb_errors(f"read {database}"):
            if database not in self._dbs:
                return None
            with self._guard.read_txn() as txn:
                value: bytes | None = txn.get(key, db=self._dbs[database])
        return value

    def space(self) -> StoreSpace:
        """Return how the data file is used now: size, pages in use and free, map headroom.

        Raises:
            StoreCorrupted: the data file shrank while the store was open.
            StoreError: LMDB or the file system refused the read.
        """
        with self._reading(), self._guard.lmdb_errors("measure the data file"):
            try:
                with self._guard.read_txn() as txn:
                    return measure(self.env, txn, self._dbs, self.folder)
            except OSError as exc:
                raise StoreError(
                    f"store {self.folder}: cannot measure the data file: {exc}",
                    path=str(self.folder),
                ) from None
