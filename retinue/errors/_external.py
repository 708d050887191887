"""Failures outside retinue: an optional extra not installed, a model call, an MCP server, Ray.

The tree, and the names users import, are in :mod:`retinue.errors`.
"""

from __future__ import annotations

from retinue.errors._root import RetinueError

__all__ = [
    "ClusterError",
    "ExtraNotInstalled",
    "McpServerError",
    "ModelCallFailed",
    "ShardUnavailable",
]


class ExtraNotInstalled(RetinueError, ImportError):
    """A feature needs an optional extra that is not installed; ``.extra`` names it.

    The message names the missing package and the ``pip install`` line that adds it.
    """

    def __init__(self, extra: str, feature: str, missing: str) -> None:
        self.extra = extra
        super().__init__(
            f"{feature} needs the {extra!r} extra ({missing} is not installed): "
            f"pip install 'retinue[{extra}]'"
        )


class ModelCallFailed(RetinueError):
    """A model call failed for good (retries spent, or an error not worth retrying).

    ``provider`` and ``status`` (the HTTP status, None for a timeout or a
    connection error) say where; the message is one line, no traceback.
    """

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        self.provider = provider
        self.status = status
        super().__init__(message)


class McpServerError(RetinueError):
    """An MCP server could not be started, or died; ``.server`` names it.

    The message says why (the exit code, the end of its stderr, how many times
    in a row it failed and when it is tried again). A model sees it as a
    tool's ``{"error": ...}``; a turn whose server never started fails with it.
    """

    def __init__(self, message: str, *, server: str = "") -> None:
        self.server = server
        super().__init__(message)


class ClusterError(RetinueError):
    """``retinue.cluster`` could not do what was asked: Ray failed to start, or a shard failed.

    The message says which shard or node, and what to do.
    """


class ShardUnavailable(ClusterError):
    """A shard did not answer within the cluster's retry bound; ``.shard`` names it.

    The call may or may not have run on the shard; it is safe to repeat
    (mutating calls carry request ids the shard records with its answer).
    """

    def __init__(self, message: str, shard: int | None = None) -> None:
        self.shard = shard
        super().__init__(message)


class OutboxFull(ClusterError):
    """A cluster face owes ``limit`` (``Cluster.open``'s ``max_owed_calls``) or more lease
    calls (acknowledgements, releases) to shards that did not answer them, counting the
    leased waits in flight: it starts no new leased wait until the outbox delivered some.
    ``owed`` maps each shard to the calls it is owed. Nothing owed is dropped; wait again
    once the shards are reachable.
    """

    def __init__(self, message: str, limit: int, owed: dict[int, int]) -> None:
        self.limit = limit
        self.owed = owed
        super().__init__(message)
