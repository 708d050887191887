"""The LMDB store refused: :class:`StoreError` (``.path``) and its kinds.

The tree, and the names users import, are in :mod:`retinue.errors`.
"""

from __future__ import annotations

from retinue.errors._root import RetinueError

__all__ = ["StoreCorrupted", "StoreError", "StoreLocked", "StoreReadOnly", "StoreVersionError"]


class StoreError(RetinueError):
    """The LMDB store cannot be used as asked; ``.path`` names its folder when known."""

    def __init__(self, message: str = "", path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class StoreCorrupted(StoreError):
    """The store's files are damaged, truncated or lost; ``.path`` names the folder.

    The message says what is wrong and how to restore from a backup.
    """


class StoreLocked(StoreError):
    """Another live writer holds the store; ``.pid`` names it."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        self.pid = pid
        super().__init__(message)


class StoreReadOnly(StoreError):
    """The runtime was opened read-only and refuses mutating calls."""


class StoreVersionError(StoreError):
    """The store was written by a newer retinue schema."""
