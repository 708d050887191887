"""retinue: an embeddable, supervised actor runtime for trees of LLM subagents.

Every agent is a pykka actor with a durable mailbox; one supervisor owns the
tree, enforces the caps and routes completions; the tree lives in an embedded
LMDB store and comes back after a crash with running agents ``interrupted``.

The names below are the public API; everything else is internal.
"""

from __future__ import annotations

from retinue.actors.profile import Profile, Runner
from retinue.actors.turn import Turn
from retinue.errors import (
    ActiveDescendants,
    AgentBusy,
    AgentClosed,
    AgentLimitExceeded,
    AgentStateError,
    ArgumentTypeError,
    CompletionBacklogFull,
    ConfigurationError,
    DedupKeyTooLong,
    DelegationCycleError,
    DelegationDepthError,
    DelegationGraphError,
    DepthLimitExceeded,
    DuplicateAgentPath,
    FanoutLimitExceeded,
    InvalidAgentPath,
    InvalidArgument,
    InvalidLimits,
    LimitExceeded,
    MailboxFull,
    MessageTooLarge,
    NotPermitted,
    ResultContractError,
    RetinueError,
    RuntimeClosed,
    StoreError,
    StoreLocked,
    StoreReadOnly,
    StoreVersionError,
    TurnInterrupted,
    UnknownAgent,
    UnknownProfile,
    WaitTimeout,
)
from retinue.persistence.restore import Diagnostic
from retinue.persistence.store import Durability
from retinue.protocol.graph import validate_graph
from retinue.protocol.limits import Limits
from retinue.protocol.messages import (
    AgentClosedEvent,
    AgentInfo,
    AgentSpawned,
    AgentState,
    Completion,
    CompletionRouted,
    CompletionStatus,
    Event,
    Message,
    MessageQueued,
    TurnQueued,
    TurnSettled,
    TurnStarted,
)
from retinue.protocol.results import StructuredResult, parse_result, result_instruction
from retinue.runtime import Runtime

__all__ = [
    "ActiveDescendants",
    "AgentBusy",
    "AgentClosed",
    "AgentClosedEvent",
    "AgentInfo",
    "AgentLimitExceeded",
    "AgentSpawned",
    "AgentState",
    "AgentStateError",
    "ArgumentTypeError",
    "Completion",
    "CompletionBacklogFull",
    "CompletionRouted",
    "CompletionStatus",
    "ConfigurationError",
    "DedupKeyTooLong",
    "DelegationCycleError",
    "DelegationDepthError",
    "DelegationGraphError",
    "DepthLimitExceeded",
    "Diagnostic",
    "DuplicateAgentPath",
    "Durability",
    "Event",
    "FanoutLimitExceeded",
    "InvalidAgentPath",
    "InvalidArgument",
    "InvalidLimits",
    "LimitExceeded",
    "Limits",
    "MailboxFull",
    "Message",
    "MessageQueued",
    "MessageTooLarge",
    "NotPermitted",
    "Profile",
    "ResultContractError",
    "RetinueError",
    "Runner",
    "Runtime",
    "RuntimeClosed",
    "StoreError",
    "StoreLocked",
    "StoreReadOnly",
    "StoreVersionError",
    "StructuredResult",
    "Turn",
    "TurnInterrupted",
    "TurnQueued",
    "TurnSettled",
    "TurnStarted",
    "UnknownAgent",
    "UnknownProfile",
    "WaitTimeout",
    "parse_result",
    "result_instruction",
    "validate_graph",
]
