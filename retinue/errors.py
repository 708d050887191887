"""Every exception retinue raises, under one root.

Usage mistakes also subclass the matching built-in, so ``except ValueError``
and friends keep working for callers that do not know retinue's names::

    RetinueError
    ├── InvalidAgentPath               (ValueError)   a bad agent name or path
    ├── InvalidLimits                  (ValueError)   a bad Limits field or env var
    ├── InvalidArgument                (ValueError)   any other bad argument
    ├── ArgumentTypeError              (TypeError)    an argument of the wrong type
    ├── ConfigurationError             (ValueError)   a bad profile set at open
    │   └── TeamFileError                             .source, .table, .key: a bad team file
    ├── DelegationGraphError           (ValueError)   the profile graph is unusable
    │   ├── DelegationCycleError                      .cycle
    │   └── DelegationDepthError                      .depth, .cap
    ├── ResultContractError            (ValueError)   .field: a bad structured result
    ├── UnknownProfile                 (LookupError)
    ├── UnknownAgent                   (LookupError)
    ├── UnknownApproval                (LookupError)  no approval request with that id
    ├── ApprovalAlreadyAnswered                       the request was answered before
    ├── DuplicateAgentPath             (ValueError)   a live sibling holds the name
    ├── NotPermitted                                  outside what the sender may do
    │   └── ToolsNotPermitted          (ConfigurationError) .extra: tools above the parent's
    ├── LimitExceeded                                 .limit, .value, .path: a bound was hit
    │   ├── DepthLimitExceeded
    │   ├── FanoutLimitExceeded
    │   ├── AgentLimitExceeded
    │   ├── MailboxFull
    │   ├── MessageTooLarge            (ValueError)
    │   ├── DedupKeyTooLong            (ValueError)
    │   ├── CompletionBacklogFull
    │   ├── TokenBudgetExceeded                       .budget, .limit, .used: model tokens
    │   ├── CostBudgetExceeded                        .budget, .limit, .used: model cost in USD
    │   ├── RestartLimitExceeded                      a restart policy gave up (its intensity)
    │   └── ToolCallLimitExceeded                     a turn made max_tool_calls calls
    ├── AgentStateError                               wrong state for the call
    │   ├── AgentClosed
    │   ├── AgentBusy
    │   ├── ActiveDescendants
    │   └── NothingToWaitFor                          an idle agent, all received
    ├── WaitTimeout                    (TimeoutError) the agent keeps running
    ├── BlockingCallInAsyncRunner      (RuntimeError) use the turn's *_async twin
    ├── RuntimeClosed                                 the runtime was closed
    ├── ExtraNotInstalled              (ImportError)  .extra: pip install 'retinue[extra]'
    ├── ModelCallFailed                               .provider, .status: retries spent
    ├── McpServerError                                .server: an MCP server failed to start or died
    ├── ClusterError                                  retinue.cluster: Ray or a shard failed
    │   └── ShardUnavailable                          .shard: no answer within the retry bound
    └── StoreError                                    the LMDB store refused
        ├── StoreCorrupted                            .path: damaged, truncated or lost data
        ├── StoreLocked                               .pid: another writer holds it
        ├── StoreReadOnly                             a mutating call on a reader
        └── StoreVersionError                         written by a newer retinue

Outside the tree, as a ``BaseException`` (so ``except Exception`` cannot
swallow it, like asyncio's ``CancelledError``)::

    TurnInterrupted                                   the calling turn was interrupted

Messages say what was wrong and what to do, and never carry a traceback, so
they can be shown to a model as a tool result.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ActiveDescendants",
    "AgentBusy",
    "AgentClosed",
    "AgentLimitExceeded",
    "AgentStateError",
    "ApprovalAlreadyAnswered",
    "ArgumentTypeError",
    "BlockingCallInAsyncRunner",
    "ClusterError",
    "CompletionBacklogFull",
    "ConfigurationError",
    "CostBudgetExceeded",
    "DedupKeyTooLong",
    "DelegationCycleError",
    "DelegationDepthError",
    "DelegationGraphError",
    "DepthLimitExceeded",
    "DuplicateAgentPath",
    "ExtraNotInstalled",
    "FanoutLimitExceeded",
    "InvalidAgentPath",
    "InvalidArgument",
    "InvalidLimits",
    "LimitExceeded",
    "MailboxFull",
    "McpServerError",
    "MessageTooLarge",
    "ModelCallFailed",
    "NotPermitted",
    "NothingToWaitFor",
    "RestartLimitExceeded",
    "ResultContractError",
    "RetinueError",
    "RuntimeClosed",
    "ShardUnavailable",
    "StoreCorrupted",
    "StoreError",
    "StoreLocked",
    "StoreReadOnly",
    "StoreVersionError",
    "TeamFileError",
    "TokenBudgetExceeded",
    "ToolCallLimitExceeded",
    "ToolsNotPermitted",
    "TurnInterrupted",
    "UnknownAgent",
    "UnknownApproval",
    "UnknownProfile",
    "WaitTimeout",
]


class RetinueError(Exception):
    """Root of every error retinue raises."""


class InvalidAgentPath(RetinueError, ValueError):
    """An agent name or path breaks the path rules."""


class InvalidLimits(RetinueError, ValueError):
    """A Limits field, or the environment variable that sets it, is invalid."""


class InvalidArgument(RetinueError, ValueError):
    """An argument is out of range or of the wrong shape."""


class ArgumentTypeError(RetinueError, TypeError):
    """An argument has the wrong type (a number where a string belongs, say)."""


class ConfigurationError(RetinueError, ValueError):
    """The profiles or options given to ``Runtime.open`` cannot work."""


class TeamFileError(ConfigurationError):
    """A team file is unusable; ``.source``, ``.table`` and ``.key`` say where.

    The message reads ``<file>: [<table>] key '<key>': <what is wrong>``.
    """

    def __init__(self, source: str, table: str, key: str, problem: str) -> None:
        self.source = source
        self.table = table
        self.key = key
        self.problem = problem
        where = f"[{table}] " if table else ""
        if key:
            where += f"key {key!r}: "
        super().__init__(f"{source}: {where}{problem}")


class DelegationGraphError(RetinueError, ValueError):
    """The profiles' delegation graph is unusable."""


