"""The supervisor's protocol: every request it serves, as a frozen, typed command.

A command names its sender (:data:`HOST` or the :class:`TurnRef` of a running
turn), carries its arguments as typed fields and says, through
``after_close``, whether the supervisor still serves it while the runtime
closes. ``Command[R]`` is answered with an ``R``, so the runtime's and the
turn's one-line faces are checked by ``mypy --strict`` end to end. The
supervisor dispatches them in one ``match``.

Argument fields are typed as the public API declares them; the supervisor
still checks them at run time (a host may pass anything), raising
``ArgumentTypeError`` for a wrong type. A command that takes an agent
reference also carries ``field``: the name of the caller's argument that held
it (``ref`` from the host and a turn, ``to`` or ``agent`` from a coordinator
tool), which the errors about a bad reference name.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, Literal, TypeVar

import pykka

from retinue.actors.compaction import CompactionReport
from retinue.errors import RetinueError
from retinue.protocol.details import AgentDetail, Backlog
from retinue.protocol.messages import AgentInfo, Completion, Message, Usage
from retinue.protocol.supervision import ApprovalRecord, ApprovalRequest

__all__ = [
    "HOST",
    "AckLease",
    "AdmitCall",
    "Agents",
    "Approvals",
    "Approve",
    "AwaitApproval",
    "Barrier",
    "Children",
    "Close",
    "CloseTree",
    "Command",
    "Compact",
    "CountBacklog",
    "Deny",
    "Envelope",
    "ExpireApprovals",
    "ExpireTurn",
    "FireRestarts",
    "FollowUp",
    "Get",
    "GiveBack",
    "GiveUpWait",
    "Host",
    "HostMessages",
    "Idle",
    "Inspect",
    "Interrupt",
    "InterruptTree",
    "Leases",
    "LlmLoad",
    "LlmStep",
    "ReadCommand",
    "Rearm",
    "ReleaseLease",
    "Resume",
    "RunMany",
    "Send",
    "Sender",
    "Settle",
    "Shutdown",
    "Spawn",
    "SpawnMany",
    "SpawnRequest",
    "SupervisionCommand",
    "SupervisorCommand",
    "TurnRef",
    "Wait",
    "WaitKind",
]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Host:
    """The host (the embedding program) as a sender; use the :data:`HOST` instance."""

    def __repr__(self) -> str:
        """Return ``HOST``."""
        return "HOST"


HOST: Final = Host()


@dataclass(frozen=True, slots=True)
class TurnRef:
    """A running turn as a sender: its agent and generation.

    The supervisor refuses its commands with ``TurnInterrupted`` once that
    turn is no longer the agent's running one.
    """

    agent_id: str
    generation: int


Sender = Host | TurnRef
WaitKind = Literal["completion", "any"]
"""What a turn's wait takes: ``completion`` (only the child's) or ``any`` (a message or it)."""


class Command(Generic[R]):
    """Base of every supervisor command; ``R`` is what it is answered with.

    ``after_close`` is True for the commands still served while the runtime
    closes (shutdown itself, settling turns, giving waits up, barriers).
    ``live_sender`` is True for the commands a turn may send only while it is
    its agent's running turn: the supervisor resolves the sender once, before
    the command's handler runs, and refuses a stale turn with
    ``TurnInterrupted``. A turn's report of its own end (``Settle``,
    ``ExpireTurn``) and a give-up are served for a stale turn too (they are
    discarded or do nothing).
    """

    __slots__ = ()
    after_close: ClassVar[bool] = False
    live_sender: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    """One child of a :class:`SpawnMany` or :class:`RunMany` batch (``name_field``: see
    :class:`Spawn`)."""

    profile: str
    task: str
    name: str | None = None
    name_field: str = "name"


@dataclass(frozen=True, slots=True)
class Spawn(Command[AgentInfo]):
    """Record a new agent and queue its first turn.

    A turn spawns below itself; the host below ``parent`` (a live path or id).
    ``name_field`` is the caller's argument that held ``name`` (``task_name``
    from a coordinator tool), which an error about a bad name names.
    """

    sender: Sender
    profile: str
    task: str
    name: str | None = None
    parent: str | None = None
    idempotency_key: str | None = None
    name_field: str = "name"


@dataclass(frozen=True, slots=True)
class SpawnMany(Command[list[AgentInfo | RetinueError]]):
    """Spawn a batch of children of the sender in one transition."""

    sender: Sender
    requests: Sequence[SpawnRequest]


@dataclass(frozen=True, slots=True)
class Send(Command[Message]):
    """Queue a message in an agent's durable mailbox."""

    sender: Sender
    ref: str
    content: str
    dedup_key: str | None = None
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class FollowUp(Command[AgentInfo]):
    """Queue a follow-up turn for an idle agent."""

    sender: Sender
    ref: str
    task: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class Resume(Command[AgentInfo]):
    """Re-run an interrupted agent's task."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class Interrupt(Command[AgentInfo]):
    """Cancel an agent's queued or running turn."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class InterruptTree(Command[list[AgentInfo]]):
    """Cancel the queued and running turns of an agent's whole live subtree, leaves first."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class HostMessages(Command[list[Message]]):
    """Take the messages top-level agents sent to the host (``/root``), oldest first.

    With none there, the answer waits (deferred) for the first to arrive; a
    :class:`GiveUpWait` for the same future ends it with an empty list.
    """

    sender: Host


@dataclass(frozen=True, slots=True)
class Close(Command[AgentInfo]):
    """Close an agent without live children."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class CloseTree(Command[list[AgentInfo]]):
    """Close an agent's whole live subtree, children first."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class Get(Command[AgentInfo]):
    """Return one agent by id or live path."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class CountBacklog(Command[Backlog]):
    """Count the unread messages and pending completions of the whole store."""

    sender: Sender


