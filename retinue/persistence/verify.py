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
from collections.abc import Callable
from pathlib import Path

from retinue.persistence.integrity import MetaPage

__all__ = ["PageDamage", "verify_pages"]

_S = struct.calcsize("P")
_PGNO = "=Q" if _S == 8 else "=I"
_HDR = _S + 8  # PAGEHDRSZ
_P_BRANCH, _P_LEAF, _P_OVERFLOW = 0x01, 0x02, 0x04
_P_KIND = _P_BRANCH | _P_LEAF | _P_OVERFLOW
_F_BIGDATA, _F_SUBDATA = 0x01, 0x02
_NODE = 8  # mn_lo, mn_hi, mn_flags, mn_ksize
_DB_DEPTH_AT = 6  # md_depth inside an MDB_db record
_DB_ROOT_AT = 8 + 4 * _S  # md_root inside an MDB_db record
_DB_SIZE = 8 + 5 * _S
_DBS_AT = _HDR + 8 + 2 * _S  # mm_dbs inside a meta page
_P_INVALID = (1 << (8 * _S)) - 1
# A node's header as (mn_lo | mn_hi << 16, mn_flags, mn_ksize): the 32 bits LMDB splits
# into mn_lo and mn_hi, in the machine's byte order, read as one (a leaf's data size,
# the low bits of a branch's child page number).
_NODE_HEADER = struct.Struct("=IHH")
_PAGE_HEADER = struct.Struct(_PGNO + "HHHH")  # mp_pgno, mp_pad, mp_flags, mp_lower, mp_upper
_OVERFLOW_HEADER = struct.Struct(_PGNO + "HHI")  # mp_pgno, mp_pad, mp_flags, mp_pages


class PageDamage(Exception):
    """A page is not what the tree that reaches it says it must be.

    ``beyond`` is True when the page lies past the pages that can be read.
    """

    def __init__(self, message: str, *, beyond: bool = False) -> None:
        self.beyond = beyond
        super().__init__(message)


def _db_record(raw: bytes | memoryview | mmap.mmap, at: int) -> tuple[int, int]:
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
            try:
                meta_at = meta.index * page
                trees = [
                    ("free pages", *_db_record(view, meta_at + _DBS_AT)),
                    ("main", *_db_record(view, meta_at + _DBS_AT + _DB_SIZE)),
                ]
                seen = bytearray(last + 1)  # 1 at each page checked
                offsets: dict[int, _Unpack] = {}
                while trees:
                    name, depth, root = trees.pop()
                    trees.extend(_walk(view, page, last, name, depth, root, seen, offsets))
                return seen.count(1)
            except PageDamage as exc:
                if last < meta.last_page and exc.beyond:
                    raise PageDamage(
                        f"{exc}: the file is {size} bytes, but the trees use pages up to "
                        f"{meta.last_page}; the file was truncated"
                    ) from None
                raise


_Unpack = Callable[[mmap.mmap, int], tuple[int, ...]]
"""A bound ``Struct.unpack_from``: the node offsets of a page with so many nodes."""


def _walk(
    view: mmap.mmap,
    page: int,
    last: int,
    name: str,
    depth: int,
    root: int,
    seen: bytearray,
    offsets_of: dict[int, _Unpack],
) -> list[tuple[str, int, int]]:
    """Check one B-tree, a level at a time; return the named databases it lists (main only).

    ``offsets_of`` holds the unpackers of node offsets by node count (shared
    by the trees of one walk).
    """
    if root == _P_INVALID:
        return []
    if depth < 1 or depth > 64:
        raise PageDamage(f"{name} tree: impossible depth {depth}")
    found: list[tuple[str, int, int]] = []
    header = _PAGE_HEADER.unpack_from
    node = _NODE_HEADER.unpack_from
    room = page - _NODE  # the last offset a node may start at
    level = [root]
    for height in range(1, depth + 1):
        want = _P_LEAF if height == depth else _P_BRANCH
        below: list[int] = []
        for pgno in level:
            if not 2 <= pgno <= last:
                raise PageDamage(
                    f"{name} tree: page {pgno} is outside the file's pages 2..{last}",
                    beyond=pgno > last,
                )
            if seen[pgno]:
                raise PageDamage(f"{name} tree: page {pgno} is reached twice")
            seen[pgno] = 1
            base = pgno * page
            own, _, flags, lower, upper = header(view, base)
            if own != pgno:
                raise PageDamage(f"{name} tree: page {pgno} says it is page {own}")
            if flags & _P_KIND != want:
                kind = "leaf" if want == _P_LEAF else "branch"
                raise PageDamage(
                    f"{name} tree: page {pgno} should be a {kind}, flags are {flags:#x}"
                )
            if not (_HDR <= lower <= upper <= page) or (lower - _HDR) & 1:
                raise PageDamage(f"{name} tree: page {pgno} has bounds {lower}..{upper}")
            count = (lower - _HDR) >> 1
            unpack = offsets_of.get(count)
            if unpack is None:
                unpack = offsets_of[count] = struct.Struct(f"={count}H").unpack_from
            offsets = unpack(view, base + _HDR)
            if want == _P_BRANCH:
                if count == 0:
                    raise PageDamage(f"{name} tree: branch page {pgno} has no children")
                _children(view, page, name, pgno, base, upper, offsets, below)
            elif name == "main" or (count and (min(offsets) < upper or max(offsets) > room)):
                _nodes(view, page, last, name, pgno, base, upper, offsets, seen, found)
            else:  # a named database's leaf, its nodes in place: check what each holds
                for offset in offsets:
                    size, node_flags, ksize = node(view, base + offset)
                    if node_flags & _F_BIGDATA:
                        _big(view, page, last, name, pgno, base + offset, ksize, size, seen)
                    elif offset + ksize + size > room:
                        raise PageDamage(f"{name} tree: page {pgno} has a value past its end")
        level = below
    return found


