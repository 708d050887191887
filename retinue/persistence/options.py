"""The store arguments of ``Runtime.open``, checked before anything touches the disk.

:func:`check_store_options` turns a caller's ``path``, ``durability``,
``map_size``, ``readonly`` and ``group_commit`` into :class:`StoreOptions` or
raises a typed :class:`~retinue.errors.RetinueError` with a clear message,
never a raw ``TypeError``, ``ValueError`` or ``OSError``.
:func:`make_folder` creates the store folder and reports what it created, so
a failed open can remove exactly that (:func:`remove_created`) and leave
nothing behind.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from retinue.errors import ArgumentTypeError, InvalidArgument, StoreError
from retinue.persistence.store import Durability
from retinue.protocol.checks import preview

__all__ = [
    "MAX_MAP_SIZE",
    "StoreOptions",
    "check_store_options",
    "make_folder",
    "remove_created",
]

MAX_MAP_SIZE = 1 << 44
"""Largest initial LMDB map accepted (16 TiB of address space); the map grows as needed."""


@dataclass(frozen=True)
class StoreOptions:
    """Checked store arguments; ``path`` is None for a temporary store."""

    path: Path | None
    durability: Durability
    map_size: int
    readonly: bool
    group_commit: bool


def _check_bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{field} must be True or False, not {type(value).__name__}")
    return value


def _check_path(path: object) -> Path:
    if isinstance(path, bool) or not isinstance(path, str | os.PathLike):
        raise ArgumentTypeError(
            f"path must be a str or os.PathLike naming the store folder (or None for a "
            f"temporary store), not {type(path).__name__}"
        )
    text = os.fspath(path)
    if not isinstance(text, str):
        raise ArgumentTypeError(f"path must name the folder as str, not {type(text).__name__}")
    if not text.strip():
        raise InvalidArgument("path must not be blank; pass None for a temporary store")
    if "\x00" in text:
        raise InvalidArgument(f"path {preview(text)} contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"path {preview(text)} contains a lone surrogate; LMDB needs a path that "
            "encodes as UTF-8"
        ) from None
    folder = Path(text)
    if folder.exists() and not folder.is_dir():
        raise InvalidArgument(
            f"path {preview(text)} is a file, not a store folder; give a folder "
            "(it is created if missing)"
        )
    return folder


def check_store_options(
    path: object,
    *,
    durability: object,
    map_size: object,
    readonly: object,
    group_commit: object,
) -> StoreOptions:
    """Check ``Runtime.open``'s store arguments; touch nothing on disk.

    Raises:
        ArgumentTypeError: ``path`` is not a ``str``/``os.PathLike``/None,
            ``map_size`` not an ``int``, or ``readonly``/``group_commit`` not
            a ``bool``.
        InvalidArgument: ``path`` is blank, contains NUL or a lone surrogate,
            or names a file; ``map_size`` is below 1 or above
            :data:`MAX_MAP_SIZE`; ``durability`` is not ``"full"`` or
            ``"buffered"`` (whatever its type).
    """
    readonly = _check_bool(readonly, "readonly")
    group_commit = _check_bool(group_commit, "group_commit")
    folder = None if path is None else _check_path(path)
    if isinstance(map_size, bool) or not isinstance(map_size, int):
        raise ArgumentTypeError(f"map_size must be an int (bytes), not {type(map_size).__name__}")
    if not 1 <= map_size <= MAX_MAP_SIZE:
        raise InvalidArgument(
            f"map_size must be between 1 and {MAX_MAP_SIZE} bytes, got {map_size}; "
            "the map grows as needed, so the default is fine"
        )
    try:
        if not isinstance(durability, str):
            raise ValueError(durability)
        mode = Durability(durability)
    except ValueError:
        raise InvalidArgument(
            f"durability must be 'full' or 'buffered', not {preview(durability)}"
        ) from None
    return StoreOptions(
        path=folder,
        durability=mode,
        map_size=map_size,
        readonly=readonly,
        group_commit=group_commit,
    )


def make_folder(folder: Path) -> Path | None:
    """Create ``folder`` (and missing parents); return the topmost folder created, or None.

    Raises:
        StoreError: the folder cannot be created (a parent is a file, no
            permission, read-only file system, ...), with the OS's reason.
    """
    missing: Path | None = None
    probe = folder
    while not probe.exists():
        missing = probe
        if probe.parent == probe:
            break
        probe = probe.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        remove_created(missing if missing is not None and missing.exists() else None)
        raise StoreError(
            f"cannot create the store folder {folder}: {exc.strerror or exc}"
        ) from None
    return missing


def remove_created(created: Path | None) -> None:
    """Remove a folder :func:`make_folder` created (None: nothing was created)."""
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)
