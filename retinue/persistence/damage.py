"""Damage checks of an open store: a typed error instead of an abort, a crash or silence.

LMDB reads its file through a memory map and aborts (or the process dies of
SIGBUS) on a damaged or lost page. A :class:`Guard` stands between the store
and LMDB: one look at the data file's end (``lseek``) before every read
transaction and around every commit refuses a data file that shrank; the page
walk (:mod:`retinue.persistence.verify`) runs before LMDB walks pages a writer
elsewhere may have damaged; and every
LMDB error becomes a :class:`~retinue.errors.StoreCorrupted` (with advice on
restoring a backup) or a :class:`~retinue.errors.StoreError`, both with the path.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import lmdb

from retinue.errors import StoreCorrupted, StoreError
from retinue.persistence.integrity import DATA_FILE, MetaPage, read_meta_pages, restore_advice
from retinue.persistence.verify import PageDamage, verify_pages

__all__ = ["CORRUPTION", "NOT_DAMAGE", "Guard", "store_error"]

CORRUPTION = (
    lmdb.CorruptedError,
    lmdb.PageNotFoundError,
    lmdb.InvalidError,
    lmdb.VersionMismatchError,
    lmdb.PanicError,
    lmdb.BadChecksumError,
    lmdb.IncompatibleError,
)
"""LMDB errors that mean the files are damaged (rather than full, busy or misused)."""

NOT_DAMAGE = (
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
"""LMDB errors that say what went wrong without any sign of damage. Any other
error (MDB_BAD_TXN above all: LMDB met a damaged page inside the transaction,
marked it failed and lost the first error) makes the store check its pages."""


def store_error(folder: Path, action: str, exc: lmdb.Error) -> StoreError:
    """Return the typed error for an LMDB error met while doing ``action`` on ``folder``.

    Damage (a corrupted page, a bad meta page, an unknown format) becomes
    :class:`StoreCorrupted` with advice on restoring a backup; anything else a
    plain :class:`StoreError`. Both carry the folder in the message and ``.path``.
    """
    if isinstance(exc, CORRUPTION):
        return StoreCorrupted(
            f"store {folder} is damaged ({action}: {exc}). {restore_advice(folder)}",
            path=str(folder),
        )
    return StoreError(f"store {folder}: {action} failed: {exc}", path=str(folder))


class Guard:
    """The damage checks of one open LMDB environment (thread-safe reads)."""

    def __init__(self, folder: Path, env: Any, data_fd: int) -> None:
        """Guard ``env`` in ``folder``; ``data_fd`` is its data file, open read-only."""
        self.folder = folder
        self.env = env
        self.data_fd = data_fd
        # The largest size of the data file seen by check_size (read it, never set it: a
        # writer that finds the file at this size has nothing to check or record).
        self.seen_size = 0
        self.mapped: int | None = None  # the size of the environment's map (read on first use)

    @contextlib.contextmanager
    def lmdb_errors(self, action: str) -> Iterator[None]:
        """Turn any LMDB error raised inside into a typed :class:`StoreError`."""
        try:
            yield
        except lmdb.Error as exc:
            self.raise_for(action, exc)

    def raise_for(self, action: str, exc: lmdb.Error) -> NoReturn:
        """Raise the typed error for ``exc``, met while doing ``action``.

        An error LMDB does not name as damage, yet not one of the plain
        failures either (``MDB_BAD_TXN`` after LMDB met a damaged page and
        lost that error), makes the store check its pages: damage found is a
        :class:`StoreCorrupted` saying what is damaged.

        Raises:
            StoreCorrupted: LMDB reported damage, or the check found it.
            StoreError: any other LMDB failure.
        """
        if not isinstance(exc, CORRUPTION + NOT_DAMAGE):
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

    def check_size(self, action: str) -> int:
        """Refuse a data file that shrank since this store last looked at it; return its size.

        LMDB never shrinks ``data.mdb`` (it only grows it), so a smaller file
        means another process truncated it under this one; LMDB would read
        the lost pages through its map and the process would die of SIGBUS.
        One ``lseek``, before every read transaction and around every commit.
        It cannot close the window between the check and LMDB's read: a
        truncation landing there still kills the process.

        Threads check at once without a lock: a size smaller than the one
        recorded may only be older (another thread looked later, while the
        writer grew the file), so it is looked at again before it is refused;
        every recorded size was seen before that second look.

        Raises:
            StoreCorrupted: the file shrank.
        """
        size = self._size(action)
        seen = self.seen_size
        if size < seen:
            size = self._size(action)
            if size < seen:
                raise StoreCorrupted(
                    f"store {self.folder} is damaged ({action}): {DATA_FILE} shrank from "
                    f"{seen} to {size} bytes while the store was open; another "
                    f"process truncated it. {restore_advice(self.folder)}",
                    path=str(self.folder),
                )
        if size > self.seen_size:
            self.seen_size = size
        return size

    def _size(self, action: str) -> int:
        """Return the data file's size now: where its end is (one ``lseek``).

        Not an ``fstat``: its result carries every time of the file, each
        converted to seconds and nanoseconds (~5,000 instructions; a seek,
        ~100). The descriptor is this guard's own and nothing reads through
        it, so moving its offset disturbs nothing; two threads seeking at once
        both get the end.

        Raises:
            StoreError: the file cannot be looked at.
        """
        try:
            return os.lseek(self.data_fd, 0, os.SEEK_END)
        except OSError as exc:
            raise StoreError(
                f"store {self.folder}: cannot check {DATA_FILE} ({action}): {exc}",
                path=str(self.folder),
            ) from None

    def replaced(self) -> bool:
        """True if another file now stands at the data file's path (a reclaim swapped it in)."""
        try:
            there = os.stat(self.folder / DATA_FILE)
            mine = os.fstat(self.data_fd)
        except OSError:
            return False
        return (there.st_ino, there.st_dev) != (mine.st_ino, mine.st_dev)

    def read_txn(self) -> Any:
        """Begin a read transaction, adopting a map another process has grown.

        Raises:
            StoreCorrupted: the data file shrank since it was last looked at.
        """
        self.check_size("read")
        for _ in range(100):  # the writer may grow the map again between two tries
            try:
                return self.env.begin(buffers=False)
            except lmdb.MapResizedError:
                # Grown past the map between the store's look (outgrew_map) and this begin:
                # adopted here, which invalidates another thread's open transaction (a rare
                # window; the store adopts a grown map with its gate held exclusive first).
                self.adopt_map()
        return self.env.begin(buffers=False)

    def outgrew_map(self) -> bool:
        """True if the data file (another process's writer grew it) is larger than this
        environment's map: a read transaction would fail until the map is adopted.

        LMDB refuses a read transaction (``MDB_MAP_RESIZED``) only when the pages in use
        pass the map's end, and the file holds every page in use.

        Raises:
            StoreError: the file cannot be looked at.
        """
        mapped = self.mapped
        if mapped is None:
            mapped = self.mapped = self.env.info()["map_size"]
        return self._size("read") > mapped

    def adopt_map(self) -> None:
        """Adopt the map size the writer set (``set_mapsize(0)``).

        py-lmdb invalidates every open transaction of this environment as it does:
        call it with no other thread of the process inside one (the store's gate
        held exclusive).

        Raises:
            lmdb.Error: LMDB refused.
        """
        self.env.set_mapsize(0)  # 0 adopts the size the writer set
        self.mapped = self.env.info()["map_size"]

    def verify(self, txn: Any = None) -> None:
        """Check every B-tree page before LMDB walks one (it aborts on a damaged page).

        ``txn``: an open read transaction to check the pages of (a view's, before its
        first walk); its snapshot is checked when its meta page is still on disk. A
        read transaction of the check's own would have to adopt a map another process
        grew, which invalidates the open one.

        Raises:
            StoreCorrupted: a page is damaged.
            StoreError: no meta page could be pinned for the check.
        """
        damage = self._page_damage(txn)
        if damage is not None:
            raise StoreCorrupted(
                f"store {self.folder} is damaged: {damage}. {restore_advice(self.folder)}",
                path=str(self.folder),
            )

    def _page_damage(self, given: Any = None) -> str | None:
        """Walk every B-tree page; return what is damaged, or None if every page is sound.

        ``given``: an open read transaction whose snapshot is walked if its meta page is
        still on disk (else, or without one, a read transaction of the walk's own).

        The walk runs inside a read transaction, against the meta page of that
        transaction, so a writer in another process cannot recycle its pages.

        Raises:
            StoreError: no meta page could be pinned for the check.
            StoreCorrupted: the data file shrank (see :meth:`check_size`).
            lmdb.Error: LMDB refused the read transaction.
        """
        path = self.folder / DATA_FILE
        if given is not None:
            pinned: MetaPage | None = None
            try:
                txnid = given.id()
                pinned = next((m for m in read_meta_pages(path) if m.txnid == txnid), None)
                if pinned is not None:
                    verify_pages(path, pinned)
                    return None
            except (PageDamage, OSError) as exc:
                if pinned is not None and pinned in read_meta_pages(path):
                    return str(exc)  # (else the writer rewrote that meta page: look again)
        for _ in range(100):  # a busy writer may overwrite our meta page: take a newer one
            with self.read_txn() as txn:
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
