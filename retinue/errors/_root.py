"""The root of the tree: every error retinue raises subclasses :class:`RetinueError`.

The tree, and the names users import, are in :mod:`retinue.errors`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["InternalError", "RetinueError"]


class RetinueError(Exception):
    """Root of every error retinue raises."""

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and copy) with every attribute, whatever ``__init__`` takes.

        ``Exception`` pickles ``cls(*args)``, which fails or garbles an error whose
        ``__init__`` takes fields rather than its message (``OutboxFull``,
        ``TeamFileError``, ``DelegationCycleError``): Ray, process pools and logging
        queues pickle the errors they carry.
        """
        return (_rebuild_error, (type(self), self.args, self.__dict__))


def _rebuild_error(
    cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]
) -> BaseException:
    """Rebuild a pickled :class:`RetinueError` without calling its ``__init__``."""
    error = cls.__new__(cls)
    # the built-in exception's own __init__ (ImportError keeps its message in ``msg``)
    builtin: Any = next(base for base in cls.__mro__ if base.__module__ == "builtins")
    builtin.__init__(error, *args)
    error.__dict__.update(state)
    return error


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
