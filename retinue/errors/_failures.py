"""How a runner says a failure is not worth another attempt: :class:`PermanentError`.

The tree, and the names users import, are in :mod:`retinue.errors`.
"""

from __future__ import annotations

from retinue.errors._root import RetinueError

__all__ = ["PermanentError"]


class PermanentError(RetinueError):
    """Raised by a runner (or a tool it calls) for a failure that another attempt cannot fix.

    The turn settles ``failed`` with the error's class name as its
    ``error_type`` (a subclass keeps its own name) and a restart policy with
    ``retry_on="transient"`` (the default) does not restart it; one with
    ``retry_on="any"`` does.
    """
