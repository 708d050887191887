"""The LMDB store: one environment under a folder, named databases, opened to write or read.

A writer's commits go through its one writer thread (:mod:`retinue.persistence.writer`:
group commit, the durability modes); reads take consistent snapshots; every
LMDB failure is a typed error, and damage is refused before LMDB meets it
(:mod:`retinue.persistence.damage`). A second writer of the same store gets
``StoreLocked`` (:mod:`retinue.persistence.lock`).

A writer can reclaim the file's free pages in place (:meth:`Store.reclaim`,
:mod:`retinue.persistence.copies`): its environment is closed and opened again
on a compacted file, under the gate every read holds
(:mod:`retinue.persistence.gate`). A reader notices before its next read that
another file stands at the path and opens it in turn.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from retinue.errors import InvalidArgument, StoreError, StoreReadOnly, StoreVersionError
from retinue.persistence.commits import (
    FLUSH_INTERVAL_S,
    MAX_GROUP,
    Callback,
    CommitTimer,
    Durability,
    Queued,
    StoreStats,
    Submission,
    Write,
)
from retinue.persistence.copies import backup_to, compacting_copy, discard_half_done, swap_in
from retinue.persistence.gate import Gate
from retinue.persistence.integrity import has_marker, write_marker
from retinue.persistence.migrations import migrate
from retinue.persistence.opening import (
    claim_folder,
    grow_on_full,
    guard_file,
    open_databases,
    open_env,
)
from retinue.persistence.reads import RESTORE_DATABASES, Snapshot, StoreReads
from retinue.persistence.space import StoreSpace, map_watch
from retinue.persistence.writer import Writer
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

DATABASES = (
    "agents",
    "messages",
    "completions",
    "meta",
    "transcripts",
    "leases",
    "approvals",
    "generations",
    "undelivered",
    "open_index",
)
OPTIONAL_DATABASES = frozenset(
    {"transcripts", "leases", "approvals", "generations", "undelivered", "open_index"}
)
"""Databases added after schema 1: a reader of an older store does without them."""
DEFAULT_MAP_SIZE = 64 * 1024 * 1024


class Store(StoreReads):
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
        self._closed = False  # no more commits
        self._writer: Writer | None = None
        self._gate = Gate()
        self._max_readers = max_readers
        self._lock = claim_folder(self.folder, readonly=readonly, create=create)
        try:
            if not readonly:
                discard_half_done(self.folder)  # a reclaim cut before its swap
            self._attach(map_size)
        except BaseException:
            self._release_lock()
            raise
        try:
            self._check_contents()
        except BaseException:
            self._detach()
            self._release_lock()
            raise
        if not readonly:
            self._writer = Writer(
                self._guard,
                self._dbs,
                durability=self.durability,
                max_group=self.max_group,
                stats=self.stats,
                gate=self._gate,
            )

    # -- opening, step by step -----------------------------------------------------

    def _attach(self, map_size: int) -> None:
        """Open the environment and guard its data file (the databases: :meth:`_check_contents`).

        Raises:
            StoreCorrupted, StoreError: LMDB refused it, or the file cannot be read.
        """
        self.env = open_env(
            self.folder,
            map_size=map_size,
            max_dbs=len(DATABASES) + 2,
            max_readers=self._max_readers,
            readonly=self.readonly,
            sync=self.durability is Durability.FULL,
        )
        self._guard = guard_file(self.folder, self.env)
        self._detached = False

    def _detach(self) -> None:
        """Close the environment and the guard's data file (the gate is held exclusive)."""
        self._detached = True
        self.env.close()
        os.close(self._guard.data_fd)

    def _open_databases(self) -> dict[str, Any]:
        """Open the named databases, growing a map too small for a writer to create them."""
        create = not self.readonly
        return grow_on_full(
            self.env,
            lambda: open_databases(
                self.env, self.folder, DATABASES, OPTIONAL_DATABASES, create=create
            ),
            self._grown,
        )

    def _grown(self) -> None:
        self.stats.map_growths += 1

    def _check_contents(self) -> None:
        """Check the pages, open the databases and (a writer) migrate and mark the store.

        Raises:
            StoreCorrupted, StoreError, StoreVersionError: as :meth:`__init__` says.
        """
        self._guard.check_size("open")
        with self._guard.lmdb_errors("open"):
            self.env.reader_check()
            self._guard.verify()
            self._dbs = self._open_databases()
            if not self.readonly:
                self.migrated_from = grow_on_full(self.env, self._check_schema, self._grown)
        if not self.readonly and not has_marker(self.folder):
            try:
                write_marker(self.folder, SCHEMA_VERSION)
            except OSError as exc:
                raise StoreError(
                    f"cannot write the marker of store {self.folder}: {exc}",
                    path=str(self.folder),
                ) from None

    def _reattach(self, swap: Callable[[], None] | None = None) -> None:
        """Open the file at the path again, after ``swap`` (the gate held exclusive).

        A reader calls it once a reclaim swapped another file in; the reclaim
        itself swaps between the close and the open (if its swap fails, the
        old file is opened again).

        Raises:
            StoreCorrupted, StoreError: the swap failed, or the file cannot be opened.
        """
        map_size = int(self.env.info()["map_size"])
        self._detach()
        try:
            if swap is not None:
                swap()
        finally:
            self._attach(map_size)
            with self._guard.lmdb_errors("open the reclaimed file"):
                self._dbs.clear()  # in place: the writer holds the same dict
                self._dbs.update(self._open_databases())

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Hold the gate shared for a read; a reader first follows a file swapped in, and
        adopts a map another process grew (py-lmdb invalidates every open transaction of
        the environment as it adopts one: done with the gate exclusive, no read open)."""
        if self.readonly and not self._gate.held():
            if self._guard.replaced():
                with self._gate.exclusive():
                    if self._guard.replaced() and not self._detached:
                        self._reattach()
            if self._guard.outgrew_map():
                with self._gate.exclusive(), self._guard.lmdb_errors("adopt the grown map"):
                    if not self._detached and self._guard.outgrew_map():
                        self._guard.adopt_map()
        with self._gate.shared():
            if self._detached:
                raise StoreError(f"store {self.folder} is closed", path=str(self.folder))
            yield

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

    def _check_schema(self) -> list[int]:
        with self.env.begin(write=True) as txn:
            return migrate(txn, self._dbs)

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
        writer = self._writer
        if writer.failed is not None:  # a commit failed for good (nearly never: no call)
            refusal = writer.refusal()
            if refusal is not None:
                raise refusal
        return writer

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

    def submit_queued(self, group: list[Queued]) -> None:
        """Queue the transitions of ``group`` as they are, in one hand-off (see
        :meth:`Writer.submit_queued`): each one's ``committed`` once it is committed.

        Raises:
            StoreReadOnly, StoreError: as :meth:`_writable`.
        """
        writer = self._writer  # as _writable, inline when it would pass (nearly always)
        if writer is None or self.readonly or self._closed or writer.failed is not None:
            writer = self._writable()  # raises, but for a failed writer with no refusal
        writer.submit_queued(group)

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

    def watch_map(self, share: float, warn: Callable[[StoreSpace], None]) -> None:
        """Call ``warn`` once the file's high-water mark passes ``share`` of the map.

        On the writer thread, once per map size (see :func:`map_watch`). A
        read-only store commits nothing: nothing is watched.
        """
        if self._writer is not None:
            self._writer.on_grow = map_watch(
                lambda: self.env, self.space, share, warn, lambda: self._guard.seen_size
            )

    def flush(self) -> None:
        """Wait until everything submitted so far is committed and synced to disk."""
        if self._writer is not None and not self._closed:
            self._writer.flush()

    # -- copies, reclaim and close ------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether the store has been closed (by the runtime's close): it serves nothing more."""
        return self._closed or self._detached

    def backup(self, dest: str | os.PathLike[str]) -> Path:
        """Write a compacted, consistent copy of the store into ``dest`` (created; not a store).

        The live store's pages are checked first (as on open), so damage that
        happened since it was opened is reported rather than copied.

        Raises:
            InvalidArgument: ``dest`` already holds a store.
            StoreCorrupted: the live store is damaged.
            StoreError: LMDB could not write the copy.
        """
        self.flush()
        version = self.schema_version()
        with self._reading():
            return backup_to(self.env, self._guard, Path(dest), version)

    def reclaim(self) -> tuple[int, int]:
        """Swap a compacting copy in place of the data file; return its bytes before and after.

        Runs on the writer thread at a quiet point (see
        :mod:`retinue.persistence.copies`): what is submitted meanwhile waits,
        and is committed to the compacted file. Crash-safe at every step.

        Raises:
            StoreReadOnly: the store is read-only.
            StoreCorrupted: the live store is damaged (nothing was changed).
            StoreError: the copy failed (nothing was changed), or the store is closed.
        """
        return self._writable().at_quiet_point(self._reclaim_now)

    def _reclaim_now(self) -> tuple[int, int]:
        """The reclaim itself, on the writer thread with nothing in flight."""
        before = self._guard.check_size("reclaim")
        with self._reading(), self._guard.lmdb_errors("reclaim"):
            self._guard.verify()  # never copy a damaged page
            copy = compacting_copy(self.env, self.folder, int(self.env.info()["last_txnid"]))
        writer = self._writable()
        with self._gate.exclusive():
            try:
                self._reattach(lambda: swap_in(self.folder, copy))
            except BaseException as exc:
                if self._detached:  # no environment to commit to: refuse what follows
                    writer.failed = exc
                    raise
                writer.rebind(self._guard)  # the old file, open again
                raise
            writer.rebind(self._guard)
        return before, self._guard.check_size("reclaim")

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
        with self._gate.exclusive():  # once the reads in progress are done
            self._detach()
        self._release_lock()
