"""The LMDB store: one environment, named databases, one writer thread, group commit.

The supervisor encodes its transitions and hands them to the writer thread
with callbacks, a group at a time (:meth:`Store.submit_group`: the
transitions it served while its inbox had more); other writers use
:meth:`Store.submit`. The writer takes everything queued while the previous
commit was in flight and commits it in one LMDB write transaction (group
commit), then calls each callback in submission order (when more is queued, just
before the next commit, once its writes are in). A callback therefore
runs only once its transition is committed in the chosen durability mode:

- ``full``: every commit is fsynced before callbacks run; survives power loss.
- ``buffered``: every commit is written to the OS before callbacks run, so it
  survives a killed process; it is fsynced at least every second and on close,
  so an OS crash or power loss may lose up to the last second.

A full map is doubled and the transaction retried; the caller never sees it.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import lmdb
import msgspec

from retinue.errors import (
    InvalidArgument,
    StoreCorrupted,
    StoreError,
    StoreReadOnly,
    StoreVersionError,
)
from retinue.persistence.integrity import (
    DATA_FILE,
    MetaPage,
    check_data_file,
    has_marker,
    read_meta_pages,
    restore_advice,
    write_marker,
)
from retinue.persistence.lock import WriterLock
from retinue.persistence.migrations import upgrade
from retinue.persistence.verify import PageDamage, verify_pages
from retinue.protocol.records import SCHEMA_VERSION

__all__ = [
    "DATABASES",
    "OPTIONAL_DATABASES",
    "RESTORE_DATABASES",
    "Durability",
    "Snapshot",
    "Store",
    "StoreStats",
    "Write",
]

DATABASES = ("agents", "messages", "completions", "meta", "transcripts", "leases")
OPTIONAL_DATABASES = frozenset({"transcripts", "leases"})
"""Databases added after schema 1: a reader of an older store does without them."""
RESTORE_DATABASES = ("agents", "messages", "completions", "meta")
"""What :meth:`Store.snapshot` reads by default (transcripts are read one by one)."""
SCHEMA_KEY = b"schema_version"
DEFAULT_MAP_SIZE = 64 * 1024 * 1024
FLUSH_INTERVAL_S = 1.0
MAX_GROUP = 4096

# (database name, key, value); a value of None deletes the key.
Write = tuple[str, bytes, bytes | None]
Callback = Callable[[BaseException | None], None]
_T = TypeVar("_T")


class Durability(enum.StrEnum):
    """How far a commit has gone before the caller is answered."""

    FULL = "full"
    BUFFERED = "buffered"


@dataclass
class StoreStats:
    """Counters of the writer thread, for benchmarks and diagnostics."""

    commits: int = 0
    transitions: int = 0
    writes: int = 0
    map_growths: int = 0
    syncs: int = 0


@dataclass
class Snapshot:
    """Every record of every database, read in one read transaction."""

    records: dict[str, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    migrated_from: list[int] = field(default_factory=list)


class _Item:
    __slots__ = ("callback", "writes")

    def __init__(self, writes: Sequence[Write], callback: Callback) -> None:
        self.writes = writes
        self.callback = callback


_STOP = object()
_FLUSH = object()
log = logging.getLogger("retinue.store")

# LMDB errors that mean the files are damaged (rather than full, busy or misused).
_CORRUPTION = (
    lmdb.CorruptedError,
    lmdb.PageNotFoundError,
    lmdb.InvalidError,
    lmdb.VersionMismatchError,
    lmdb.PanicError,
    lmdb.BadChecksumError,
    lmdb.IncompatibleError,
)


# LMDB errors that say what went wrong without any sign of damage. Any other
# error (MDB_BAD_TXN above all: LMDB met a damaged page inside the transaction,
# marked it failed and lost the first error) makes the store check its pages.
_NOT_DAMAGE = (
    lmdb.MapFullError,
    lmdb.MapResizedError,
    lmdb.ReadersFullError,
    lmdb.ReadonlyError,
    lmdb.NotFoundError,
    lmdb.KeyExistsError,
    lmdb.DbsFullError,
    lmdb.TlsFullError,
    lmdb.TxnFullError,
    lmdb.CursorFullError,
    lmdb.LockError,
    lmdb.InvalidParameterError,
    lmdb.BadRslotError,
)


def store_error(folder: Path, action: str, exc: lmdb.Error) -> StoreError:
    """Return the typed error for an LMDB error met while doing ``action`` on ``folder``.

    Damage (a corrupted page, a bad meta page, an unknown format) becomes
    :class:`StoreCorrupted` with advice on restoring a backup; anything else a
    plain :class:`StoreError`. Both carry the folder in the message and ``.path``.
    """
    if isinstance(exc, _CORRUPTION):
        return StoreCorrupted(
            f"store {folder} is damaged ({action}: {exc}). {restore_advice(folder)}",
            path=str(folder),
        )
    return StoreError(f"store {folder}: {action} failed: {exc}", path=str(folder))


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
        self._lock: WriterLock | None = None
        self._closed = False
        self._failed: BaseException | None = None
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        # Committed groups whose callbacks wait for the next commit's puts (writer only).
        self._unanswered: list[tuple[list[_Item], BaseException | None]] = []
        self._thread: threading.Thread | None = None
        if readonly:
            if not (self.folder / DATA_FILE).exists() and not has_marker(self.folder):
                raise StoreError(f"no retinue store at {self.folder}", path=str(self.folder))
            check_data_file(self.folder, create=False)
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._lock = WriterLock(self.folder)
            try:
                check_data_file(self.folder, create=create)
            except BaseException:
                self._release_lock()
                raise
        for attempt in range(100):
            try:
                self.env = lmdb.open(
                    str(self.folder),
                    map_size=map_size,
                    max_dbs=len(DATABASES) + 2,
                    max_readers=max_readers,
                    readonly=readonly,
                    sync=self.durability is Durability.FULL,
                    metasync=self.durability is Durability.FULL,
                    readahead=False,
                )
                break
            except lmdb.MapResizedError as exc:
                # A writer elsewhere grew the map between LMDB reading its size
                # and opening the first transaction: open again, at the new size.
                if attempt == 99:
                    self._release_lock()
                    raise store_error(self.folder, "open", exc) from None
            except lmdb.Error as exc:
                self._release_lock()
                raise store_error(self.folder, "open", exc) from None
        try:
            # The data file LMDB mapped, to notice it shrinking under us (see _check_size).
            self._data_fd = os.open(self.folder / DATA_FILE, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            self.env.close()
            self._release_lock()
            raise StoreError(
                f"cannot read {self.folder / DATA_FILE}: {exc}", path=str(self.folder)
            ) from None
        self._seen_size = 0
        try:
            self._check_size("open")
            with self._lmdb_errors("open"):
                self.env.reader_check()
                self._verify()
                self._dbs = self._grow_on_full(self._open_databases)
                if readonly:
                    self.migrated_from: list[int] = []
                else:
                    self.migrated_from = self._grow_on_full(self._check_schema)
            if not readonly and not has_marker(self.folder):
                try:
                    write_marker(self.folder, SCHEMA_VERSION)
                except OSError as exc:
                    raise StoreError(
                        f"cannot write the marker of store {self.folder}: {exc}",
                        path=str(self.folder),
                    ) from None
        except BaseException:
            self.env.close()
            os.close(self._data_fd)
            self._release_lock()
            raise
        if not readonly:
            self._thread = threading.Thread(
                target=self._run, name=f"retinue-store-writer:{self.folder.name}", daemon=True
            )
            self._thread.start()

    # -- opening ---------------------------------------------------------

    @contextlib.contextmanager
    def _lmdb_errors(self, action: str) -> Any:
        """Turn any LMDB error raised inside into a typed :class:`StoreError`."""
        try:
            yield
        except lmdb.Error as exc:
            self._raise(action, exc)

    def _raise(self, action: str, exc: lmdb.Error) -> NoReturn:
        """Raise the typed error for ``exc``, met while doing ``action``.

        An error LMDB does not name as damage, yet not one of the plain
        failures either (``MDB_BAD_TXN`` after LMDB met a damaged page and
        lost that error), makes the store check its pages: damage found is a
        :class:`StoreCorrupted` saying what is damaged.

        Raises:
            StoreCorrupted: LMDB reported damage, or the check found it.
            StoreError: any other LMDB failure.
        """
        if not isinstance(exc, _CORRUPTION + _NOT_DAMAGE):
            damage = self._damage()
            if damage is not None:
                raise StoreCorrupted(
                    f"store {self.folder} is damaged ({action}: {exc}; the page check "
                    f"found: {damage}). "
                    f"{restore_advice(self.folder)}",
                    path=str(self.folder),
                ) from None
        raise store_error(self.folder, action, exc) from None

    def _damage(self) -> str | None:
        """Return what the page check finds damaged now, or None if it finds nothing.

        A check that cannot run (LMDB refuses even a read) finds nothing.
        """
        try:
            return self._page_damage()
        except (StoreError, lmdb.Error):
            return None

    def _check_size(self, action: str) -> None:
        """Refuse a data file that shrank since this store last looked at it.

        LMDB never shrinks ``data.mdb`` (it only grows it), so a smaller file
        means another process truncated it under this one; LMDB would read
        the lost pages through its map and the process would die of SIGBUS.
        One ``fstat``, before every read transaction and around every commit.
        It cannot close the window between the check and LMDB's read: a
        truncation landing there still kills the process.

        Raises:
            StoreCorrupted: the file shrank.
        """
        try:
            size = os.fstat(self._data_fd).st_size
        except OSError as exc:
            raise StoreError(
                f"store {self.folder}: cannot check {DATA_FILE} ({action}): {exc}",
                path=str(self.folder),
            ) from None
        if size < self._seen_size:
            raise StoreCorrupted(
                f"store {self.folder} is damaged ({action}): {DATA_FILE} shrank from "
                f"{self._seen_size} to {size} bytes while the store was open; another "
                f"process truncated it. {restore_advice(self.folder)}",
                path=str(self.folder),
            )
        self._seen_size = size

    def _verify(self) -> None:
        """Check every B-tree page before LMDB walks one (it aborts on a damaged page).

        Raises:
            StoreCorrupted: a page is damaged.
            StoreError: no meta page could be pinned for the check.
        """
        damage = self._page_damage()
        if damage is not None:
            raise StoreCorrupted(
                f"store {self.folder} is damaged: {damage}. {restore_advice(self.folder)}",
                path=str(self.folder),
            )

    def _page_damage(self) -> str | None:
        """Walk every B-tree page; return what is damaged, or None if every page is sound.

        The walk runs inside a read transaction, against the meta page of that
        transaction, so a writer in another process cannot recycle its pages.

        Raises:
            StoreError: no meta page could be pinned for the check.
            StoreCorrupted: the data file shrank (see :meth:`_check_size`).
            lmdb.Error: LMDB refused the read transaction.
        """
        path = self.folder / DATA_FILE
        for _ in range(100):  # a busy writer may overwrite our meta page: take a newer one
            with self._read_txn() as txn:
                txnid = txn.id()
                meta: MetaPage | None = None
                try:
                    meta = next((m for m in read_meta_pages(path) if m.txnid == txnid), None)
                    if meta is None:
                        continue
                    verify_pages(path, meta)
                except (PageDamage, OSError) as exc:
                    if meta is not None and meta not in read_meta_pages(path):
                        continue  # the writer rewrote that meta page while we read it
                    return str(exc)
                return None
        raise StoreError(
            f"store {self.folder}: could not pin a meta page to check", path=str(self.folder)
        )

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
            raw = txn.get(SCHEMA_KEY, db=self._dbs["meta"])
            if raw is None:
                has_data = any(
                    txn.stat(self._dbs[name])["entries"] for name in ("agents", "messages")
                )
                found = 0 if has_data else SCHEMA_VERSION
            else:
                found = msgspec.msgpack.decode(raw, type=int)
            done = upgrade(txn, self._dbs, found, SCHEMA_VERSION)
            txn.put(SCHEMA_KEY, msgspec.msgpack.encode(SCHEMA_VERSION), db=self._dbs["meta"])
        return done

    def schema_version(self) -> int:
        """Return the schema version stamped in the store (0 if none).

        Raises:
            StoreCorrupted, StoreError: LMDB could not read it.
        """
        with self._lmdb_errors("read the schema version"), self._read_txn() as txn:
            raw = txn.get(SCHEMA_KEY, db=self._dbs["meta"])
        return 0 if raw is None else msgspec.msgpack.decode(raw, type=int)

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
            with self._lmdb_errors("check before a snapshot"):
                self._verify()
        with self._lmdb_errors("read a snapshot"), self._read_txn() as txn:
            for name in databases:
                with txn.cursor(db=self._dbs[name]) as cur:
                    snap.records[name] = list(cur.iternext(keys=True, values=True))
        return snap

    def get(self, database: str, key: bytes) -> bytes | None:
        """Return one committed value, or None (also for a database the store lacks).

        Raises:
            StoreCorrupted: a page on the way is damaged.
            StoreError: LMDB refused the read for another reason.
        """
        if database not in self._dbs:
            return None
        with self._lmdb_errors(f"read {database}"), self._read_txn() as txn:
            value: bytes | None = txn.get(key, db=self._dbs[database])
        return value

    def _read_txn(self) -> Any:
        """Begin a read transaction, adopting a map another process has grown.

        Raises:
            StoreCorrupted: the data file shrank since it was last looked at.
        """
        self._check_size("read")
        for _ in range(100):  # the writer may grow the map again between two tries
            try:
                return self.env.begin(buffers=False)
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)  # 0 adopts the size the writer set
        return self.env.begin(buffers=False)

    # -- writing ---------------------------------------------------------

    def submit(self, writes: Sequence[Write], callback: Callback) -> None:
        """Queue ``writes`` for the next group commit; call ``callback`` once committed.

        ``callback(None)`` runs on the writer thread after the commit is
        durable; ``callback(error)`` if it failed. Transitions are committed
        in submission order, so an answered transition implies all earlier ones.

        Raises:
            StoreReadOnly: the store is read-only.
            StoreError: the store is closed or a previous commit failed for good.
        """
        self._check_writable()
        self._queue.put(_Item(writes, callback))

    def _check_writable(self) -> None:
        """Raise unless transitions may be committed.

        Raises:
            StoreReadOnly: the store is read-only.
            StoreError: the store is closed or a previous commit failed for good.
        """
        if self.readonly:
            raise StoreReadOnly(f"store {self.folder} is open read-only")
        if self._closed:
            raise StoreError(f"store {self.folder} is closed")
        if self._failed is not None:
            failure = StoreCorrupted if isinstance(self._failed, StoreCorrupted) else StoreError
            raise failure(f"store {self.folder} failed: {self._failed}", path=str(self.folder))

    def submit_group(self, group: Sequence[tuple[Sequence[Write], Callback]]) -> None:
        """Queue the transitions of ``group`` for the writer thread, as :meth:`submit` each.

        One queue hand-off for the whole group; the writer commits it (with
        whatever else is queued) and calls the callbacks in order, on its
        thread, while the caller goes on serving.

        Raises:
            StoreReadOnly: the store is read-only.
            StoreError: the store is closed or a previous commit failed for good.
        """
        self._check_writable()
        self._queue.put([_Item(writes, callback) for writes, callback in group])

    def write_now(self, writes: Sequence[Write]) -> None:
        """Commit ``writes`` and wait for it (convenience for setup and tests).

        Raises:
            StoreError: the commit failed.
        """
        done = threading.Event()
        result: list[BaseException | None] = []

        def callback(error: BaseException | None) -> None:
            result.append(error)
            done.set()

        self.submit(writes, callback)
        done.wait()
        error = result[0]
        if isinstance(error, StoreError):  # already typed, with the path
            raise error
        if error is not None:
            raise StoreError(f"commit failed: {error}", path=str(self.folder)) from error

    def flush(self) -> None:
        """Wait until everything submitted so far is committed and synced to disk."""
        if self.readonly or self._closed:
            return
        done = threading.Event()
        self._queue.put((_FLUSH, done))
        done.wait()

    def _run(self) -> None:
        last_sync = time.monotonic()
        dirty = False
        while True:
            timeout = None
            if dirty:
                timeout = max(0.0, FLUSH_INTERVAL_S - (time.monotonic() - last_sync))
            try:
                first = self._queue.get(timeout=timeout)
            except queue.Empty:
                self._sync()
                dirty, last_sync = False, time.monotonic()
                continue
            group: list[_Item] = []
            controls: list[object] = []
            item: object = first
            while True:
                if isinstance(item, _Item):
                    group.append(item)
                elif isinstance(item, list):  # submit_group
                    group.extend(item)
                else:
                    controls.append(item)
                    break
                if len(group) >= self.max_group:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if group:
                self._commit_group(group)
                dirty = dirty or self.durability is Durability.BUFFERED
            if controls or self._queue.empty():
                self._answer()
            for control in controls:
                if control is _STOP:
                    self._sync()
                    return
                if isinstance(control, tuple) and control[0] is _FLUSH:
                    self._sync()
                    dirty, last_sync = False, time.monotonic()
                    control[1].set()

    def _sync(self) -> None:
        with contextlib.suppress(lmdb.Error):
            self.env.sync(True)
            self.stats.syncs += 1

    def _answer(self) -> None:
        """Call the callbacks of the committed, unanswered groups, in order."""
        unanswered, self._unanswered = self._unanswered, []
        for group, error in unanswered:
            for item in group:
                try:
                    item.callback(error)
                except Exception:  # a callback must never kill the writer
                    log.exception("a commit callback failed")

    def _commit_group(self, group: list[_Item]) -> None:
        """Commit ``group``; leave its callbacks to the next :meth:`_answer`.

        The groups committed before and not answered yet (more was queued
        behind them) are answered once this group's writes are in its
        transaction, just before it commits: the threads their answers wake
        then run while this commit syncs, instead of taking the GIL from the
        writer at each of its puts (a put releases the GIL).
        """
        if len(group) == 1:
            writes = list(group[0].writes)
        else:  # a key written by several transitions of the group is written once, as it ends
            last = {(name, key): value for item in group for name, key, value in item.writes}
            writes = [(name, key, value) for (name, key), value in last.items()]
        # Transitions queued behind a failed one were built on its state: refuse them too.
        error: BaseException | None = self._failed
        if writes and error is None:
            try:
                self._commit(writes)
            except Exception as exc:
                error = exc
                self._failed = exc
        self._answer()
        self.stats.transitions += len(group)
        self._unanswered.append((group, error))

    def _commit(self, writes: list[Write]) -> None:
        """Commit ``writes`` in one write transaction, growing a full map.

        Once every write is in the transaction, before the commit, the
        groups committed earlier are answered (see :meth:`_commit_group`).

        Raises:
            StoreCorrupted: the data file shrank, or LMDB met (or the page
                check then found) damage.
            StoreError: LMDB refused the commit for another reason.
        """
        dbs = self._dbs
        self._check_size("commit")
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    for name, key, value in writes:
                        if value is None:
                            txn.delete(key, db=dbs[name])
                        else:
                            txn.put(key, value, db=dbs[name])
                    self._answer()
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)
                self.stats.map_growths += 1
                continue
            except lmdb.Error as exc:
                self._raise("commit", exc)
            self.stats.commits += 1
            self.stats.writes += len(writes)
            self._check_size("commit")  # the size this commit grew the file to
            return

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
        with self._lmdb_errors("check before a backup"):
            self._verify()  # LMDB's copy walks every page: never let it walk a damaged one
        try:
            self.env.copy(str(target), compact=True)
        except lmdb.Error as exc:
            self._raise(f"backup to {target}", exc)
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
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
        self.env.close()
        os.close(self._data_fd)
        self._release_lock()
