"""Opening a store's folder, step by step: claim it, open LMDB, guard the data file.

Each step undoes nothing itself; :class:`~retinue.persistence.store.Store`
releases what the earlier steps took when a later one fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from retinue.errors import StoreError
from retinue.persistence.damage import Guard, store_error
from retinue.persistence.integrity import DATA_FILE, check_data_file, has_marker
from retinue.persistence.lock import WriterLock

__all__ = ["claim_folder", "grow_on_full", "guard_file", "open_databases", "open_env"]

_T = TypeVar("_T")


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


def open_databases(
    env: Any, folder: Path, names: Iterable[str], optional: Iterable[str], *, create: bool
) -> dict[str, Any]:
    """Open the named databases of ``env`` (``create``: a writer makes missing ones).

    A missing ``optional`` database (added after schema 1) is left out.

    Raises:
        StoreError: a required database is missing: not a retinue store.
        lmdb.Error: LMDB refused (a full map: see :func:`grow_on_full`).
    """
    dbs: dict[str, Any] = {}
    extra = set(optional)
    for name in names:
        try:
            dbs[name] = env.open_db(name.encode(), create=create)
        except lmdb.NotFoundError:
            if name in extra:
                continue
            raise StoreError(
                f"store {folder} has no {name!r} database; is it a retinue store?"
            ) from None
    return dbs


def grow_on_full(env: Any, step: Callable[[], _T], grown: Callable[[], None]) -> _T:
    """Run an opening step, doubling a map too small to hold even that (``grown`` is told).

    A reader adopts a map another process has grown meanwhile.
    """
    while True:
        try:
            return step()
        except lmdb.MapFullError:
            env.set_mapsize(env.info()["map_size"] * 2)
            grown()
        except lmdb.MapResizedError:  # a writer elsewhere grew it: adopt its size
            env.set_mapsize(0)
