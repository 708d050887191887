"""Calls that an agent's state, a wait or the runtime refuses.

:class:`AgentStateError` (``.path``) and its kinds (:class:`GenerationNotKept`: a
fork's past the store keeps), :class:`WaitTimeout`,
:class:`TurnInterrupted` (a ``BaseException``, outside the tree),
:class:`BlockingCallInAsyncRunner` and :class:`RuntimeClosed`.

The tree, and the names users import, are in :mod:`retinue.errors`.
"""

from __future__ import annotations

from typing import Any

from retinue.errors._root import RetinueError

__all__ = [
    "ActiveDescendants",
    "AgentBusy",
    "AgentClosed",
    "AgentStateError",
    "BlockingCallInAsyncRunner",
    "GenerationNotKept",
    "NothingToWaitFor",
    "RuntimeClosed",
    "TurnInterrupted",
    "WaitTimeout",
]


class AgentStateError(RetinueError):
    """The agent is in a state that does not allow the call; ``.path`` names it (when known)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with the path (``Exception`` pickles only the message)."""
        return (_rebuild_with_path, (type(self), str(self), self.path))


class AgentClosed(AgentStateError):
    """The agent is closed."""


class AgentBusy(AgentStateError):
    """The agent has a turn queued or running."""


class ActiveDescendants(AgentStateError):
    """The agent still has live children; close them first or use close_tree."""


class NothingToWaitFor(AgentStateError):
    """A host wait found the agent idle with every completion already received.

    The agent is neither running nor queued, so no completion will come
    unless something gives it a new turn (``follow_up``, ``resume``, a
    message that wakes it); waiting would only run out the timeout.
    """


class GenerationNotKept(AgentStateError, LookupError):
    """A fork asked for an agent as of a generation the store does not keep.

    The store keeps each agent's newest ``Limits.fork_generations`` settled
    generations; a generation older than those, one that never settled (a
    turn still running), or one from before a fork was made (fork its origin
    instead) cannot be forked. ``.path`` names the agent.
    """


class WaitTimeout(RetinueError, TimeoutError):
    """A wait ran out of time; the agent keeps running. ``.path`` names it (when known)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with the path (``Exception`` pickles only the message)."""
        return (_rebuild_with_path, (type(self), str(self), self.path))


class TurnInterrupted(BaseException):
    """The calling turn was interrupted (or its time ran out, or the runtime closed).

    Like asyncio's ``CancelledError`` and trio's ``Cancelled``, it is a
    ``BaseException``, not a :class:`RetinueError`: a runner's ``except
    Exception`` cannot swallow an interrupt and carry on as if its calls had
    worked. Let it propagate (clean up in ``finally``); the turn's result is
    discarded anyway.
    """


class BlockingCallInAsyncRunner(RetinueError, RuntimeError):
    """An async runner called a blocking turn operation; await its ``*_async`` twin."""


class RuntimeClosed(RetinueError):
    """The runtime is closed; open it again to continue."""


def _rebuild_with_path(cls: type[Any], message: str, path: str | None) -> Any:
    """Rebuild a pickled error that carries ``.path``."""
    return cls(message, path=path)