@dataclass(frozen=True, slots=True)
class Agents(Command[list[AgentInfo]]):
    """Return every agent, oldest first (closed ones only if asked)."""

    sender: Sender
    include_closed: bool = False


@dataclass(frozen=True, slots=True)
class Inspect(Command[AgentDetail]):
    """Return one agent in full: its mailbox, pending completions and transcript tail."""

    sender: Sender
    ref: str
    transcript_tail: int = 20
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class Idle(Command[None]):
    """Answer once the runtime is quiescent: no turn queued or running, no restart pending,
    no runner still running (an abandoned one included) and no command waiting behind
    this one. A turn parked for approval does not count: it waits for a person.

    Deferred like a host wait; a :class:`GiveUpWait` for the same future ends
    it with ``WaitTimeout``.
    """

    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class Children(Command[list[AgentInfo]]):
    """Return the sending turn's live children."""

    sender: TurnRef


@dataclass(frozen=True, slots=True)
class Wait(Command[Message | Completion]):
    """Wait for the next event from an agent.

    From the host: the agent's oldest completion the host has not received
    (answered with a :class:`~retinue.protocol.messages.Completion`). From a
    turn: the next event from its child, a ``Message`` it sent (``kind="any"``)
    or its ``Completion``.

    ``lease`` (host waits only): the transition that marks the completion
    received also stores ``lease -> completion``, and a wait with a lease
    already stored is answered with that completion again (see
    :class:`AckLease`, :class:`ReleaseLease`).
    """

    sender: Sender
    ref: str
    kind: WaitKind = "completion"
    field: str = "ref"
    lease: str | None = None


@dataclass(frozen=True, slots=True)
class RunMany(Command[list[Completion | RetinueError]]):
    """Spawn a batch of children of the sending turn and wait for them all (``run_many``).

    One transition spawns them (a refusal keeps its place, as with
    :class:`SpawnMany`) and registers the turn's wait, so no child's
    completion can arrive before it. Answered once every child has a
    completion pending for the turn, or is closed with none: in request
    order, each refusal as its error and each child's completion
    (``AgentClosed`` for a closed one), taken in one transition. A
    :class:`GiveUpWait` ends it early: a child still running keeps its place
    as ``WaitTimeout``.
    """

    sender: TurnRef
    requests: Sequence[SpawnRequest]


@dataclass(frozen=True, slots=True)
class GiveUpWait(Command[None]):
    """A wait ran out of time: end it with ``WaitTimeout`` unless it was answered."""

    after_close: ClassVar[bool] = True
    live_sender: ClassVar[bool] = False
    sender: Sender
    future: concurrent.futures.Future[Any]
    seconds: float


@dataclass(frozen=True, slots=True)
class GiveBack(Command[None]):
    """A waiter lost what it was handed (its wait was cancelled): take ``events`` back.

    To the host (``recipient_id`` None): a completion becomes the next one a
    host wait on its agent receives; messages are unread again in the host's
    inbox, in order. To an agent: a completion is pending for it again (or
    for its nearest live ancestor, if it closed meanwhile) and a message is
    unread again; its next wait or turn receives them.
    """

    after_close: ClassVar[bool] = True
    recipient_id: str | None
    events: tuple[Message | Completion, ...]
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class AckLease(Command[bool]):
    """The host has the completion a leased wait handed it: forget the lease.

    Answered True if the lease was stored (False: unknown or acknowledged before).
    """

    lease: str
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class ReleaseLease(Command[bool]):
    """The host never got the completion a leased wait took: give it back, forget the lease.

    The completion goes to the next host wait on its agent, as after a
    :class:`GiveBack`. Answered True if the lease was stored.
    """

    after_close: ClassVar[bool] = True
    lease: str
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class Leases(Command[dict[str, Completion]]):
    """Return every stored lease with the completion it holds (not yet acknowledged)."""

    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class Settle(Command[None]):
    """A runner finished its turn with ``output`` or ``error``."""

    after_close: ClassVar[bool] = True
    live_sender: ClassVar[bool] = False
    sender: TurnRef
    output: str | None
    error: str | None
    trace: str | None = None  # the turn's span (W3C traceparent), when the runtime traces


@dataclass(frozen=True, slots=True)
class ExpireTurn(Command[None]):
    """A turn's ``turn_timeout_s`` ran out: fail it with ``TurnTimeout`` if it still runs."""

    live_sender: ClassVar[bool] = False

    sender: TurnRef
    seconds: float


