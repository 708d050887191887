"""The control socket could not be used: :class:`ControlError` and :class:`NoWriter`.

The tree, and the names users import, are in :mod:`retinue.errors`.
"""

from __future__ import annotations

from retinue.errors._root import RetinueError

__all__ = ["ControlError", "NoWriter"]


class ControlError(RetinueError):
    """A call over a store's control socket failed on the way: the connection to the writer
    closed, or a frame could not be read.

    The message says whether the call may have run and what to do; a ``wait``
    or ``messages`` call whose connection closed lost nothing (what it took
    was given back to the store), so it is safe to call again.
    """


class NoWriter(ControlError):
    """No writer serves the store's control socket; ``.path`` names the socket.

    ``.stale`` is True when a socket file was left by a writer that is gone
    (killed): it is replaced when the next writer opens the store.
    """

    def __init__(self, message: str, *, path: str = "", stale: bool = False) -> None:
        self.path = path
        self.stale = stale
        super().__init__(message)
