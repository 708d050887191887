"""The page check (``verify_pages``): every sound store passes, each damage is named.

Stores are built with LMDB directly (several named databases, values on
overflow pages, deletes); damage is written into a copy of the data file at
pages found by walking the trees the way LMDB lays them out.
"""

from __future__ import annotations

import random
import shutil
import struct
from pathlib import Path

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retinue.persistence import verify
from retinue.persistence.integrity import MetaPage, read_meta_pages
from retinue.persistence.verify import PageDamage, verify_pages

NAMES = (b"a", b"b", b"c")
HEADER = struct.Struct(verify._PGNO + "HHHH")  # pgno, pad, flags, lower, upper
NODE = struct.Struct("=IHH")  # data size (or child page), flags, key size


def build(folder: Path, seed: int, puts: int) -> Path:
    """Fill a store with seeded random puts and deletes; return its data file."""
    rng = random.Random(seed)
    env = lmdb.open(str(folder), max_dbs=len(NAMES), map_size=1 << 26)
    dbs = [env.open_db(name) for name in NAMES]
    for _ in range(puts):
        with env.begin(write=True) as txn:
            db = rng.choice(dbs)
            size = rng.choice([1, 40, 400, 3000, 9000])
            txn.put(rng.randbytes(rng.randint(1, 40)), rng.randbytes(size), db=db)
            if rng.random() < 0.3:
                cursor = txn.cursor(db=db)
                if cursor.first():
                    cursor.delete()
    env.close()
    return folder / "data.mdb"


def newest(path: Path) -> MetaPage:
    return max(read_meta_pages(path), key=lambda meta: meta.txnid)


def verdict(path: Path) -> int | str:
    """The number of pages checked, or what the check found damaged."""
    try:
        return verify_pages(path, newest(path))
    except PageDamage as exc:
        return str(exc)


def nodes(raw: bytes, page: int, pgno: int) -> list[tuple[int, int, int, int]]:
    """(node offset, size or child, flags, key size) of each node of page ``pgno``."""
    base = pgno * page
    _, _, _, lower, _ = HEADER.unpack_from(raw, base)
    offsets = struct.unpack_from(f"={(lower - verify._HDR) // 2}H", raw, base + verify._HDR)
    return [(offset, *NODE.unpack_from(raw, base + offset)) for offset in offsets]


def tree_pages(path: Path, name: bytes) -> list[list[int]]:
    """The pages of database ``name``, a list per level from the root."""
    raw = path.read_bytes()
    meta = newest(path)
    page = meta.page_size
    at = meta.index * page + verify._DBS_AT + verify._DB_SIZE
    depth, main = verify._db_record(raw, at)
    assert depth == 1, depth  # a few databases: the main tree is one leaf
    for offset, _, _, ksize in nodes(raw, page, main):
        key_at = main * page + offset + verify._NODE
        if raw[key_at : key_at + ksize] == name:
            depth, root = verify._db_record(raw, key_at + ksize)
    levels = [[root]]
    for _ in range(depth - 1):
        levels.append(
            [
                size | flags << 32
                for pgno in levels[-1]
                for _, size, flags, _ in nodes(raw, page, pgno)
            ]
        )
    return levels


def damaged(source: Path, tmp: Path, at: int, data: bytes) -> Path:
    """A copy of ``source`` with ``data`` written at byte ``at``."""
    copy = tmp / "damaged.mdb"
    shutil.copyfile(source, copy)
    with copy.open("r+b") as handle:
        handle.seek(at)
        handle.write(data)
    return copy


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), puts=st.integers(1, 400))
def test_every_sound_store_passes(
    tmp_path_factory: pytest.TempPathFactory, seed: int, puts: int
) -> None:
    folder = tmp_path_factory.mktemp("store")
    path = build(folder, seed, puts)
    env = lmdb.open(str(folder), max_dbs=len(NAMES), readonly=True, lock=False)
    with env.begin() as txn:
        stats = [txn.stat(env.open_db(name, txn=txn)) for name in NAMES] + [env.stat()]
    env.close()
    checked = verdict(path)
    assert isinstance(checked, int)
    # Every branch and leaf page of the named and main trees, plus the free-page
    # tree and the first page of each big value.
    assert checked >= sum(stat["branch_pages"] + stat["leaf_pages"] for stat in stats)


def test_each_damage_is_named(tmp_path: Path) -> None:
    path = build(tmp_path / "store", seed=3, puts=3000)
    page = newest(path).page_size
    levels = tree_pages(path, b"b")
    assert len(levels) >= 2, "the test wants a branch page above the leaves"
    raw = path.read_bytes()
    leaf = levels[-1][1]
    first_offset = nodes(raw, page, leaf)[0][0]
    node_at = leaf * page + first_offset

    moved = damaged(path, tmp_path, leaf * page + verify._HDR, struct.pack("=H", 2))
    assert verdict(moved) == f"b tree: page {leaf} has a node at 2"

    too_long = damaged(path, tmp_path, node_at, struct.pack("=IHH", 5000, 0, 8))
    assert verdict(too_long) == f"b tree: page {leaf} has a value past its end"

    renamed = damaged(path, tmp_path, leaf * page, struct.pack(verify._PGNO, leaf + 1))
    assert verdict(renamed) == f"b tree: page {leaf} says it is page {leaf + 1}"

    branch = levels[-2][0]
    children = nodes(raw, page, branch)
    child_at = branch * page + children[0][0]
    twice = damaged(path, tmp_path, branch * page + children[1][0], raw[child_at : child_at + 6])
    assert verdict(twice) == f"b tree: page {levels[-1][0]} is reached twice"

    big = next(
        (pgno, offset, ksize)
        for pgno in levels[-1]
        for offset, _, flags, ksize in nodes(raw, page, pgno)
        if flags & verify._F_BIGDATA
    )
    pgno, offset, ksize = big
    (first,) = struct.unpack_from(verify._PGNO, raw, pgno * page + offset + verify._NODE + ksize)
    not_overflow = damaged(path, tmp_path, first * page + verify._S + 2, struct.pack("=H", 2))
    assert verdict(not_overflow) == f"b tree: overflow page {first} is not an overflow page"

    assert isinstance(verdict(path), int)
