"""The LMDB store: one environment under a folder, named databases, opened to write or read.

A writer's commits go through its one writer thread (:mod:`retinue.persistence.writer`:
group commit, the durability modes); reads take consistent snapshots; every
LMDB failure is a typed error, and damage is refused before LMDB meets it
(:mod:`retinue.persistence.damage`). A second writer of the same store gets
``StoreLocked`` (:mod:`retinue.persistence.lock`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from retinue.errors import (
    InvalidArgument,
    StoreError,
    StoreReadOnly,
    StoreVersionError,
)
from retinue.persistence.integrity import has_marker, write_marker
from retinue.persistence.migrations import migrate, stamped_version
from retinue.persistence.opening import claim_folder, guard_file, open_env
from retinue.persistence.space import StoreSpace, measure
from retinue.persistence.view import StoreView
from retinue.persistence.writer import (
    FLUSH_INTERVAL_S,
    MAX_GROUP,
    Callback,
    CommitTimer,
    Durability,
    StoreStats,
    Submission,
    Write,
    Writer,
)
from retinue.protocol.records import SCHEMA_VERSION

__all__ = [
    "DATABASES",
    "DEFAULT_MAP_SIZE",
    "FLUSH_INTERVAL_S",
    "OPTIONAL_DATABASES",
    "RESTORE_DATABASES",
    "Durability",
    "Snapshot",
    "Store",
    "StoreStats",
    "Submission",
    "Write",
]

DATABASES = ("agents", "messages", "completions", "meta", "transcripts", "leases", "approvals")
OPTIONAL_DATABASES = frozenset({"transcripts", "leases", "approvals"})
"""Databases added after schema 1: a reader of an older store does without them."""
RESTORE_DATABASES = ("agents", "messages", "completions", "meta")
"""What :meth:`Store.snapshot` reads by default (transcripts are read one by one)."""
DEFAULT_MAP_SIZE = 64 * 1024 * 1024
_T = TypeVar("_T")


@dataclass
class Snapshot:
    """Every record of every database, read in one read transaction."""

    records: dict[str, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    migrated_from: list[int] = field(default_factory=list)


class Store:
    """One LMDB environment under a folder, opened for writing or read-only."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        durability: Durability | str = Durability.FULL,
        readonly: bool = False,
        map_size: int = DEFAULT_MAP_SIZE,
        max_readers: int = 1024,
        group_commit: bool = True,
        create: bool = False,
    ) -> None:
        """Open (and for a writer, create) the store in ``folder``.

        ``group_commit=False`` commits each transition on its own (for
        benchmarks that measure what group commit buys). The data file is
        checked before LMDB maps it (see :mod:`retinue.persistence.integrity`);
        ``create=True`` lets a writer start a new, empty store in a folder whose
        marker says it held data that is now missing or empty.

        Raises:
            InvalidArgument: unknown durability or a non-positive map size.
            StoreLocked: another writer holds the store.
            StoreVersionError: the store was written by a newer schema.
            StoreCorrupted: the data file is truncated, damaged, or lost from a
                folder that held a store.
            StoreError: the folder is missing (read-only) or LMDB refused it.
        """
        try:
            self.durability = Durability(durability)
        except ValueError:
            raise InvalidArgument(
                f"durability must be 'full' or 'buffered', not {durability!r}"
            ) from None
        if map_size <= 0:
            raise InvalidArgument("map_size must be positive")
        self.folder = Path(folder)
        self.readonly = readonly
        self.max_group = MAX_GROUP if group_commit else 1
        self.stats = StoreStats()
        self.migrated_from: list[int] = []
        self._closed = False
        self._writer: Writer | None = None
        self._lock = claim_folder(self.folder, readonly=readonly, create=create)
        try:
            self.env = open_env(
                self.folder,
                map_size=map_size,
                max_dbs=len(DATABASES) + 2,
                max_readers=max_readers,
                readonly=readonly,
                sync=self.durability is Durability.FULL,
            )
            self._guard = guard_file(self.folder, self.env)
        except BaseException:
            self._release_lock()
            raise
        try:
            self._check_contents()
        except BaseException:
            self.env.close()
            os.close(self._guard.data_fd)
            self._release_lock()
            raise
        if not readonly:
            self._writer = Writer(
                self._guard,
                self._dbs,
                durability=self.durability,
                max_group=self.max_group,
                stats=self.stats,
            )

    # -- opening, step by step -----------------------------------------------------

    def _check_contents(self) -> None:
        """Check the pages, open the databases and (a writer) migrate and mark the store.

        Raises:
            StoreCorrupted, StoreError, StoreVersionError: as :meth:`__init__` says.
        """
        self._guard.check_size("open")
        with self._guard.lmdb_errors("open"):
            self.env.reader_check()
            self._guard.verify()
            self._dbs = self._grow_on_full(self._open_databases)
            if not self.readonly:
                self.migrated_from = self._grow_on_full(self._check_schema)
        if not self.readonly and not has_marker(self.folder):
            try:
                write_marker(self.folder, SCHEMA_VERSION)
            except OSError as exc:
                raise StoreError(
                    f"cannot write the marker of store {self.folder}: {exc}",
                    path=str(self.folder),
                ) from None

    def _grow_on_full(self, step: Callable[[], _T]) -> _T:
        """Run an opening step, doubling a map too small to hold even that.

        A reader adopts a map another process has grown meanwhile.
        """
        while True:
            try:
                return step()
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)
                self.stats.map_growths += 1
            except lmdb.MapResizedError:  # a writer elsewhere grew it: adopt its size
                self.env.set_mapsize(0)

    def refuse_newer(self) -> None:
        """Raise if the store was written by a newer schema (readers check this).

        Raises:
            StoreVersionError: the stamped version is newer than this retinue's.
        """
        found = self.schema_version()
        if found > SCHEMA_VERSION:
            raise StoreVersionError(
                f"store schema version {found} is newer than this retinue's "
                f"{SCHEMA_VERSION}; upgrade retinue to open it"
            )

    def _open_databases(self) -> dict[str, Any]:
        dbs: dict[str, Any] = {}
        for name in DATABASES:
            try:
                dbs[name] = self.env.open_db(name.encode(), create=not self.readonly)
            except lmdb.NotFoundError:
                if name in OPTIONAL_DATABASES:
                    continue
                raise StoreError(
                    f"store {self.folder} has no {name!r} database; is it a retinue store?"
                ) from None
        return dbs

    def _check_schema(self) -> list[int]:
        with self.env.begin(write=True) as txn:
            return migrate(txn, self._dbs)

    def schema_version(self) -> int:
        """Return the schema version stamped in the store (0 if none).

        Raises:
            StoreCorrupted, StoreError: LMDB could not read it.
        """
        with self._guard.lmdb_errors("read the schema version"), self._guard.read_txn() as txn:
            return stamped_version(txn, self._dbs)

    # -- reading ---------------------------------------------------------

    def snapshot(self, databases: Iterable[str] = RESTORE_DATABASES) -> Snapshot:
        """Read every record of ``databases`` in one consistent read transaction.

        A read-only store checks its pages first (see :meth:`_verify`): damage
        made in place since it opened is a :class:`StoreCorrupted`, not an abort.

        Raises:
            StoreCorrupted: a page on the way is damaged.
            StoreError: LMDB refused the read for another reason.
        """
        snap = Snapshot(migrated_from=list(getattr(self, "migrated_from", [])))
        if self.readonly:
            # A reader's store may be damaged in place since it opened (no writer
            # here notices), and LMDB aborts on a damaged page: check the pages
            # first, as on open. The snapshot reads every record anyway.
            with self._guard.lmdb_errors("check before a snapshot"):
                self._guard.verify()
        with self._guard.lmdb_errors("read a snapshot"), self._guard.read_txn() as txn:
            for name in databases:
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
        check = self._guard.verify if self.readonly else None
        with self._guard.lmdb_errors("read"), self._guard.read_txn() as txn:
            yield StoreView(txn, self._dbs, check)

    def get(self, database: str, key: bytes) -> bytes | None:
        """Return one committed value, or None (also for a database the store lacks).

        Raises:
            StoreCorrupted: a page on the way is damaged.
            StoreError: LMDB refused the read for another reason.
        """
        if database not in self._dbs:
            return None
        with self._guard.lmdb_errors(f"read {database}"), self._guard.read_txn() as txn:
            value: bytes | None = txn.get(key, db=self._dbs[database])
        return value

    def space(self) -> StoreSpace:
        """Return how the data file is used now: size, pages in use and free, map headroom.

        Raises:
            StoreCorrupted: the data file shrank while the store was open.
            StoreError: LMDB or the file system refused the read.
        """
        with self._guard.lmdb_errors("measure the data file"), self._guard.read_txn() as txn:
            try:
                return measure(self.env, txn, self._dbs, self.folder)
            except OSError as exc:
                raise StoreError(
                    f"store {self.folder}: cannot measure the data file: {exc}",
                    path=str(self.folder),
                ) from None

    # -- writing ---------------------------------------------------------

    def _writable(self) -> Writer:
        """Return the writer, if transitions may be committed.

        Raises:
            StoreReadOnly: the store is read-only.
            StoreError: the store is closed or a previous commit failed for good.
        """
        if self.readonly or self._writer is None:
            raise StoreReadOnly(f"store {self.folder} is open read-only")
        if self._closed:
            raise StoreError(f"store {self.folder} is closed")
        refusal = self._writer.refusal()
        if refusal is not None:
            raise refusal
        return self._writer

    def submit(
        self, writes: Sequence[Write], callback: Callback, spread: Sequence[Write] = ()
    ) -> None:
        """Queue ``writes`` for the next group commit; ``callback(error or None)`` once done.

        Transitions are committed in submission order (see
        :mod:`retinue.persistence.writer`), so an answered one implies all earlier ones.
        ``spread`` writes (deletes a crash may cut after any of them) follow in
        small transactions of their own, so that they do not grow the file.

        Raises:
            StoreReadOnly, StoreError: as :meth:`_writable`.
        """
        self._writable().submit(writes, callback, spread)

    def submit_group(self, group: Sequence[Submission]) -> None:
        """Queue the transitions of ``group``, in one hand-off, as :meth:`submit` each.

        Raises:
            StoreReadOnly, StoreError: as :meth:`_writable`.
        """
        self._writable().submit_group(group)

    def write_now(self, writes: Sequence[Write]) -> None:
        """Commit ``writes`` and wait for it (convenience for setup and tests).

        Raises:
            StoreReadOnly: the store is read-only.
            StoreError: the commit failed.
        """
        self._writable().write_now(writes)

    def time_commits(self, timer: CommitTimer | None) -> None:
        """Tell ``timer`` how long each group commit takes from now on (None: stop timing).

        A read-only store commits nothing: nothing is timed.
        """
        if self._writer is not None:
            self._writer.on_commit = timer

    def flush(self) -> None:
        """Wait until everything submitted so far is committed and synced to disk."""
        if self._writer is not None and not self._closed:
            self._writer.flush()

    # -- backup and close -------------------------------------------------

    def backup(self, dest: str | os.PathLike[str]) -> Path:
        """Write a compacted, consistent copy of the store into ``dest``.

        ``dest`` is created; it must not hold a store already.

        The live store's pages are checked first (as on open), so damage that
        happened since it was opened is reported rather than copied.

        Raises:
            InvalidArgument: ``dest`` already holds a store.
            StoreCorrupted: the live store is damaged.
            StoreError: LMDB could not write the copy.
        """
        target = Path(dest)
        if (target / "data.mdb").exists():
            raise InvalidArgument(f"backup destination {target} already holds a store")
        target.mkdir(parents=True, exist_ok=True)
        self.flush()
        with self._guard.lmdb_errors("check before a backup"):
            self._guard.verify()  # LMDB's copy walks every page: never let it walk a damaged one
        try:
            self.env.copy(str(target), compact=True)
        except lmdb.Error as exc:
            self._guard.raise_for(f"backup to {target}", exc)
        try:
            write_marker(target, self.schema_version())
        except OSError as exc:
            raise StoreError(f"cannot write the marker of backup {target}: {exc}") from None
        return target

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def close(self) -> None:
        """Commit what is queued, sync, close the environment and release the lock."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._writer.stop()
        self.env.close()
        os.close(self._guard.data_fd)
        self._release_lock()
