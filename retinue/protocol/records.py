"""What the store keeps: versioned msgspec structs, one per LMDB record.

``SCHEMA_VERSION`` is written in the store's meta database. Evolution rules:
a new field goes at the end with a default (old records still decode); a
field's default never changes (a struct stored with ``omit_defaults``, as
:class:`AgentRecord` is, does not store a field at its default, so a new
default would change what old records read back as); a change that cannot be
expressed so bumps ``SCHEMA_VERSION`` and adds a migration step in
``retinue.persistence.migrations``.
"""

from __future__ import annotations

import msgspec

from retinue.protocol.messages import AgentState, Completion, ForkedFrom, Message, Usage
from retinue.protocol.supervision import RestartRecord

__all__ = [
    "SCHEMA_VERSION",
    "TRANSCRIPT_VERSION",
    "AgentRecord",
    "CompletionRecord",
    "GenerationEnd",
    "GenerationRecord",
    "JournaledCall",
    "MessageRecord",
    "ModelCallRecord",
    "ToolCallRecord",
    "ToolStep",
    "TranscriptMessage",
    "TranscriptRecord",
    "completion_key",
    "generation_key",
    "message_key",
    "open_count",
]

SCHEMA_VERSION = 2


class GenerationEnd(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """How an agent's generation ``generation`` ended: the ``state`` it settled in
    (completed, failed or interrupted), when (``at``, epoch seconds, the supervisor's
    clock) and the W3C ``traceparent`` of the turn that ended it (``span``; None:
    unknown).

    It rides on the agent's record (:attr:`AgentRecord.ended`), written by the
    settle anyway: while that generation is the agent's newest, the record and
    this are its :class:`GenerationRecord`, which the store writes on its own
    only once a newer generation starts.
    """

    generation: int
    state: AgentState
    at: float
    span: str | None = None


class AgentRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """One agent as stored (keyed by its id).

    ``parent_id`` is None for a top-level agent. ``host_received`` is the
    highest generation whose completion the host has received through wait;
    ``host_returned`` lists the generations below it the host gave back (a
    wait cancelled after it was answered): the host receives them again,
    oldest first, so each completion reaches the host exactly once.
    ``usage`` is what this agent's model calls spent; ``tree_usage``, kept on
    a top-level agent only, is what its whole tree spent (it survives the
    compaction of closed descendants). ``idempotency_key`` is the key the
    spawn that made it gave: a spawn under the same parent with the same key
    returns this agent instead of a new one, for as long as it is stored.
    ``started_at`` is when its current (or last) turn's runner started.
    ``attempt``, ``last_error`` and ``restart_due_at`` are the restart policy's
    (see :class:`~retinue.protocol.messages.AgentInfo`); ``restarts`` are the
    times of the current task's restarts, for the policy's intensity.
    ``trace`` is the W3C ``traceparent`` of the span that spawned it (or, with
    none, of its first turn's span), which every turn's span continues, in
    this process or the next (None: the runtime traced nothing).
    ``error_type`` is the class of ``error`` when the last turn failed (see
    :mod:`retinue.protocol.failures`). ``restart`` is the restart policy in
    force for the agent (its profile's, recorded at each new task and each
    decision; None: none), so an open that lacks the profile decides as it
    says; ``lost`` counts the current task's attempts lost in a row while
    running (``Restart.max_lost``).
    ``forked_from`` names the agent and generation a fork was made from
    (:meth:`Runtime.fork <retinue.Runtime.fork>`; None: not a fork).
    ``origin`` is what the current task's first attempt was for (``spawn``,
    ``follow_up``, ``wake``, ``resume``): a restarted attempt's ``turn.origin``
    (an agent stored before the field existed reads ``spawn``).
    ``open_calls`` counts the tool calls its stored journal holds without a
    result that may have started (see :class:`ToolStep`): once its turn is not
    running they are in doubt, and the record says exactly how many. While the
    turn runs they are in flight and the count is the journal's: a step that
    changes only the journal (and the transcript) does not rewrite the record,
    so a running agent's record may count as of its last write (the supervisor
    holds the newer count, written with the record's next change, and an open
    after a crash counts the journal of every turn it finds running).
    ``ended`` is how its newest settled generation ended (see :class:`GenerationEnd`;
    None: none settled since this field exists, or its generation is kept as a
    :class:`GenerationRecord` already); it is stale once ``generation`` moved past it.

    Stored without the fields at their defaults (``omit_defaults``: most of them, for
    most agents): a record decodes them back as those defaults, and one stored with
    every field (before this) decodes the same.
    """

    id: str
    name: str
    path: str
    profile: str
    parent_id: str | None
    parent_path: str
    depth: int
    state: AgentState
    generation: int
    task: str
    output: str | None = None
    error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    host_received: int = 0
    closed_at: float | None = None
    usage: Usage = Usage()
    tree_usage: Usage = Usage()
    host_returned: tuple[int, ...] = ()
    idempotency_key: str | None = None
    started_at: float | None = None
    attempt: int = 1
    last_error: str | None = None
    restart_due_at: float | None = None
    restarts: tuple[float, ...] = ()
    trace: str | None = None
    error_type: str | None = None
    restart: RestartRecord | None = None
    lost: int = 0
    origin: str = "spawn"
    forked_from: ForkedFrom | None = None
    open_calls: int = 0
    ended: GenerationEnd | None = None


class MessageRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One mailbox message as stored (keyed by recipient id and sequence)."""

    message: Message
    seq: int
    read: bool = False
    read_at: float | None = None
    read_generation: int = 0
    """The recipient's turn that read it (0: not read by a turn)."""


class CompletionRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One completion as stored (keyed by agent id and generation).

    ``recipient_id`` is the agent it was routed to, None for the host;
    ``delivered`` turns true once that recipient received it. Inputs a turn
    received are tagged with its generation, so a turn killed by a crash
    hands them to the next turn again.
    """

    completion: Completion
    recipient_id: str | None
    seq: int
    delivered: bool = False
    delivered_generation: int = 0
    """The recipient's turn that received it (0: the host, or not yet)."""


def message_key(recipient_id: str, seq: int) -> bytes:
    """Return the store key of message ``seq`` in ``recipient_id``'s mailbox."""
    return f"{recipient_id}:{seq:016x}".encode()


def completion_key(agent_id: str, generation: int) -> bytes:
    """Return the store key of ``agent_id``'s completion for ``generation``."""
    return f"{agent_id}:{generation:010d}".encode()


class GenerationRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One settled generation of an agent, kept to fork it as of then (keyed by
    :func:`generation_key`; the newest ``Limits.fork_generations`` per agent). The
    newest is not stored while it is the agent's newest generation: the agent's
    record carries it (:attr:`AgentRecord.ended`); it is stored as a newer one
    starts (a restarted attempt's at once).

    ``agent`` is the agent's record as the generation ended (its task, state,
    output, error); ``settled_at`` when it ended (epoch seconds, the
    supervisor's clock); ``span`` the W3C ``traceparent`` of the turn that
    ended it, when its runner reported one.
    """

    agent: AgentRecord
    settled_at: float
    span: str | None = None


def generation_key(agent_id: str, generation: int) -> bytes:
    """Return the store key of ``agent_id``'s :class:`GenerationRecord` of ``generation``."""
    return f"{agent_id}:{generation:010d}".encode()


TRANSCRIPT_VERSION = 1
"""The ``version`` of :class:`TranscriptRecord` this retinue writes."""


class ToolCallRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One tool call a model made: its id, the tool's name and the raw JSON arguments."""

    id: str
    name: str
    arguments: str


class ModelCallRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One model call of an LLM agent, kept with its transcript for the web view's timeline.

    ``generation`` is the turn that made it, ``turn_started_at`` when that turn
    started; ``started_at`` and ``ended_at`` (epoch seconds) bracket the call,
    retries included; the tokens are its usage.
    """

    model: str
    generation: int
    turn_started_at: float | None = None
    started_at: float
    ended_at: float
    prompt_tokens: int = 0
    completion_tokens: int = 0


class TranscriptMessage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One chat message of a transcript (the OpenAI chat shape, minus the system prompt).

    ``role`` is ``user``, ``assistant`` or ``tool``; ``tool_calls`` is set on
    assistant messages that called tools; ``tool_call_id`` and ``name`` on
    tool results. ``generation`` is the agent's turn that added it (0: stored
    before retinue kept it, counted as older than every generation): a fork as
    of generation N keeps the messages of generations up to N.
    """

    role: str
    content: str | None = None
    tool_calls: tuple[ToolCallRecord, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    generation: int = 0


class JournaledCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One tool call's intent, stored before it runs (see :class:`ToolStep`).

    ``index`` is its place in its step's assistant message, ``tool`` the name the
    tool is granted by, ``effect`` the class it runs under (``unsafe`` for a
    call that needed approval), ``key`` its idempotency key. ``attempt`` counts
    its runs (a call in doubt run again is attempt 2 and up) and ``in_doubt``
    says it was found in doubt. ``state`` is where it is: ``waiting`` (not
    started: its step waits for approvals), ``running`` (it may have started:
    without a result it is in doubt once its turn stops) or ``done`` (its
    result, ``result``, is known without running it: denied, reported in
    doubt, never run).
    """

    call_id: str
    index: int
    tool: str
    effect: str
    key: str
    state: str = "running"
    attempt: int = 1
    in_doubt: bool = False
    result: str | None = None


class ToolStep(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The journal of an agent's tool calls: the step whose calls have no result yet.

    Stored with the transcript, so a step's intents are committed with the
    assistant message that asked for them (one commit for all its calls),
    and its results with the step that answers it, which empties ``calls``.
    ``generation`` and ``step`` (from 1 in each generation) are the last step
    of tool calls; its calls are those of the transcript's last assistant
    message. ``then`` is a turn's input that joins the chat after this step's
    results (a turn that found calls in doubt stores its input before it
    settles them).
    """

    generation: int
    step: int
    calls: tuple[JournaledCall, ...] = ()
    then: str | None = None


def open_count(journal: ToolStep | None) -> int:
    """How many calls of ``journal`` may have started without a result (in flight while the
    turn runs, in doubt once it stops), those waiting for a person's word on a call found
    in doubt included."""
    count = 0
    if journal is not None:
        for call in journal.calls:
            state = call.state
            if state == "running" or (state == "waiting" and call.in_doubt):
                count += 1
    return count


class TranscriptRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The conversation of one LLM agent, across its turns (keyed by agent id).

    The system prompt is not stored (it is rebuilt from the profile at every
    turn). ``cut`` counts the message contents replaced by a marker to keep
    the record within ``Limits.transcript_max_bytes``. ``calls`` are the
    agent's last model calls, oldest first (at most ``Limits.transcript_max_calls``),
    each stored with the step it answered. ``journal`` is its tool calls'
    journal (None: no tool step yet, or a record stored before journals).
    """

    version: int = TRANSCRIPT_VERSION
    agent_id: str
    messages: tuple[TranscriptMessage, ...] = ()
    cut: int = 0
    calls: tuple[ModelCallRecord, ...] = ()
    journal: ToolStep | None = None
