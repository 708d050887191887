"""Opening a store's folder, step by step: claim it, open LMDB, guard the data file.

Each step undoes nothing itself; :class:`~retinue.persistence.store.Store`
releases what the earlier steps took when a later one fails.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lmdb

from retinue.errors import StoreError
from retinue.persistence.damage import Guard, store_error
from retinue.persistence.integrity import DATA_FILE, check_data_file, has_marker
from retinue.persistence.lock import WriterLock

__all__ = ["claim_folder", "guard_file", "open_env"]


def claim_folder(folder: Path, *, readonly: bool, create: bool) -> WriterLock | None:
    """Check the folder holds (or may hold) a store; a writer takes (and returns) its lock.

    Raises:
        StoreError: a reader found no store there.
        StoreLocked: another writer holds it.
        StoreCorrupted: its data file is damaged or lost.
    """
    if readonly:
        if not (folder / DATA_FILE).exists() and not has_marker(folder):
            raise StoreError(f"no retinue store at {folder}", path=str(folder))
        check_data_file(folder, create=False)
        return None
    folder.mkdir(parents=True, exist_ok=True)
    lock = WriterLock(folder)
    try:
        check_data_file(folder, create=create)
    except BaseException:
        lock.release()
        raise
    return lock


def open_env(
    folder: Path, *, map_size: int, max_dbs: int, max_readers: int, readonly: bool, sync: bool
) -> Any:
    """Open the LMDB environment (``sync``: fsync every commit, the ``full`` durability).

    Raises:
        StoreCorrupted, StoreError: LMDB refused it.
    """
    for attempt in range(100):
        try:
            return lmdb.open(
                str(folder),
                map_size=map_size,
                max_dbs=max_dbs,
                max_readers=max_readers,
                readonly=readonly,
                sync=sync,
                metasync=sync,
                readahead=False,
            )
        except lmdb.MapResizedError as exc:
            # A writer elsewhere grew the map between LMDB reading its size
            # and opening the first transaction: open again, at the new size.
            if attempt == 99:
                raise store_error(folder, "open", exc) from None
        except lmdb.Error as exc:
            raise store_error(folder, "open", exc) from None
    raise AssertionError("unreachable")


def guard_file(folder: Path, env: Any) -> Guard:
    """Open the data file LMDB mapped (to notice it shrinking) and guard the environment.

    Raises:
        StoreError: the data file cannot be read (the environment is closed then).
    """
    try:
        data_fd = os.open(folder / DATA_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        env.close()
        raise StoreError(f"cannot read {folder / DATA_FILE}: {exc}", path=str(folder)) from None
    return Guard(folder, env, data_fd)
