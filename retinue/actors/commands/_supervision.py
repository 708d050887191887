"""The commands of supervision: restarts, approvals of tool calls, the admission of model calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from retinue.actors.commands._base import HOST, Command, Host, Sender, TurnRef
from retinue.protocol.supervision import ApprovalRecord, ApprovalRequest

__all__ = [
    "AdmitCall",
    "Approvals",
    "Approve",
    "AwaitApproval",
    "Deny",
    "ExpireApprovals",
    "FireRestarts",
    "Rearm",
    "SupervisionCommand",
]


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
    ``in_doubt`` pairs the calls found in doubt (by call id) with their
    idempotency keys: their requests say so.
    """

    sender: TurnRef
    calls: tuple[tuple[str, str, str], ...]
    resume: bool = False
    in_doubt: tuple[tuple[str, str], ...] = ()


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
"""The commands of supervision (:mod:`retinue.actors.supervisor._supervision` serves them)."""
