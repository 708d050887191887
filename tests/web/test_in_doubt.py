"""The web view marks tool calls in doubt: a row's count, the detail's list, the approval."""

from __future__ import annotations

from retinue import AgentDetail, AgentInfo, AgentState, ApprovalRequest, InDoubtCall
from retinue.web.rows import approval_payload, detail_payload, row_of

INFO = AgentInfo(
    id="a1",
    name="shop",
    path="/root/shop",
    profile="shop",
    parent_path="/root",
    depth=1,
    state=AgentState.INTERRUPTED,
    generation=1,
    task="refund order A1",
    in_doubt=1,
)
CALL = InDoubtCall(
    call_id="call_1",
    tool="refund",
    idempotency_key="a1-1-1-0",
    effect="unsafe",
    generation=1,
    step=1,
    arguments='{"order": "A1"}',
)


def test_rows_and_details_carry_the_calls_in_doubt() -> None:
    assert row_of(INFO, "", 0, 0, None)["in_doubt"] == 1
    detail = detail_payload(AgentDetail(info=INFO, in_doubt=(CALL,)), None, None)
    assert detail["in_doubt"] == 1
    assert detail["in_doubt_calls"] == [
        {
            "call_id": "call_1",
            "tool": "refund",
            "effect": "unsafe",
            "idempotency_key": "a1-1-1-0",
            "attempt": 1,
            "arguments": '{"order": "A1"}',
            "awaiting_approval": False,
        }
    ]
    request = ApprovalRequest(
        id="r1",
        agent_id="a1",
        path="/root/shop",
        tool="refund",
        arguments="{}",
        requested_at=1.0,
        in_doubt=True,
        idempotency_key="a1-1-1-0",
    )
    shown = approval_payload(request)
    assert (shown["in_doubt"], shown["idempotency_key"]) == (True, "a1-1-1-0")
