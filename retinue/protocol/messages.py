"""The host-facing vocabulary: agent states, agent info, messages, completions, events.

All are frozen msgspec structs, so they cross threads safely and encode to
msgpack or JSON as they are. Schema rule: fields are only ever added at the
end, with defaults; a stored field is never renamed or reordered.
"""

from __future__ import annotations

import enum
from typing import Literal

import msgspec

from retinue.protocol.usage import Usage

__all__ = [
    "AgentClosedEvent",
    "AgentInfo",
    "AgentSpawned",
    "AgentState",
    "ApprovalAnswered",
    "ApprovalRequested",
    "Completion",
    "CompletionRouted",
    "CompletionStatus",
    "Event",
    "EventsDropped",
    "ForkedFrom",
    "McpServerEvent",
    "Message",
    "MessageQueued",
    "ModelCallFinished",
    "ModelDelta",
    "ProviderBackoff",
    "RunnerAbandoned",
    "StoreMapFilling",
    "ToolCallFinished",
    "ToolCallInDoubt",
    "ToolCallStarted",
    "TurnQueued",
    "TurnRestarting",
    "TurnSettled",
    "TurnStarted",
    "Usage",
]


class AgentState(enum.StrEnum):
    """Where an agent is in its life.

    ``starting``: a turn is queued for a slot; ``running``: a turn runs;
    ``completed``/``failed``/``interrupted``: the last turn settled so;
    ``closed``: the agent is gone and its name is free; ``restarting``: its
    restart policy restarts a failed (or lost) turn once a backoff has passed;
    ``awaiting_approval``: its turn is parked until a tool call it asked for
    is approved or denied. The two waiting states hold no turn slot and no
    thread, and survive a crash.
    """

    STARTING = "starting"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CLOSED = "closed"
    RESTARTING = "restarting"
    AWAITING_APPROVAL = "awaiting_approval"

    @property
    def busy(self) -> bool:
        """True while the task's outcome is still to come: a turn is queued or running, a
        restart is pending or a tool call waits for approval."""
        return self in _BUSY

    @property
    def has_turn(self) -> bool:
        """True while a turn is queued or running (``starting`` or ``running``)."""
        return self is AgentState.STARTING or self is AgentState.RUNNING

    @property
    def settled(self) -> bool:
        """True once the last turn settled (completed, failed or interrupted), not closed."""
        return self in _SETTLED

    @property
    def idle_after_work(self) -> bool:
        """True if the last turn ended on its own (completed or failed): a wake may follow."""
        return self is AgentState.COMPLETED or self is AgentState.FAILED


_BUSY = frozenset(
    {
        AgentState.STARTING,
        AgentState.RUNNING,
        AgentState.RESTARTING,
        AgentState.AWAITING_APPROVAL,
    }
)
_SETTLED = frozenset({AgentState.COMPLETED, AgentState.FAILED, AgentState.INTERRUPTED})


