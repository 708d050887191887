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
    │   ├── CrashLoop                                 a task lost max_lost times in a row
    │   ├── ProviderLimitExceeded                     .match: a call larger than a provider limit
    │   ├── PageLimitExceeded                         agents(limit=) above agents_page_max
    │   └── ToolCallLimitExceeded                     a turn made max_tool_calls calls
    ├── AgentStateError                               wrong state for the call
    │   ├── AgentClosed
    │   ├── AgentBusy
    │   ├── ActiveDescendants
    │   ├── NothingToWaitFor                          an idle agent, all received
    │   └── GenerationNotKept          (LookupError)  a fork's generation is not kept
    ├── WaitTimeout                    (TimeoutError) the agent keeps running
    ├── BlockingCallInAsyncRunner      (RuntimeError) use the turn's *_async twin
    ├── RuntimeClosed                                 the runtime was closed
    ├── ExtraNotInstalled              (ImportError)  .extra: pip install 'retinue[extra]'
    ├── ModelCallFailed                               .provider, .status: retries spent
    ├── CassetteError                                 .path: a cassette unusable as it is
    │   └── CassetteMiss                              .agent, .index, .field: not recorded
    ├── PermanentError                                a runner's failure not worth a restart
    ├── McpServerError                                .server: an MCP server failed to start or died
    ├── InternalError                                 .command, .cause: retinue failed on a command
    ├── ClusterError                                  retinue.cluster: Ray or a shard failed
    │   ├── ShardUnavailable                          .shard: no answer within the retry bound
    │   └── OutboxFull                                .limit, .owed: too many lease calls owed
    ├── ControlError                                  a call over the control socket failed
    │   └── NoWriter                                  .path, .stale: no writer serves the socket
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

from retinue.errors._agents import (
    ActiveDescendants,
    AgentBusy,
    AgentClosed,
    AgentStateError,
    BlockingCallInAsyncRunner,
    GenerationNotKept,
    NothingToWaitFor,
    RuntimeClosed,
    TurnInterrupted,
    WaitTimeout,
    _rebuild_with_path,
)
from retinue.errors._cassettes import (
    CassetteError,
    CassetteMiss,
    _rebuild_cassette_error,
    _rebuild_miss,
)
from retinue.errors._control import ControlError, NoWriter
from retinue.errors._external import (
    ClusterError,
    ExtraNotInstalled,
    McpServerError,
    ModelCallFailed,
    OutboxFull,
    ShardUnavailable,
)
from retinue.errors._failures import PermanentError
from retinue.errors._limits import (
    AgentLimitExceeded,
    CompletionBacklogFull,
    CostBudgetExceeded,
    CrashLoop,
    DedupKeyTooLong,
    DepthLimitExceeded,
    FanoutLimitExceeded,
    LimitExceeded,
    MailboxFull,
    MessageTooLarge,
    PageLimitExceeded,
    ProviderLimitExceeded,
    RestartLimitExceeded,
    TokenBudgetExceeded,
    ToolCallLimitExceeded,
    _rebuild_limit_error,
)
from retinue.errors._root import InternalError, RetinueError, _rebuild_error
from retinue.errors._store import (
    StoreCorrupted,
    StoreError,
    StoreLocked,
    StoreReadOnly,
    StoreVersionError,
)
from retinue.errors._usage import (
    ApprovalAlreadyAnswered,
    ArgumentTypeError,
    ConfigurationError,
    DelegationCycleError,
    DelegationDepthError,
    DelegationGraphError,
    DuplicateAgentPath,
    InvalidAgentPath,
    InvalidArgument,
    InvalidLimits,
    NotPermitted,
    ResultContractError,
    TeamFileError,
    ToolsNotPermitted,
    UnknownAgent,
    UnknownApproval,
    UnknownProfile,
)

__all__ = [
    "ActiveDescendants",
    "AgentBusy",
    "AgentClosed",
    "AgentLimitExceeded",
    "AgentStateError",
    "ApprovalAlreadyAnswered",
    "ArgumentTypeError",
    "BlockingCallInAsyncRunner",
    "CassetteError",
    "CassetteMiss",
    "ClusterError",
    "CompletionBacklogFull",
    "ConfigurationError",
    "ControlError",
    "CostBudgetExceeded",
    "CrashLoop",
    "DedupKeyTooLong",
    "DelegationCycleError",
    "DelegationDepthError",
    "DelegationGraphError",
    "DepthLimitExceeded",
    "DuplicateAgentPath",
    "ExtraNotInstalled",
    "FanoutLimitExceeded",
    "GenerationNotKept",
    "InternalError",
    "InvalidAgentPath",
    "InvalidArgument",
    "InvalidLimits",
    "LimitExceeded",
    "MailboxFull",
    "McpServerError",
    "MessageTooLarge",
    "ModelCallFailed",
    "NoWriter",
    "NotPermitted",
    "NothingToWaitFor",
    "OutboxFull",
    "PageLimitExceeded",
    "PermanentError",
    "ProviderLimitExceeded",
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


def _publish() -> None:
    """Name this package as the module of every error (and of the pickling helpers).

    The classes live in private modules by theme; tracebacks, ``repr`` and
    pickles name them ``retinue.errors.<Name>``, where users import them, so a
    move between the private modules changes nothing a user or a pickle sees.
    """
    namespace = globals()
    helpers = (
        _rebuild_error,
        _rebuild_limit_error,
        _rebuild_with_path,
        _rebuild_cassette_error,
        _rebuild_miss,
    )
    for published in (*(namespace[name] for name in __all__), *helpers):
        published.__module__ = __name__


_publish()
