"""The root of the tree: every error retinue raises subclasses :class:`RetinueError`.

The tree, and the names users import, are in :mod:`retinue.errors`.
"""

from __future__ import annotations

__all__ = ["RetinueError"]


class RetinueError(Exception):
    """Root of every error retinue raises."""