def _children(
    view: mmap.mmap,
    page: int,
    name: str,
    pgno: int,
    base: int,
    upper: int,
    offsets: tuple[int, ...],
    below: list[int],
) -> None:
    """Check the nodes of branch page ``pgno``; append its children to ``below``, in order."""
    node = _NODE_HEADER.unpack_from
    add = below.append
    for offset in offsets:
        if not upper <= offset <= page - _NODE:
            raise PageDamage(f"{name} tree: page {pgno} has a node at {offset}")
        low, high, ksize = node(view, base + offset)
        if offset + _NODE + ksize > page:
            raise PageDamage(f"{name} tree: page {pgno} has a key past its end")
        add(low | high << 32)


def _big(
    view: mmap.mmap,
    page: int,
    last: int,
    name: str,
    pgno: int,
    at: int,
    ksize: int,
    size: int,
    seen: bytearray,
) -> None:
    """Check the big value of the leaf node at ``at`` of page ``pgno``: its overflow pages."""
    end = at - pgno * page + _NODE + ksize
    if end + _S > page:
        raise PageDamage(f"{name} tree: page {pgno} has a node past its end")
    (first,) = struct.unpack_from(_PGNO, view, pgno * page + end)
    _check_overflow(view, page, last, name, first, size, seen)


def _nodes(
    view: mmap.mmap,
    page: int,
    last: int,
    name: str,
    pgno: int,
    base: int,
    upper: int,
    offsets: tuple[int, ...],
    seen: bytearray,
    found: list[tuple[str, int, int]],
) -> None:
    """Check the nodes of leaf page ``pgno`` one by one, in order (the main tree's, whose
    leaves list the named databases into ``found``, or a page with a node out of place)."""
    for offset in offsets:
        if not upper <= offset <= page - _NODE:
            raise PageDamage(f"{name} tree: page {pgno} has a node at {offset}")
        size, node_flags, ksize = _NODE_HEADER.unpack_from(view, base + offset)
        if node_flags & _F_BIGDATA:
            _big(view, page, last, name, pgno, base + offset, ksize, size, seen)
            continue
        end = offset + _NODE + ksize
        if end + size > page:
            raise PageDamage(f"{name} tree: page {pgno} has a value past its end")
        if node_flags & _F_SUBDATA and name == "main":
            if size != _DB_SIZE:
                raise PageDamage(f"main tree: page {pgno} has a bad database record")
            key = view[base + offset + _NODE : base + end].decode("utf-8", "replace")
            found.append((key, *_db_record(view, base + end)))


def _check_overflow(
    view: mmap.mmap, page: int, last: int, name: str, first: int, size: int, seen: bytearray
) -> None:
    """Check a value stored on overflow pages starting at ``first``."""
    if not 2 <= first <= last:
        raise PageDamage(
            f"{name} tree: overflow page {first} is outside the file's pages", beyond=first > last
        )
    if seen[first]:
        raise PageDamage(f"{name} tree: overflow page {first} is reached twice")
    seen[first] = 1
    own, _, flags, pages = _OVERFLOW_HEADER.unpack_from(view, first * page)
    if own != first or not flags & _P_OVERFLOW:
        raise PageDamage(f"{name} tree: overflow page {first} is not an overflow page")
    if pages < 1 or pages * page - _HDR < size:
        raise PageDamage(f"{name} tree: overflow page {first} spans {pages} pages for {size} bytes")
    if first + pages - 1 > last:
        raise PageDamage(
            f"{name} tree: overflow pages {first}..{first + pages - 1} pass page {last}",
            beyond=True,
        )
