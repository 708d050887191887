"""The approval gate of a model turn: calls of tools a person must approve wait for a yes.

Before a step's tool calls run, the calls of tools the profile names in
``approve`` (``"*"``: every tool but the coordinator tools; an MCP tool by
its granted name, ``time.get_current_time``, or its server's pattern,
``time.*``, never by the name the model is offered) are asked for
through the supervisor (:class:`~retinue.actors.commands.AwaitApproval`); the
turn parks until each is answered. A denied call is not run: the model gets
``{"error": "denied: <reason>"}``. An approved call runs at most once: before
it runs, the turn stores :data:`CUT_SHORT_RESULT` as its result, so if the
process dies while it runs, the next turn reads that error instead of running
it again without a new approval; the real result replaces it once it returns
(:func:`without_held`: that record is keyed by step and call id, so a later
step's call that reuses an id never takes an earlier step's record with it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from retinue.actors.commands import AwaitApproval
from retinue.llm._context import TurnContext
from retinue.llm.chat import ChatMessage
from retinue.protocol.supervision import ApprovalRecord, needs_approval
from retinue.protocol.tools import COORDINATOR_TOOLS

__all__ = [
    "CUT_SHORT_RESULT",
    "ask_approvals",
    "denied_result",
    "gated",
    "granted_names",
    "without_held",
]

CUT_SHORT_RESULT = json.dumps(
    {
        "error": (
            "this approved call was cut short by a restart: the runtime stopped while it ran, "
            "and it is not run again without a new approval; call it again if it is still needed"
        )
    }
)
"""The result stored for an approved call while it runs (what a crash leaves the model)."""


def granted_names(toolbox: Any) -> dict[str, str]:
    """Return each name ``toolbox`` offers -> the tool's granted name.

    A toolbox of the runner's own making may lack :attr:`ToolBox.granted
    <retinue.llm.tools._toolbox.ToolBox.granted>`: its offered names stand for themselves.
    """
    granted = getattr(toolbox, "granted", None)
    if isinstance(granted, dict):
        return granted
    return {name: name for name in toolbox.names}


def gated(approve: Iterable[str], calls: Sequence[Any], offered: Mapping[str, str]) -> list[Any]:
    """Return the calls (OpenAI-shaped) that need approval: of tools offered and named.

    ``offered`` maps each function name the model is offered to the tool's
    granted name (:attr:`~retinue.llm.tools._toolbox.ToolBox.granted`); ``approve``
    is matched against the granted names.
    """
    names = tuple(approve)
    if not names:
        return []
    return [
        call
        for call in calls
        if (granted := offered.get(call["function"]["name"])) is not None
        and needs_approval(names, granted, COORDINATOR_TOOLS)
    ]


async def ask_approvals(
    turn: TurnContext,
    calls: Sequence[Any],
    *,
    names: Mapping[str, str] | None = None,
    resume: bool = False,
) -> dict[str, ApprovalRecord]:
    """Ask approval of ``calls``; return each call's answered record, by call id.

    Each request names the tool by its granted name (``names``: offered name
    -> granted name, as :func:`gated` takes). ``resume``: the turn asked for
    these calls before (it carries on after a reopen), so their requests are
    reused.

    Raises:
        TurnInterrupted: the turn was interrupted while it waited.
    """
    if not calls:
        return {}
    granted = names or {}
    asked = tuple(
        (
            str(c["id"]),
            str(granted.get(c["function"]["name"], c["function"]["name"])),
            str(c["function"]["arguments"]),
        )
        for c in calls
    )
    answers: list[ApprovalRecord] = await turn.request_async(
        AwaitApproval(turn.ref, asked, resume=resume)
    )
    return {record.request.call_id: record for record in answers}


def denied_result(record: ApprovalRecord) -> str:
    """The result a model gets for a call that was not approved."""
    reason = record.reason or record.status
    return json.dumps({"error": f"denied: {reason}"}, ensure_ascii=False)


def without_held(history: list[ChatMessage], call_ids: Sequence[str]) -> list[ChatMessage]:
    """``history`` without the cut-short results stored while this step's approved calls run.

    They are keyed by step and call id: only results after the step's (the
    last) assistant message go; an earlier step's call with the same id keeps
    the cut-short result a restart left it.
    """
    step = max((i for i, m in enumerate(history) if m.get("role") == "assistant"), default=-1)
    kept = [
        m
        for m in history[step + 1 :]
        if not (
            m.get("role") == "tool"
            and m.get("tool_call_id") in call_ids
            and m.get("content") == CUT_SHORT_RESULT
        )
    ]
    return history[: step + 1] + kept