class DelegationCycleError(DelegationGraphError):
    """Profiles delegate to each other in a cycle; ``.cycle`` lists it."""

    def __init__(self, cycle: list[str]) -> None:
        self.cycle = list(cycle)
        super().__init__("subagent cycle detected: " + " -> ".join(self.cycle))


class DelegationDepthError(DelegationGraphError):
    """A delegation chain is deeper than the depth cap."""

    def __init__(self, depth: int, cap: int) -> None:
        self.depth = depth
        self.cap = cap
        super().__init__(f"subagent depth {depth} exceeds cap {cap}")


class ResultContractError(RetinueError, ValueError):
    """A structured result breaks the contract; ``.field`` names where."""

    def __init__(self, message: str, field: str = "") -> None:
        self.field = field
        super().__init__(message)


class UnknownProfile(RetinueError, LookupError):
    """No profile of that name is defined."""


class UnknownAgent(RetinueError, LookupError):
    """No agent has that id or live path."""


class UnknownApproval(RetinueError, LookupError):
    """No approval request has that id (see ``Runtime.approvals``)."""


class ApprovalAlreadyAnswered(RetinueError):
    """The approval request was approved, denied or timed out before; it takes one answer."""


class DuplicateAgentPath(RetinueError, ValueError):
    """A live sibling already holds that name."""


class NotPermitted(RetinueError):
    """The sender may not do that (spawn that profile, message that agent)."""


class ToolsNotPermitted(NotPermitted, ConfigurationError):
    """A child's tools exceed its parent's (the capability ceiling); ``.extra`` names them.

    Raised when the profiles are checked (``Runtime.open``, ``retinue
    validate``), so it is also a :class:`ConfigurationError`: with the
    ceilings checked there, no spawn can exceed them.
    """

    def __init__(self, message: str, extra: tuple[str, ...] = ()) -> None:
        self.extra = tuple(extra)
        super().__init__(message)


