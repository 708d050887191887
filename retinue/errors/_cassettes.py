"""Cassettes of recorded model runs: a file retinue cannot use, a request it does not hold.

The tree, and the names users import, are in :mod:`retinue.errors`.
"""

from __future__ import annotations

from typing import Any

from retinue.errors._root import RetinueError

__all__ = ["CassetteError", "CassetteMiss"]


class CassetteError(RetinueError):
    """A cassette cannot be used: missing (to replay), damaged, of a newer version, or opened
    in two modes at once; ``.path`` names the file. The message says what to do."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with the path (``Exception`` pickles only the message)."""
        return (_rebuild_cassette_error, (type(self), str(self), self.path))


class CassetteMiss(CassetteError):
    """A replayed request matches no recorded call: the turn fails, loudly, never a live call.

    ``agent`` is the agent's path, ``index`` its call (0 for its first model
    call), ``field`` the first field of the request that differs from the one
    recorded at that place (``model``, ``messages[3].content``, ``tools``,
    ``temperature``...; ``None`` when nothing was recorded there at all).
    """

    def __init__(
        self,
        message: str,
        *,
        agent: str = "",
        index: int = 0,
        field: str | None = None,
        path: str | None = None,
    ) -> None:
        self.agent = agent
        self.index = index
        self.field = field
        super().__init__(message, path=path)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with the agent, the index and the field."""
        return (_rebuild_miss, (str(self), self.agent, self.index, self.field, self.path))


def _rebuild_cassette_error(cls: type[Any], message: str, path: str | None) -> Any:
    """Rebuild a pickled :class:`CassetteError`."""
    return cls(message, path=path)


def _rebuild_miss(
    message: str, agent: str, index: int, field: str | None, path: str | None
) -> CassetteMiss:
    """Rebuild a pickled :class:`CassetteMiss`."""
    return CassetteMiss(message, agent=agent, index=index, field=field, path=path)
