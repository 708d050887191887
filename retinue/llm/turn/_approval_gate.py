"""The approval gate of a model turn: calls of tools a person must approve wait for a yes.

Before a step's tool calls run, the calls of tools the profile names in
``approve`` (``"*"``: every tool but the coordinator tools; an MCP tool by
its granted name, ``time.get_current_time``, or its server's pattern,
``time.*``, never by the name the model is offered) are asked for
through the supervisor (:class:`~retinue.actors.commands.AwaitApproval`); the
turn parks until each is answered. A denied call is not run: the model gets
``{"error": "denied: <reason>"}``. An approved call runs at most once: it is
an ``unsafe`` call of the turn's journal (:mod:`retinue.llm.turn._intents`),
whose step waits (``waiting``) until its approvals are answered and is stored
``running`` before the calls run, so if the process dies while it runs the
next turn finds it in doubt and never runs it again without a new approval.
(An older retinue stored :data:`CUT_SHORT_RESULT` as its result meanwhile;
such a record is read as the result it is.) A call found in doubt that
``Profile(in_doubt="approve")`` sends to a person is asked for the same way,
its request saying it is in doubt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from retinue.actors.commands import AwaitApproval
from retinue.llm.tools import ToolBoxProtocol
from retinue.llm.turn._context import TurnContext
from retinue.protocol.supervision import ApprovalRecord, needs_approval
from retinue.protocol.tools import COORDINATOR_TOOLS

__all__ = [
    "CUT_SHORT_RESULT",
    "ask_approvals",
    "denied_result",
    "gated",
    "granted_names",
]

CUT_SHORT_RESULT = json.dumps(
    {
        "error": (
            "this approved call was cut short by a restart: the runtime stopped while it ran, "
            "and it is not run again without a new approval; call it again if it is still needed"
        )
    }
)
"""The result an older retinue stored for an approved call while it ran (what a crash left
the model); the journal's ``running`` intent stands for it now."""


def granted_names(toolbox: ToolBoxProtocol) -> dict[str, str]:
    """Return each name ``toolbox`` offers -> the tool's granted name (a host's own
    toolbox's names stand for themselves: :class:`~retinue.llm.tools._protocol.PlainToolBox`)."""
    return toolbox.granted


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
    in_doubt: Mapping[str, str] | None = None,
) -> dict[str, ApprovalRecord]:
    """Ask approval of ``calls``; return each call's answered record, by call id.

    Each request names the tool by its granted name (``names``: offered name
    -> granted name, as :func:`gated` takes). ``resume``: the turn asked for
    these calls before (it carries on after a reopen), so their requests are
    reused. ``in_doubt`` maps the ids of calls found in doubt to their
    idempotency keys: their requests say they are in doubt.

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
    doubt = tuple((i, k) for i, k in (in_doubt or {}).items() if any(i == a[0] for a in asked))
    answers: list[ApprovalRecord] = await turn.request_async(
        AwaitApproval(turn.ref, asked, resume=resume, in_doubt=doubt)
    )
    return {record.request.call_id: record for record in answers}


def denied_result(record: ApprovalRecord) -> str:
    """The result a model gets for a call that was not approved."""
    reason = record.reason or record.status
    return json.dumps({"error": f"denied: {reason}"}, ensure_ascii=False)
