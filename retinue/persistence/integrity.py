"""Checks a store folder before LMDB maps it, and the marker that says it held a store.

LMDB maps ``data.mdb`` into memory and trusts it: a file shorter than the
pages its trees use kills the process with SIGBUS on the first read past the
end. So, before LMDB reads a page, :func:`check_data_file` reads the two meta
pages from the file header (plain reads, no mapping) and takes the valid one
with the highest transaction id; :mod:`retinue.persistence.verify` then checks
every page that meta page's trees reach against the file's size (and its
structure). The file may legitimately end before the meta page's last page:
LMDB never writes a page freed in the transaction that allocated it.

A folder that once held a store carries a small marker, ``retinue.json``,
written when the store is created (and on every writer open of an older store
that lacks one). A folder whose marker survives but whose ``data.mdb`` is gone
or empty lost its data: it is refused rather than reopened as a new, empty
store, unless the caller asks for a new store.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from retinue.errors import StoreCorrupted

__all__ = [
    "DATA_FILE",
    "MARKER_FILE",
    "MetaPage",
    "StoreUsage",
    "check_data_file",
    "has_marker",
    "read_meta_pages",
    "rebase_meta_pages",
    "restore_advice",
    "store_usage",
    "write_marker",
]

DATA_FILE = "data.mdb"
MARKER_FILE = "retinue.json"

_MDB_MAGIC = 0xBEEFC0DE
_MDB_DATA_VERSION = 1
_P_META = 0x08
_S = struct.calcsize("P")  # pgno_t, txnid_t and size_t are all size_t wide
_PAGE_HEADER = _S + 8  # mp_pgno, mp_pad, mp_flags, mp_lower, mp_upper
_DB_SIZE = 8 + 5 * _S  # md_pad, md_flags, md_depth, then five size_t counters
_SIZE_T = "Q" if _S == 8 else "I"
# Offsets inside a meta page, from LMDB 0.9's MDB_page and MDB_meta layouts.
_FLAGS_AT = _S + 2
_MAGIC_AT = _PAGE_HEADER
_MAPSIZE_AT = _PAGE_HEADER + 8 + _S  # mm_mapsize follows mm_address
_PSIZE_AT = _PAGE_HEADER + 8 + 2 * _S  # mm_dbs[FREE_DBI].md_pad holds the page size
_FREE_PAGES_AT = _PSIZE_AT + 8  # its md_branch_pages, md_leaf_pages, md_overflow_pages
_LAST_PG_AT = _PAGE_HEADER + 8 + 2 * _S + 2 * _DB_SIZE
_TXNID_AT = _LAST_PG_AT + _S
_META_BYTES = _TXNID_AT + _S
_MIN_PAGE, _MAX_PAGE = 512, 65536


@dataclass(frozen=True)
class MetaPage:
    """The fields of one LMDB meta page that tell how large the file must be.

    ``map_size`` is the map size the last writer recorded (0 if unknown);
    ``free_tree_pages`` the pages of LMDB's own tree of free pages (its
    branch, leaf and overflow pages: in use, though they hold no data).
    """

    index: int
    page_size: int
    last_page: int
    txnid: int
    map_size: int = 0
    free_tree_pages: int = 0

    @property
    def required_bytes(self) -> int:
        """Bytes the file must hold: every page up to the last one in use."""
        return (self.last_page + 1) * self.page_size


def restore_advice(folder: Path) -> str:
    """Return the sentence that tells a user how to get a damaged store back."""
    return (
        f"Move {folder} aside and copy a backup in its place (backups are made with "
        "Runtime.backup(dest) or `retinue backup DEST --store STORE`), "
        "or open a new store elsewhere"
    )


def _parse_meta(raw: bytes, index: int) -> MetaPage | None:
    """Decode one meta page, or None if it is not a valid LMDB 0.9 meta page."""
    if len(raw) < _META_BYTES:
        return None
    (flags,) = struct.unpack_from("=H", raw, _FLAGS_AT)
    magic, version = struct.unpack_from("=II", raw, _MAGIC_AT)
    if not flags & _P_META or magic != _MDB_MAGIC or version != _MDB_DATA_VERSION:
        return None
    (page_size,) = struct.unpack_from("=I", raw, _PSIZE_AT)
    (last_page,) = struct.unpack_from("=" + _SIZE_T, raw, _LAST_PG_AT)
    (txnid,) = struct.unpack_from("=" + _SIZE_T, raw, _TXNID_AT)
    (map_size,) = struct.unpack_from("=" + _SIZE_T, raw, _MAPSIZE_AT)
    tree_pages = struct.unpack_from("=" + _SIZE_T * 3, raw, _FREE_PAGES_AT)
    if not _MIN_PAGE <= page_size <= _MAX_PAGE or page_size & (page_size - 1):
        return None
    if last_page < 1:  # pages 0 and 1 are the meta pages themselves
        return None
    return MetaPage(
        index=index,
        page_size=page_size,
        last_page=last_page,
        txnid=txnid,
        map_size=map_size,
        free_tree_pages=sum(tree_pages),
    )


def read_meta_pages(path: Path) -> list[MetaPage]:
    """Read both meta pages of ``path`` without mapping it; return the valid ones.

    Raises:
        OSError: the file cannot be read.
    """
    metas: list[MetaPage] = []
    with path.open("rb") as handle:
        first = _parse_meta(handle.read(_META_BYTES), 0)
        if first is not None:
            metas.append(first)
        # The second meta page starts one page in; without a valid first page, try
        # every page size LMDB may have used.
        sizes = [first.page_size] if first is not None else []
        sizes += [s for s in (4096, 8192, 16384, 65536, 2048, 1024, 512) if s not in sizes]
        for size in sizes:
            handle.seek(size)
            second = _parse_meta(handle.read(_META_BYTES), 1)
            if second is not None and second.page_size == size:
                metas.append(second)
                break
    return metas


def rebase_meta_pages(path: Path, txnid: int) -> None:
    """Make a fresh compacting copy continue the transaction ids of its source.

    LMDB's compacting copy restarts at transaction 1, but the lock file
    (``lock.mdb``) that processes still holding the store share records the
    source's last transaction, and picks the meta page by its parity. So both
    meta pages of the copy (at ``path``, not open in LMDB) are rewritten with
    its newest one's trees: transaction ``txnid`` in the slot of its parity,
    ``txnid - 1`` in the other. Then a reader that pairs the old lock file
    with the new data file reads the copy's newest meta page, and the writer's
    next transaction is ``txnid + 1`` whichever lock file it meets.

    Raises:
        OSError: the file cannot be read or written.
        ValueError: it has no valid meta page.
    """
    metas = read_meta_pages(path)
    if not metas:
        raise ValueError(f"{path} has no valid LMDB meta page")
    newest = max(metas, key=lambda m: m.txnid)
    page = newest.page_size
    with path.open("r+b") as handle:
        handle.seek(newest.index * page)
        body = handle.read(_META_BYTES)
        for tid in (max(0, txnid - 1), txnid):
            raw = bytearray(body)
            struct.pack_into("=" + _SIZE_T, raw, 0, tid & 1)  # the page's own number
            struct.pack_into("=" + _SIZE_T, raw, _TXNID_AT, tid)
            handle.seek((tid & 1) * page)
            handle.write(raw)
        handle.flush()
        os.fsync(handle.fileno())


@dataclass(frozen=True)
class StoreUsage:
    """How much of its LMDB map a store uses, read from its data file's meta pages.

    ``txnid`` is the last committed transaction (it changes with every
    commit); ``used_bytes`` the pages in use up to the last one;
    ``file_bytes`` the data file's size; ``map_bytes`` the map size the last
    writer recorded (0 if unknown).
    """

    txnid: int
    file_bytes: int
    used_bytes: int
    map_bytes: int


def store_usage(folder: Path) -> StoreUsage | None:
    """Read ``folder``'s meta pages (two small reads, no mapping); None if unreadable.

    Safe beside a writer in any process: a meta page read while it is being
    written may be skipped, never trusted for more than these figures.
    """
    path = folder / DATA_FILE
    try:
        metas = read_meta_pages(path)
        size = path.stat().st_size
    except OSError:
        return None
    if not metas:
        return None
    meta = max(metas, key=lambda m: m.txnid)
    return StoreUsage(meta.txnid, size, meta.required_bytes, meta.map_size)


def has_marker(folder: Path) -> bool:
    """Return True if ``folder`` carries the marker of a store that held data."""
    return (folder / MARKER_FILE).exists()


def write_marker(folder: Path, schema_version: int) -> None:
    """Write (atomically) the marker that says ``folder`` holds a retinue store.

    Raises:
        OSError: the marker could not be written.
    """
    target = folder / MARKER_FILE
    body = {"retinue_store": 1, "schema_version": schema_version, "written_at": time.time()}
    temporary = folder / (MARKER_FILE + ".tmp")
    with temporary.open("w") as handle:
        json.dump(body, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, target)
    with contextlib.suppress(OSError):  # make the rename itself durable where we can
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def check_data_file(folder: Path, *, create: bool) -> bool:
    """Check ``folder/data.mdb`` before LMDB maps it; return True if it holds a store.

    A missing or empty file is fine in a folder that never held a store (or
    with ``create=True``: the caller asked for a new store); False is returned
    and LMDB will create it. Whether every page in use lies inside the file is
    checked afterwards, by :func:`retinue.persistence.verify.verify_pages`.

    Raises:
        StoreCorrupted: the file is shorter than its meta pages, has no valid
            meta page, or is missing or empty in a folder whose marker says it
            held a store (and ``create`` is False).
    """
    path = folder / DATA_FILE
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        size = -1
    except OSError as exc:
        raise StoreCorrupted(f"cannot read {path}: {exc}", path=str(folder)) from None
    if size <= 0:
        if has_marker(folder) and not create:
            what = "is missing" if size < 0 else "is empty (0 bytes)"
            raise StoreCorrupted(
                f"store {folder} held data but its {DATA_FILE} {what}: opening it would "
                f"silently start an empty store. {restore_advice(folder)}; "
                "or pass create=True to start a new, empty store in this folder",
                path=str(folder),
            )
        return False
    try:
        metas = read_meta_pages(path)
    except OSError as exc:
        raise StoreCorrupted(f"cannot read {path}: {exc}", path=str(folder)) from None
    if not metas:
        raise StoreCorrupted(
            f"store {folder} is damaged: {DATA_FILE} ({size} bytes) has no valid LMDB "
            f"meta page. {restore_advice(folder)}",
            path=str(folder),
        )
    meta = max(metas, key=lambda m: m.txnid)
    if size < 2 * meta.page_size:
        raise StoreCorrupted(
            f"store {folder} is damaged: {DATA_FILE} is {size} bytes, shorter than its two "
            f"meta pages of {meta.page_size} bytes; the file was truncated. "
            f"{restore_advice(folder)}",
            path=str(folder),
        )
    return True
