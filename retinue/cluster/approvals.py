"""The cluster face's approval calls: list pending requests, approve or deny one, sync and async.

:class:`ApprovalFace` is mixed into :class:`~retinue.cluster.face.Cluster`
with the names and semantics of the runtime's
(:class:`~retinue.actors.approval_calls.ApprovalCalls`). A request's id
carries its shard (``s<k>-...``), so an answer goes straight to it, under a
request id the shard records: a retry after a lost reply answers once.
``approvals()`` merges every shard's pending requests, oldest first.
"""

from __future__ import annotations

from typing import Any

from retinue.cluster import wire as w
from retinue.protocol.supervision import ApprovalRequest

__all__ = ["ApprovalFace"]


class ApprovalFace:
    """``approvals``, ``approve`` and ``deny``, with their async twins, over the shards."""

    def _run(self, operation: str, *args: Any) -> Any:  # pragma: no cover - the face's
        raise NotImplementedError

    async def _run_async(self, operation: str, *args: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def approvals(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Like ``Runtime.approvals``: the pending requests of ``ref``'s subtree, or of every
        shard, oldest first (their ids carry their shard).

        Raises:
            UnknownAgent, InvalidAgentPath: a bad ``ref``.
        """
        result: list[ApprovalRequest] = self._run("approvals", ref)
        return result

    def approve(self, request_id: str, *, note: str | None = None) -> None:
        """Like ``Runtime.approve``: the call runs and the model gets its result.

        Raises:
            UnknownApproval: no shard of this cluster made that id.
            ApprovalAlreadyAnswered: it was answered (or cancelled) before.
            ArgumentTypeError, InvalidArgument: a bad id or note.
        """
        self._run("answer", w.Approve, request_id, note)

    def deny(self, request_id: str, *, reason: str) -> None:
        """Like ``Runtime.deny``: the model gets ``{"error": "denied: <reason>"}``.

        Raises:
            UnknownApproval, ApprovalAlreadyAnswered: as :meth:`approve`.
            ArgumentTypeError, InvalidArgument: a bad id, or a blank reason.
        """
        self._run("answer", w.Deny, request_id, reason)

    async def approvals_async(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Like :meth:`approvals`, without blocking the event loop."""
        result: list[ApprovalRequest] = await self._run_async("approvals", ref)
        return result

    async def approve_async(self, request_id: str, *, note: str | None = None) -> None:
        """Like :meth:`approve`, without blocking the event loop."""
        await self._run_async("answer", w.Approve, request_id, note)

    async def deny_async(self, request_id: str, *, reason: str) -> None:
        """Like :meth:`deny`, without blocking the event loop."""
        await self._run_async("answer", w.Deny, request_id, reason)
