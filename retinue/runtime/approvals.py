"""The host's approval calls: list pending requests, approve or deny one, sync and async.

:class:`ApprovalCalls` is mixed into :class:`~retinue.runtime.Runtime` (and
any face with the same ``_ask`` / ``_ask_async``): each call and its
``*_async`` twin are one line over the same command.
"""

from __future__ import annotations

from typing import TypeVar

from retinue.actors.commands import HOST, Approvals, Approve, Command, Deny
from retinue.protocol.supervision import ApprovalRequest

__all__ = ["ApprovalCalls"]

R = TypeVar("R")


class ApprovalCalls:
    """``approvals``, ``approve`` and ``deny``, with their async twins."""

    def _ask(self, command: Command[R]) -> R:  # pragma: no cover - the face defines it
        raise NotImplementedError

    async def _ask_async(self, command: Command[R]) -> R:  # pragma: no cover
        raise NotImplementedError

    def approvals(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Return the pending approval requests, oldest first: of ``ref``'s subtree, or all.

        Served by a writer and by a read-only runtime alike.

        Raises:
            UnknownAgent, InvalidAgentPath: a bad ``ref``.
        """
        return self._ask(Approvals(HOST, ref))

    def approve(self, request_id: str, *, note: str | None = None) -> None:
        """Approve a pending request: the call runs and the model gets its result.

        It is recorded approved before it runs; a call cut short by a crash
        is not run again without a new approval.

        Raises:
            UnknownApproval: no request has that id.
            ApprovalAlreadyAnswered: it was approved, denied, timed out or
                cancelled before.
            ArgumentTypeError, InvalidArgument: a bad id or note.
        """
        self._ask(Approve(request_id, note))

    def deny(self, request_id: str, *, reason: str) -> None:
        """Deny a pending request: the model gets ``{"error": "denied: <reason>"}``.

        Raises:
            UnknownApproval, ApprovalAlreadyAnswered: as :meth:`approve`.
            ArgumentTypeError, InvalidArgument: a bad id, or a blank reason.
        """
        self._ask(Deny(request_id, reason))

    async def approvals_async(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Like :meth:`approvals`, without blocking the event loop."""
        return await self._ask_async(Approvals(HOST, ref))

    async def approve_async(self, request_id: str, *, note: str | None = None) -> None:
        """Like :meth:`approve`, without blocking the event loop."""
        await self._ask_async(Approve(request_id, note))

    async def deny_async(self, request_id: str, *, reason: str) -> None:
        """Like :meth:`deny`, without blocking the event loop."""
        await self._ask_async(Deny(request_id, reason))