class LimitExceeded(RetinueError):
    """A configured bound was hit; raise the limit or wait for work to finish.

    ``.limit`` is the bound in force (e.g. ``depth_cap``'s value), ``.value``
    the figure that hit it (the depth the new agent would have, the live
    children already there, the message's size in bytes...), and ``.path``
    the agent path the bound applies to, when one does (else None).
    """

    def __init__(
        self,
        message: str,
        *,
        limit: int | float | None = None,
        value: int | float | None = None,
        path: str | None = None,
    ) -> None:
        self.limit = limit
        self.value = value
        self.path = path
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with every attribute (for processes and executors), subclasses' too."""
        return (_rebuild_limit_error, (type(self), self.args, dict(self.__dict__)))


class DepthLimitExceeded(LimitExceeded):
    """The new agent would be deeper than ``depth_cap``."""


class FanoutLimitExceeded(LimitExceeded):
    """The parent already has ``fanout_cap`` live children (or a batch is larger)."""


class AgentLimitExceeded(LimitExceeded):
    """``max_tree_agents`` or ``max_agents`` live agents already exist."""


class MailboxFull(LimitExceeded):
    """The recipient already holds ``mailbox_capacity`` unread messages."""


class MessageTooLarge(LimitExceeded, ValueError):
    """The message is larger than ``message_max_bytes``."""


class DedupKeyTooLong(LimitExceeded, ValueError):
    """The deduplication key is longer than ``dedup_key_max_length``."""


class CompletionBacklogFull(LimitExceeded):
    """The agent has ``pending_completions_per_agent`` completions unreceived."""


class TokenBudgetExceeded(LimitExceeded):
    """A model token budget (``tokens_per_agent`` or ``tokens_per_tree``) is spent.

    ``budget`` names the limit, ``limit`` is its value and ``used`` the tokens
    spent when the turn stopped.
    """

    def __init__(
        self,
        message: str,
        *,
        budget: str = "",
        limit: int = 0,
        used: int = 0,
        path: str | None = None,
    ) -> None:
        self.budget = budget
        self.used = used
        super().__init__(message, limit=limit, value=used, path=path)


class CostBudgetExceeded(LimitExceeded):
    """A model cost budget (``usd_per_agent`` or ``usd_per_tree``) is spent.

    ``budget`` names the limit, ``limit`` is its value in USD and ``used``
    (also ``.value``) the cost spent when the turn stopped; ``.path`` the agent
    (None for a tree's budget).
    """

    def __init__(
        self,
        message: str,
        *,
        budget: str = "",
        limit: float = 0.0,
        used: float = 0.0,
        path: str | None = None,
    ) -> None:
        self.budget = budget
        self.used = used
        super().__init__(message, limit=limit, value=used, path=path)


class RestartLimitExceeded(LimitExceeded):
    """A restart policy gave up: one more restart would pass ``max_restarts`` within ``within_s``.

    It is the error of the ``failed`` completion that escalates to the parent
    (``RestartLimitExceeded: 3 restarts within 60 s; last error: ...``);
    ``.limit`` is ``max_restarts``, ``.value`` the restarts made, ``.path`` the agent.
    """


class ToolCallLimitExceeded(LimitExceeded):
    """A turn asked for more tool calls than its ``max_tool_calls``.

    ``.limit`` is ``max_tool_calls``, ``.value`` the calls the turn asked for
    in all, ``.path`` the agent's path.
    """


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


class RuntimeClosed(RetinueError):
    """The runtime is closed; open it again to continue."""


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


def _rebuild_limit_error(
    cls: type[LimitExceeded], args: tuple[Any, ...], state: dict[str, Any]
) -> LimitExceeded:
    """Rebuild a pickled :class:`LimitExceeded` (any subclass) with its attributes."""
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


def _rebuild_with_path(cls: type[Any], message: str, path: str | None) -> Any:
    """Rebuild a pickled error that carries ``.path``."""
    return cls(message, path=path)
