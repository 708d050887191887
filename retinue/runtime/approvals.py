"""The host's approval calls: list pending requests, approve or deny one, sync and async.

:class:`ApprovalCalls` holds ``approvals``, ``approve`` and ``deny``, each
with its ``*_async`` twin; each is one line over the same command.
"""

from __future__ import annotations

from retinue.actors.commands import HOST, Approvals, Approve, Deny
from retinue.protocol.supervision import ApprovalRequest
from retinue.runtime.calls import Calls

__all__ = ["ApprovalCalls"]


class ApprovalCalls(Calls):
    """``approvals``, ``approve`` and ``deny``, with their async twins."""

    def approvals(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Return the pending approval requests, oldest first: of ``ref``'s subtree, or all.

        Served by a writer and by a read-only runtime alike.

        Raises:
            UnknownAgent, InvalidAgentPath: a bad ``ref``.
        """
        return self._ask(Approvals(HOST, ref))

    async def approvals_async(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Like :meth:`approvals`, without blocking the event loop."""
        return await self._ask_async(Approvals(HOST, ref))

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

    async def approve_async(self, request_id: str, *, note: str | None = None) -> None:
        """Like :meth:`approve`, without blocking the event loop."""
        await self._ask_async(Approve(request_id, note))

    def deny(self, request_id: str, *, reason: str) -> None:
        """Deny a pending request: the model gets ``{"error": "denied: <reason>"}``.

        Raises:
            UnknownApproval, ApprovalAlreadyAnswered: as :meth:`approve`.
            ArgumentTypeError, InvalidArgument: a bad id, or a blank reason.
        """
        self._ask(Deny(request_id, reason))

    async def deny_async(self, request_id: str, *, reason: str) -> None:
        """Like :meth:`deny`, without blocking the event loop."""
        await self._ask_async(Deny(request_id, reason))
