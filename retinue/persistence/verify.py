"""A structural check of an LMDB file's B-trees, read without LMDB, before LMDB walks them.

LMDB trusts its pages: a zeroed or overwritten page makes it fail an internal
assertion (``abort()``, SIGABRT) or read past the end of the file (SIGBUS)
instead of returning an error. :func:`verify_pages` walks every B-tree
reachable from one meta page (the free-page tree and the main tree, and every
named database the main tree lists) and checks each page the way LMDB will
use it: it lies inside the file (a page past the end means the file was
truncated), its header names its own page number, a page at each level has
the kind the tree's depth says (branch above, leaf at the bottom), every node
lies inside its page, every child and overflow page lies inside the pages
the meta page records, and no page is reached twice.

It reads the file through its own read-only map, within the size already
checked against the meta page, and is meant to run inside an LMDB read
transaction pinned to that meta page, so a concurrent writer cannot recycle
the pages it walks.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from retinue.persistence.integrity import MetaPage

__all__ = ["PageDamage", "verify_pages"]

_S = struct.calcsize("P")
_PGNO = "=Q" if _S == 8 else "=I"
_HDR = _S + 8  # PAGEHDRSZ
_P_BRANCH, _P_LEAF, _P_OVERFLOW = 0x01, 0x02, 0x04
_F_BIGDATA, _F_SUBDATA = 0x01, 0x02
_NODE = 8  # mn_lo, mn_hi, mn_flags, mn_ksize
_DB_DEPTH_AT = 6  # md_depth inside an MDB_db record
_DB_ROOT_AT = 8 + 4 * _S  # md_root inside an MDB_db record
_DB_SIZE = 8 + 5 * _S
_DBS_AT = _HDR + 8 + 2 * _S  # mm_dbs inside a meta page
_P_INVALID = (1 << (8 * _S)) - 1
_U16 = struct.Struct("=HHHH")


class PageDamage(Exception):
    """A page is not what the tree that reaches it says it must be.

    ``beyond`` is True when the page lies past the pages that can be read.
    """

    def __init__(self, message: str, *, beyond: bool = False) -> None:
        self.beyond = beyond
        super().__init__(message)


def _db_record(raw: bytes | memoryview, at: int) -> tuple[int, int]:
    """Return (depth, root page) of the MDB_db record at ``at``."""
    (depth,) = struct.unpack_from("=H", raw, at + _DB_DEPTH_AT)
    (root,) = struct.unpack_from(_PGNO, raw, at + _DB_ROOT_AT)
    return depth, root


def verify_pages(path: Path, meta: MetaPage) -> int:
    """Walk every B-tree reachable from ``meta``; return the number of pages checked.

    Raises:
        PageDamage: a page is damaged (the message says which and how).
        OSError: the file cannot be read.
    """
    page = meta.page_size
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        length = min(size, meta.required_bytes)
        # Pages past the end of the file cannot be read: treat them as out of range.
        last = min(meta.last_page, length // page - 1)
        if last < 1:
            raise PageDamage(f"the file is {size} bytes, shorter than its meta pages; truncated")
        with mmap.mmap(handle.fileno(), length, access=mmap.ACCESS_READ) as view:
            raw = memoryview(view)
            try:
                meta_at = meta.index * page
                trees = [
                    ("free pages", *_db_record(raw, meta_at + _DBS_AT)),
                    ("main", *_db_record(raw, meta_at + _DBS_AT + _DB_SIZE)),
                ]
                seen: set[int] = set()
                while trees:
                    name, depth, root = trees.pop()
                    trees.extend(_walk(raw, page, last, name, depth, root, seen))
                return len(seen)
            except PageDamage as exc:
                if last < meta.last_page and exc.beyond:
                    raise PageDamage(
                        f"{exc}: the file is {size} bytes, but the trees use pages up to "
                        f"{meta.last_page}; the file was truncated"
                    ) from None
                raise
            finally:
                raw.release()


def _walk(
    raw: memoryview,
    page: int,
    last: int,
    name: str,
    depth: int,
    root: int,
    seen: set[int],
) -> list[tuple[str, int, int]]:
    """Check one B-tree; return the named databases its leaves list (main tree only)."""
    if root == _P_INVALID:
        return []
    if depth < 1 or depth > 64:
        raise PageDamage(f"{name} tree: impossible depth {depth}")
    found: list[tuple[str, int, int]] = []
    stack = [(root, 1)]
    while stack:
        pgno, level = stack.pop()
        if not 2 <= pgno <= last:
            raise PageDamage(
                f"{name} tree: page {pgno} is outside the file's pages 2..{last}",
                beyond=pgno > last,
            )
        if pgno in seen:
            raise PageDamage(f"{name} tree: page {pgno} is reached twice")
        seen.add(pgno)
        base = pgno * page
        (own,) = struct.unpack_from(_PGNO, raw, base)
        _, flags, lower, upper = _U16.unpack_from(raw, base + _S)
        if own != pgno:
            raise PageDamage(f"{name} tree: page {pgno} says it is page {own}")
        want = _P_LEAF if level == depth else _P_BRANCH
        if flags & (_P_BRANCH | _P_LEAF | _P_OVERFLOW) != want:
            kind = "leaf" if want == _P_LEAF else "branch"
            raise PageDamage(f"{name} tree: page {pgno} should be a {kind}, flags are {flags:#x}")
        if not (_HDR <= lower <= upper <= page) or (lower - _HDR) % 2:
            raise PageDamage(f"{name} tree: page {pgno} has bounds {lower}..{upper}")
        count = (lower - _HDR) // 2
        if want == _P_BRANCH and count == 0:
            raise PageDamage(f"{name} tree: branch page {pgno} has no children")
        offsets = struct.unpack_from(f"={count}H", raw, base + _HDR)
        for offset in offsets:
            if not upper <= offset <= page - _NODE:
                raise PageDamage(f"{name} tree: page {pgno} has a node at {offset}")
            lo, hi, node_flags, ksize = _U16.unpack_from(raw, base + offset)
            end = offset + _NODE + ksize
            if want == _P_BRANCH:
                if end > page:
                    raise PageDamage(f"{name} tree: page {pgno} has a key past its end")
                stack.append((lo | hi << 16 | node_flags << 32, level + 1))
                continue
            size = lo | hi << 16
            if node_flags & _F_BIGDATA:
                if end + _S > page:
                    raise PageDamage(f"{name} tree: page {pgno} has a node past its end")
                (first,) = struct.unpack_from(_PGNO, raw, base + end)
                _check_overflow(raw, page, last, name, first, size, seen)
                continue
            if end + size > page:
                raise PageDamage(f"{name} tree: page {pgno} has a value past its end")
            if node_flags & _F_SUBDATA and name == "main":
                if size != _DB_SIZE:
                    raise PageDamage(f"main tree: page {pgno} has a bad database record")
                key = bytes(raw[base + offset + _NODE : base + end]).decode("utf-8", "replace")
                found.append((key, *_db_record(raw, base + end)))
    return found


def _check_overflow(
    raw: memoryview, page: int, last: int, name: str, first: int, size: int, seen: set[int]
) -> None:
    """Check a value stored on overflow pages starting at ``first``."""
    if not 2 <= first <= last:
        raise PageDamage(
            f"{name} tree: overflow page {first} is outside the file's pages", beyond=first > last
        )
    if first in seen:
        raise PageDamage(f"{name} tree: overflow page {first} is reached twice")
    seen.add(first)
    base = first * page
    (own,) = struct.unpack_from(_PGNO, raw, base)
    (flags,) = struct.unpack_from("=H", raw, base + _S + 2)
    (pages,) = struct.unpack_from("=I", raw, base + _S + 4)
    if own != first or not flags & _P_OVERFLOW:
        raise PageDamage(f"{name} tree: overflow page {first} is not an overflow page")
    if pages < 1 or pages * page - _HDR < size:
        raise PageDamage(f"{name} tree: overflow page {first} spans {pages} pages for {size} bytes")
    if first + pages - 1 > last:
        raise PageDamage(
            f"{name} tree: overflow pages {first}..{first + pages - 1} pass page {last}",
            beyond=True,
        )
