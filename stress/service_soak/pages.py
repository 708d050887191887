"""A store file's pages through a read-only LMDB open: ``python -m stress.service_soak.pages DIR``.

The fallback of the soak's samples where ``rt.diagnostics`` has no ``store``
figures. It runs in a process of its own: LMDB forbids opening one
environment twice in a process (closing the second drops the first's locks).
Prints one JSON object: ``file_mib``, ``pages`` (the high-water mark: the last
page used, plus one), ``pages_in_use`` (the two meta pages and every
database's branch, leaf and overflow pages) and ``pages_free`` (the rest below
the mark; LMDB's own tree of free pages counts here, py-lmdb not exposing it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lmdb

__all__ = ["measure"]


def _pages(stat: Any) -> int:  # py-lmdb's stat dict
    return int(stat["branch_pages"]) + int(stat["leaf_pages"]) + int(stat["overflow_pages"])


def measure(folder: Path) -> dict[str, Any]:
    """Return the figures of the store in ``folder`` (read-only, beside its writer).

    Raises:
        lmdb.Error: the store cannot be opened or read.
    """
    env = lmdb.open(str(folder), readonly=True, lock=True, max_dbs=256, subdir=True)
    try:
        pages = int(env.info()["last_pgno"]) + 1
        in_use = 2 + _pages(env.stat())
        with env.begin() as txn:
            names = [key for key, _ in txn.cursor()]
            for name in names:
                try:
                    in_use += _pages(txn.stat(env.open_db(name, txn=txn, create=False)))
                except lmdb.Error:
                    continue  # a key of the main database that is not a database
    finally:
        env.close()
    size = (folder / "data.mdb").stat().st_size
    return {
        "file_mib": round(size / 2**20, 2),
        "pages": pages,
        "pages_in_use": min(pages, in_use),
        "pages_free": max(0, pages - in_use),
    }


if __name__ == "__main__":
    print(json.dumps(measure(Path(sys.argv[1]))))