@dataclass(frozen=True, slots=True)
class LlmLoad(Command[tuple[bytes | None, Usage, Usage]]):
    """An LLM turn starts: answer its stored transcript, its usage and its tree's usage."""

    sender: TurnRef


@dataclass(frozen=True, slots=True)
class LlmStep(Command[tuple[Usage, Usage]]):
    """An LLM turn made a step: add ``usage`` to the agent and its tree, store ``transcript``.

    ``transcript`` is an encoded :class:`~retinue.protocol.records.TranscriptRecord`
    (None keeps the stored one); the answer is the agent's and the tree's new usage.
    ``takes_input`` says the transcript now holds the turn's input (its task,
    messages and children's completions): from this commit on they are the
    transcript's, neither given back if the turn fails or is interrupted nor
    handed again after a crash (see ``Scheduler`` and ``Tree.consume_inputs``).
    ``ends_call`` says ``usage`` is a model call :class:`AdmitCall` admitted:
    its reservation ends in this commit.
    """

    sender: TurnRef
    usage: Usage
    transcript: bytes | None = None
    takes_input: bool = False
    ends_call: bool = False


@dataclass(frozen=True, slots=True)
class Compact(Command[CompactionReport]):
    """Remove what retention no longer keeps, as one transition."""

    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class Barrier(Command[None]):
    """Answer once everything submitted before it is committed."""

    after_close: ClassVar[bool] = True
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class Shutdown(Command[list[tuple[str, pykka.ActorRef[Any]]]]):
    """Interrupt every turn and stop serving; answer with the actors still running, by agent."""

    after_close: ClassVar[bool] = True
    sender: Host = HOST


# -- supervision: restarts, approvals, call admission ----------------------------------


@dataclass(frozen=True, slots=True)
class FireRestarts(Command[None]):
    """A restart's backoff ran out: run every restart that is due, parents first."""

    live_sender: ClassVar[bool] = False
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class Rearm(Command[None]):
    """The supervisor serves: arm the timers of the restarts and approval timeouts the store
    holds, and carry on the parked turns whose approvals were all answered meanwhile."""

    live_sender: ClassVar[bool] = False
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class AwaitApproval(Command[list[ApprovalRecord]]):
    """A model turn asks approval for tool calls ``(call id, tool, JSON arguments)``.

    Each call gets a stored :class:`~retinue.protocol.supervision.ApprovalRequest`;
    the turn parks (``awaiting_approval``, no slot) until every one is
    answered, and is answered with their records, in order. ``resume``: the
    turn carries on after a reopen and asked for these calls before, so the
    requests its generation made for the same call ids are reused.
    """

    sender: TurnRef
    calls: tuple[tuple[str, str, str], ...]
    resume: bool = False


@dataclass(frozen=True, slots=True)
class Approvals(Command[list[ApprovalRequest]]):
    """Return the pending approval requests, of ``ref``'s subtree or of every agent."""

    sender: Sender
    ref: str | None = None
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class Approve(Command[None]):
    """Approve a pending request: its call runs and the model gets its result."""

    request_id: str
    note: str | None = None
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class Deny(Command[None]):
    """Deny a pending request: the model gets ``{"error": "denied: <reason>"}``."""

    request_id: str
    reason: str
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class ExpireApprovals(Command[None]):
    """An approval timeout ran out: deny every request past ``approval_timeout_s``."""

    live_sender: ClassVar[bool] = False
    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class AdmitCall(Command[None]):
    """A model turn asks to make one model call under a budget; answered once admitted.

    Raises (to the turn): ``TokenBudgetExceeded`` or ``CostBudgetExceeded``
    once a budget is spent.
    """

    sender: TurnRef


SupervisionCommand = (
    FireRestarts | Rearm | AwaitApproval | Approvals | Approve | Deny | ExpireApprovals | AdmitCall
)
"""The commands of supervision (:mod:`retinue.actors.supervision` serves them)."""

SupervisorCommand = (
    Spawn
    | SpawnMany
    | Send
    | FollowUp
    | Resume
    | Interrupt
    | InterruptTree
    | HostMessages
    | Close
    | CloseTree
    | Get
    | Agents
    | Inspect
    | Children
    | Wait
    | RunMany
    | GiveUpWait
    | GiveBack
    | AckLease
    | ReleaseLease
    | Leases
    | Settle
    | ExpireTurn
    | LlmLoad
    | LlmStep
    | Compact
    | Barrier
    | Idle
    | Shutdown
    | FireRestarts
    | Rearm
    | AwaitApproval
    | Approvals
    | Approve
    | Deny
    | ExpireApprovals
    | AdmitCall
)
"""The closed protocol: every command the supervisor serves (its ``match`` is exhaustive)."""

ReadCommand = Get | Agents | Inspect | Barrier | Idle | Approvals
"""The commands a read-only runtime serves from a store snapshot (the others are refused)."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """A command in the supervisor's inbox with the future its answer goes to."""

    command: SupervisorCommand
    reply: concurrent.futures.Future[Any]
    trace: str | None = None
    """The sender's current span (W3C ``traceparent``) for a command that starts turns."""