class CompletionStatus(enum.StrEnum):
    """How a turn settled."""

    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class ForkedFrom(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where a fork came from: its origin's ``agent_id`` and ``path`` and the ``generation``
    it was forked as of (the fork's own numbering carries on from there).

    ``trace`` is the W3C ``traceparent`` of the origin's span (the turn that
    ended that generation, else the span its turns continue): the fork's first
    turn links to it (None: the origin traced nothing).
    """

    agent_id: str
    path: str
    generation: int
    trace: str | None = None


class AgentInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A snapshot of one agent, as the supervisor last committed it.

    ``usage`` is what this agent's model calls spent over all its turns;
    ``tree_usage``, on a top-level agent only (None on the others), is what
    its whole tree spent, closed and compacted descendants included.
    ``started_at`` is when its current (or last) turn started running (None:
    no turn has run yet). ``attempt`` counts the runs of its current (or
    last) task: 1 for a first run, n for the (n-1)th restart; ``last_error``
    is the error of the attempt a restart policy restarted (None: none was);
    ``restart_due_at`` is when a pending restart runs (``restarting`` only);
    ``error_type`` is ``error``'s class (as :attr:`Completion.error_type`).
    ``forked_from`` says which agent and generation a fork was made from
    (``Runtime.fork``; None: not a fork).
    ``in_doubt`` counts its tool calls in doubt: calls that were running when
    its last turn stopped (a crash, an interrupt) and have no result yet;
    its next turn acts on them (``Runtime.inspect`` lists them).
    """

    id: str
    name: str
    path: str
    profile: str
    parent_path: str
    depth: int
    state: AgentState
    generation: int
    task: str
    output: str | None = None
    error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    usage: Usage = Usage()
    tree_usage: Usage | None = None
    started_at: float | None = None
    attempt: int = 1
    last_error: str | None = None
    restart_due_at: float | None = None
    error_type: str | None = None
    forked_from: ForkedFrom | None = None
    in_doubt: int = 0


class Completion(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The one result of one settled task, identified by ``<agent id>:<generation>``.

    ``attempt`` is the run of the task that settled (1 unless a restart policy
    restarted it): the task's runs were generations ``generation - attempt + 1``
    to ``generation``, and only the last has a completion. A ``failed`` one's
    ``error_type`` is the class name of the exception that ended the turn, or
    the supervisor's verdict (``"TurnTimeout"``, ``"RestartLimitExceeded"``,
    ``"CrashLoop"``): see :mod:`retinue.protocol.failures`.
    """

    id: str
    agent_id: str
    path: str
    generation: int
    status: CompletionStatus
    output: str | None = None
    error: str | None = None
    created_at: float = 0.0
    attempt: int = 1
    error_type: str | None = None


class Message(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One mailbox entry: a message (``kind="message"``) or a child's completion.

    ``sender`` is the sender's path (``/root`` for the host); ``completion``
    is set only for ``kind="completion"``. ``seq`` is its place in the
    runtime's arrival order (the mailbox order).
    """

    id: str
    kind: Literal["message", "completion"]
    sender: str
    sender_id: str
    recipient: str
    recipient_id: str
    content: str
    dedup_key: str | None = None
    created_at: float = 0.0
    completion: Completion | None = None
    seq: int = 0


class _EventBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", gc=False):
    """Common fields of every published event.

    Out of the cyclic collector (``gc=False``, inherited by every event): an event holds
    only strings, numbers, booleans and None, so it can never be part of a reference
    cycle; built outside the collector it adds nothing to the young generation's count,
    and queued in a listener's buffer (up to ``event_queue_capacity`` each) it is never
    scanned by a collection.
    """

    agent_id: str
    path: str
    at: float


class AgentSpawned(_EventBase, frozen=True, tag="agent_spawned"):
    """An agent was recorded."""

    profile: str
    parent_path: str


class TurnQueued(_EventBase, frozen=True, tag="turn_queued"):
    """A turn was queued (the agent is ``starting``)."""

    generation: int


class TurnStarted(_EventBase, frozen=True, tag="turn_started"):
    """A turn got a slot and its runner was started."""

    generation: int


class TurnSettled(_EventBase, frozen=True, tag="turn_settled"):
    """A turn settled; ``status`` is completed, failed or interrupted.

    ``error`` is the failed turn's error and ``error_type`` its class (a later
    turn may have replaced them on the agent's record by the time it is read).
    """

    generation: int
    status: CompletionStatus
    error: str | None = None
    error_type: str | None = None


class MessageQueued(_EventBase, frozen=True, tag="message_queued"):
    """A message landed in ``path``'s mailbox."""

    message_id: str
    sender: str


class CompletionRouted(_EventBase, frozen=True, tag="completion_routed"):
    """A completion was routed to ``recipient`` (``/root`` is the host)."""

    completion_id: str
    recipient: str


class AgentClosedEvent(_EventBase, frozen=True, tag="agent_closed"):
    """An agent was closed."""


class EventsDropped(_EventBase, frozen=True, tag="events_dropped"):
    """This subscriber fell behind and lost its ``dropped`` oldest queued events.

    It arrives where the gap is: every event delivered after it is newer than
    every event dropped. It is about no agent: ``agent_id`` is ``""`` and
    ``path`` is ``/root``. Only the subscriber that fell behind receives it.
    """

    dropped: int


class RunnerAbandoned(_EventBase, frozen=True, tag="runner_abandoned"):
    """A sync runner ignored its turn's interrupt and keeps its thread until it returns.

    ``abandoned`` counts such runners now (this one included); past
    ``Limits.max_abandoned_runners`` new sync turns wait as ``starting``.
    """

    generation: int
    abandoned: int


class TurnRestarting(_EventBase, frozen=True, tag="turn_restarting"):
    """A failed (or lost) turn is restarted as ``generation``, its ``attempt``, in ``delay_s``.

    The failed attempt makes no completion; ``error`` is why it failed, and
    ``error_type`` its class (None for a turn lost in a crash).
    """

    generation: int
    attempt: int
    delay_s: float
    error: str
    error_type: str | None = None


class ApprovalRequested(_EventBase, frozen=True, tag="approval_requested"):
    """A model asked for a tool call that needs approval; its turn is parked until answered.

    ``in_doubt``: the call was running when its turn stopped and may or may
    not have taken effect; approving runs it again (with the same key).
    """

    request_id: str
    tool: str
    arguments: str
    in_doubt: bool = False


class ApprovalAnswered(_EventBase, frozen=True, tag="approval_answered"):
    """An approval request was answered: ``approved``, or ``denied`` with ``reason``."""

    request_id: str
    tool: str
    approved: bool
    reason: str | None = None


class McpServerEvent(_EventBase, frozen=True, tag="mcp_server"):
    """An MCP server of the runtime changed: it ``started``, ``died``, failed to start
    (``start_failed``), changed its tools (``tools_changed``), had a tool refused
    (``tool_refused``: a schema over the bound, or two granted tools a model would
    see under one name) or was ``closed``.

    It is about no agent: ``agent_id`` is ``""`` and ``path`` is ``/root``.
    ``failures`` counts the failures in a row (starts and deaths) so far;
    ``detail`` says what happened (an exit code, the end of its stderr).
    """

    server: str
    status: str
    detail: str = ""
    failures: int = 0


class StoreMapFilling(_EventBase, frozen=True, tag="store_map_filling"):
    """The store file's high-water mark passed ``Limits.store_map_warn_ratio`` of its LMDB map.

    Published once per map size, after the commit that crossed the share. The
    writer doubles a full map by itself, so nothing fails yet: the warning is
    there to act before the disk runs out. ``used_bytes`` is the file up to its
    high-water mark; ``in_use_bytes`` about the size of a compacting copy
    (``compact(reclaim=True)`` gives back the ``free_bytes`` between them);
    ``map_headroom_bytes`` how far the file can grow before the map doubles;
    ``disk_free_bytes`` what the file system has left. It is about no agent:
    ``agent_id`` is ``""`` and ``path`` is ``/root``.
    """

    file_bytes: int
    used_bytes: int
    in_use_bytes: int
    free_bytes: int
    map_bytes: int
    map_headroom_bytes: int
    disk_free_bytes: int


class ToolCallStarted(_EventBase, frozen=True, tag="tool_call_started"):
    """A model agent's turn started a tool call (published as it happens, not stored).

    ``arguments_preview`` is the start of the arguments' JSON text, cut at
    ``Limits.event_preview_bytes`` with ``…[truncated]``.
    """

    call_id: str
    tool: str
    arguments_preview: str


class ToolCallFinished(_EventBase, frozen=True, tag="tool_call_finished"):
    """A tool call of a model agent's turn ended: ``ok``, or not with ``error`` (the error
    result the model was given, cut at ``Limits.event_preview_bytes``)."""

    call_id: str
    tool: str
    ok: bool
    duration_s: float
    error: str | None = None


class ToolCallInDoubt(_EventBase, frozen=True, tag="tool_call_in_doubt"):
    """A tool call was found in doubt (it was running when its turn stopped, and has no
    result) and its agent's turn acted on it.

    ``effect`` is the class it ran under, ``idempotency_key`` the key every run
    of it carries; ``action`` says what was done: ``rerun`` (a read or
    idempotent call, run again with the same key), ``reported`` (an unsafe
    call, not run again: the model is told it is in doubt) or ``approval``
    (an unsafe call sent to a person, ``Profile(in_doubt="approve")``).
    """

    call_id: str
    tool: str
    idempotency_key: str
    effect: str
    action: str


class ModelCallFinished(_EventBase, frozen=True, tag="model_call_finished"):
    """A model call of a turn was answered; ``duration_s`` runs from its first attempt to the
    answer (retries included), ``cost_usd`` is litellm's price (0.0 if it has none)."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    duration_s: float


class ModelDelta(_EventBase, frozen=True, tag="model_delta"):
    """A piece of a streamed answer's text, as it arrives (``LiteLLMRunner(stream=True)``).

    Deltas are live only, never stored: the assembled answer is. A call that is
    retried streams its answer again from the start.
    """

    text: str


class ProviderBackoff(_EventBase, frozen=True, tag="provider_backoff"):
    """A provider limit backed off after a 429 of a model call of ``path`` (see
    :class:`retinue.ProviderLimit`).

    ``match`` is the limit charged (the call's most specific); ``lowered`` says
    whether its adaptive in-flight level went from ``level_before`` to
    ``level`` (None: unbounded); ``retry_after_s`` is how long a
    ``Retry-After`` closes the limit for every call it covers (None: the
    provider sent none); ``rate_limited`` counts the limit's 429s so far.
    Published when the level is lowered or the limit closed, not for every 429.
    """

    model: str
    match: str
    lowered: bool
    level_before: float | None
    level: float | None
    retry_after_s: float | None
    rate_limited: int


Event = (
    AgentSpawned
    | TurnQueued
    | TurnStarted
    | TurnSettled
    | MessageQueued
    | CompletionRouted
    | AgentClosedEvent
    | EventsDropped
    | RunnerAbandoned
    | StoreMapFilling
    | McpServerEvent
    | TurnRestarting
    | ApprovalRequested
    | ApprovalAnswered
    | ToolCallStarted
    | ToolCallFinished
    | ToolCallInDoubt
    | ModelCallFinished
    | ModelDelta
    | ProviderBackoff
)
