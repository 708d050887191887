"""Compacting copies of a live store: a backup into another folder, and a reclaim in place.

LMDB never shrinks ``data.mdb``; a compacting copy (``env.copyfd(compact=True)``)
holds only the pages in use. :func:`backup_to` writes one into a new folder.
A reclaim (:meth:`~retinue.persistence.store.Store.reclaim`) swaps one in
place of the live file, on the writer thread at a quiet point (nothing in
flight, nothing committed while it copies):

1. :func:`compacting_copy` writes the copy beside the live file as
   ``data.mdb.reclaim``, continues its transaction ids from the live file's
   (:func:`~retinue.persistence.integrity.rebase_meta_pages`), syncs it and
   checks every page it holds;
2. the store closes its environment, :func:`swap_in` renames the copy over
   ``data.mdb`` (one atomic rename) and syncs the folder, and the store opens
   the environment again on it.

A crash at any instant leaves either the live file, whole, beside a copy
that is not in use (before the rename: the next writer open removes it,
:func:`discard_half_done`), or the copy, whole, as the live file (after it).
The copy holds every transaction committed before the reclaim began, and
nothing commits until the swap is done: no acknowledged operation is lost.
Readers in other processes keep the old file open (its inode) until they
notice the rename and open the new one (see ``Store``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import lmdb

from retinue.errors import InvalidArgument, StoreError
from retinue.persistence.damage import Guard
from retinue.persistence.integrity import (
    DATA_FILE,
    read_meta_pages,
    rebase_meta_pages,
    write_marker,
)
from retinue.persistence.verify import PageDamage, verify_pages

__all__ = ["RECLAIM_FILE", "backup_to", "compacting_copy", "discard_half_done", "swap_in"]

RECLAIM_FILE = DATA_FILE + ".reclaim"
"""The compacting copy a reclaim writes beside the live file before it swaps it in."""


def _sync_folder(folder: Path) -> None:
    """Make a rename or removal in ``folder`` durable where the platform allows."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def discard_half_done(folder: Path) -> bool:
    """Remove the copy of a reclaim that never swapped it in; return True if there was one.

    Only a writer calls this (it holds the lock: no reclaim runs meanwhile).

    Raises:
        StoreError: the copy cannot be removed.
    """
    copy = folder / RECLAIM_FILE
    try:
        copy.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"cannot remove {copy}, left by a reclaim: {exc}") from None
    _sync_folder(folder)
    return True


def compacting_copy(env: Any, folder: Path, txnid: int) -> Path:
    """Write a checked compacting copy of ``env`` beside its data file; return its path.

    The caller holds the writer at a quiet point, so ``txnid`` is the live
    file's last transaction and the copy holds it. On failure the copy is removed.

    Raises:
        StoreError: the copy could not be written, synced or checked.
    """
    copy = folder / RECLAIM_FILE
    mode = os.stat(folder / DATA_FILE).st_mode & 0o777
    try:
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            env.copyfd(fd, compact=True)
            os.fsync(fd)
        finally:
            os.close(fd)
        rebase_meta_pages(copy, txnid)
        metas = read_meta_pages(copy)
        meta = max(metas, key=lambda m: m.txnid)
        if meta.txnid != txnid:
            raise ValueError(f"its last transaction is {meta.txnid}, not {txnid}")
        verify_pages(copy, meta)
    except (OSError, ValueError, PageDamage, lmdb.Error) as exc:
        with contextlib.suppress(OSError):
            copy.unlink()
        raise StoreError(
            f"store {folder}: the compacting copy failed ({exc}); the store is unchanged",
            path=str(folder),
        ) from None
    return copy


def swap_in(folder: Path, copy: Path) -> None:
    """Rename ``copy`` over the data file (atomic) and make the rename durable.

    The environment must be closed: LMDB must not write the old file again.

    Raises:
        StoreError: the rename failed (the live file is unchanged).
    """
    try:
        os.replace(copy, folder / DATA_FILE)
    except OSError as exc:
        raise StoreError(
            f"store {folder}: cannot swap in the compacted file: {exc}", path=str(folder)
        ) from None
    _sync_folder(folder)


def backup_to(env: Any, guard: Guard, dest: Path, schema_version: int) -> Path:
    """Write a compacted, consistent copy of ``env`` into the new store folder ``dest``.

    The live pages are checked first, so damage is reported rather than copied.

    Raises:
        InvalidArgument: ``dest`` already holds a store.
        StoreCorrupted: the live store is damaged.
        StoreError: LMDB could not write the copy, or its marker.
    """
    if (dest / DATA_FILE).exists():
        raise InvalidArgument(f"backup destination {dest} already holds a store")
    dest.mkdir(parents=True, exist_ok=True)
    with guard.lmdb_errors("check before a backup"):
        guard.verify()  # LMDB's copy walks every page: never let it walk a damaged one
    try:
        env.copy(str(dest), compact=True)
    except lmdb.Error as exc:
        guard.raise_for(f"backup to {dest}", exc)
    try:
        write_marker(dest, schema_version)
    except OSError as exc:
        raise StoreError(f"cannot write the marker of backup {dest}: {exc}") from None
    return dest
