"""The root of the tree: every error retinue raises subclasses :class:`RetinueError`.

The tree, and the names users import, are in :mod:`retinue.errors`.
"""

from __future__ import annotations

__all__ = ["InternalError", "RetinueError"]


class RetinueError(Exception):
    """Root of every error retinue raises."""


class InternalError(RetinueError):
    """retinue itself failed on a command (a bug): nothing the command did was kept.

    ``command`` names the command (its class name) and ``cause`` the
    exception that stopped it (``"<Type>: <message>"``). The store and the
    supervisor's memory are exactly as they were before the command. A turn's
    end (a settle, a timeout, a due restart, an approval) that could not be
    applied is applied instead as a failure with this error, in a second,
    minimal transition, so no agent is left busy with nothing to carry it on.
    """

    def __init__(self, message: str, *, command: str = "", cause: str = "") -> None:
        self.command = command
        self.cause = cause
        super().__init__(message)
