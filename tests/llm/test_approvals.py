"""Durable approval of tool calls: a model's call of an approved tool waits for a person.

Real litellm calls against the local OpenAI stub; host tools count their runs,
so "the call did not run" and "it ran once" are checked, not assumed.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from support import EventLog, wait_until

from llm.conftest import SETTLE_S, stub_runner, tool_call, tool_messages
from retinue import (
    AgentState,
    ApprovalAlreadyAnswered,
    ApprovalAnswered,
    ApprovalRequested,
    ArgumentTypeError,
    InvalidArgument,
    Limits,
    Profile,
    Runtime,
    UnknownApproval,
)
from retinue.llm.turn._approval_gate import CUT_SHORT_RESULT
from retinue.testing import OpenAIStub, StubReply

pytestmark = pytest.mark.usefixtures("litellm")


class Deploy:
    """A host tool (:attr:`tool`) that counts its runs."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        lock = threading.Lock()

        def deploy(target: str) -> str:
            """Deploy ``target``."""
            with lock:
                self.runs.append(target)
            return f"deployed {target}"

        self.tool = deploy


def scripted(replies: list[dict[str, Any]]) -> Any:
    """A stub handler answering request n with ``replies[n-1]`` (the last one after that)."""
    return lambda request: StubReply(message=replies[min(request.number, len(replies)) - 1])


DONE = {"role": "assistant", "content": "all done"}


def profile(stub: OpenAIStub, deploy: Deploy, **extra: Any) -> Profile:
    runner = stub_runner(stub, host_tools={"deploy": deploy.tool})
    extra.setdefault("approve", ["deploy"])
    return Profile("ops", tools=["deploy"], runner=runner, **extra)


def parked(rt: Runtime, agent_id: str) -> Any:
    """Wait until the agent's call waits for approval; return its one request."""
    wait_until(lambda: rt.get(agent_id).state is AgentState.AWAITING_APPROVAL, timeout=SETTLE_S)
    (request,) = rt.approvals()
    return request


def open_rt(path: Path, profiles: list[Profile], **limits: Any) -> Runtime:
    return Runtime.open(path, profiles=profiles, limits=Limits(wait_default_s=30.0, **limits))


def test_an_approved_call_runs_once_and_the_model_gets_its_result(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    deploy = Deploy()
    stub.handler = scripted([tool_call("deploy", {"target": "prod"}), DONE])
    events = EventLog()
    with open_rt(tmp_path / "s", [profile(stub, deploy)]) as rt:
        rt.subscribe(events)
        a = rt.spawn("ops", "ship it")
        request = parked(rt, a.id)
        assert (request.agent_id, request.path, request.tool) == (a.id, a.path, "deploy")
        assert json.loads(request.arguments) == {"target": "prod"}
        assert rt.get(a.id).state.busy
        assert deploy.runs == [], "nothing runs before the approval"
        rt.approve(request.id, note="go ahead")
        done = rt.wait(a.id, timeout=SETTLE_S)
        assert (done.status, done.output) == ("completed", "all done")
        assert deploy.runs == ["prod"]
        assert [json.loads(m["content"]) for m in tool_messages(stub.requests[-1].messages)] == [
            {"result": "deployed prod"}
        ]
        assert rt.approvals() == []
        seen = events.wait_for(lambda es: any(isinstance(e, ApprovalAnswered) for e in es))
        asked = [e for e in seen if isinstance(e, ApprovalRequested)]
        answered = [e for e in seen if isinstance(e, ApprovalAnswered)]
        assert [(e.request_id, e.tool) for e in asked] == [(request.id, "deploy")]
        assert [(e.request_id, e.approved, e.reason) for e in answered] == [
            (request.id, True, None)
        ]
        with pytest.raises(ApprovalAlreadyAnswered, match="approved already"):
            rt.deny(request.id, reason="changed my mind")


def test_a_denied_call_does_not_run_and_the_model_gets_the_reason(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    deploy = Deploy()
    stub.handler = scripted([tool_call("deploy", {"target": "prod"}), DONE])
    with open_rt(tmp_path / "s", [profile(stub, deploy)]) as rt:
        a = rt.spawn("ops", "ship it")
        request = parked(rt, a.id)
        rt.deny(request.id, reason="not on a Friday")
        assert rt.wait(a.id, timeout=SETTLE_S).status == "completed"
        assert deploy.runs == []
        results = tool_messages(stub.requests[-1].messages)
        assert [json.loads(m["content"]) for m in results] == [{"error": "denied: not on a Friday"}]


def test_an_unanswered_request_is_denied_when_its_timeout_runs_out(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    deploy = Deploy()
    stub.handler = scripted([tool_call("deploy", {"target": "prod"}), DONE])
    with open_rt(tmp_path / "s", [profile(stub, deploy)], approval_timeout_s=0.05) as rt:
        a = rt.spawn("ops", "ship it")
        assert rt.wait(a.id, timeout=SETTLE_S).status == "completed"
        assert deploy.runs == []
        results = tool_messages(stub.requests[-1].messages)
        assert [json.loads(m["content"]) for m in results] == [{"error": "denied: timed out"}]


def test_answers_are_checked(stub: OpenAIStub, tmp_path: Path) -> None:
    deploy = Deploy()
    stub.handler = scripted([tool_call("deploy", {"target": "prod"}), DONE])
    with open_rt(tmp_path / "s", [profile(stub, deploy)]) as rt:
        with pytest.raises(UnknownApproval, match="no approval request 'nope'"):
            rt.approve("nope")
        a = rt.spawn("ops", "ship it")
        request = parked(rt, a.id)
        with pytest.raises(InvalidArgument):
            rt.deny(request.id, reason="   ")
        with pytest.raises(ArgumentTypeError):
            rt.approve(request.id, note=3)  # type: ignore[arg-type]
        with pytest.raises(ArgumentTypeError):
            rt.approve(7)  # type: ignore[arg-type]
        assert rt.approvals() == [request], "a refused answer changes nothing"
        rt.approve(request.id)
        with pytest.raises(ApprovalAlreadyAnswered):
            rt.approve(request.id)
        rt.wait(a.id, timeout=SETTLE_S)


def test_a_parked_turn_holds_no_slot(stub: OpenAIStub, tmp_path: Path) -> None:
    deploy = Deploy()

    def handler(request: Any) -> StubReply:
        text = json.dumps(request.messages)
        if "ship it" in text and "deployed" not in text and "denied" not in text:
            return StubReply(message=tool_call("deploy", {"target": "prod"}))
        return StubReply(message=DONE)

    stub.handler = handler
    with open_rt(tmp_path / "s", [profile(stub, deploy)], max_active_turns=1) as rt:
        a = rt.spawn("ops", "ship it")
        request = parked(rt, a.id)
        other = rt.spawn("ops", "just answer")  # gets the one slot while the first is parked
        assert rt.wait(other.id, timeout=SETTLE_S).status == "completed"
        rt.wait_idle(SETTLE_S)  # a turn waiting for a person does not keep the runtime busy
        rt.approve(request.id)
        assert rt.wait(a.id, timeout=SETTLE_S).status == "completed"
        assert deploy.runs == ["prod"]


@pytest.mark.parametrize("how", ["interrupt", "close"])
def test_interrupting_a_parked_turn_cancels_its_request(
    stub: OpenAIStub, tmp_path: Path, how: str
) -> None:
    deploy = Deploy()
    stub.handler = scripted([tool_call("deploy", {"target": "prod"}), DONE])
    with open_rt(tmp_path / "s", [profile(stub, deploy)]) as rt:
        a = rt.spawn("ops", "ship it")
        request = parked(rt, a.id)
        if how == "interrupt":
            rt.interrupt(a.id)
            done = rt.wait(a.id, timeout=SETTLE_S)
            assert (done.status, done.error) == ("interrupted", "interrupted")
        else:
            rt.close(a.id)
        assert rt.approvals() == []
        with pytest.raises(ApprovalAlreadyAnswered, match="cancelled"):
            rt.approve(request.id)
        rt.wait_idle(SETTLE_S)
    assert deploy.runs == []


def test_a_park_survives_a_close_and_the_turn_carries_on_after_the_reopen(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    deploy = Deploy()
    stub.handler = scripted([tool_call("deploy", {"target": "prod"}), DONE])
    store = tmp_path / "s"
    with open_rt(store, [profile(stub, deploy)]) as rt:
        a = rt.spawn("ops", "ship it")
        request = parked(rt, a.id)
        rt.send(a.id, "meanwhile: the release notes are ready")
    with open_rt(store, [profile(stub, deploy)]) as rt:
        assert rt.get(a.id).state is AgentState.AWAITING_APPROVAL, "not interrupted by a reopen"
        assert rt.approvals() == [request]
        assert rt.approvals(a.path) == [request]
        requests_before = len(stub.requests)
        rt.approve(request.id)
        done = rt.wait(a.id, timeout=SETTLE_S)
        assert (done.status, done.output, done.generation) == ("completed", "all done", 1)
        info = rt.get(a.id)
        assert info.generation == 1, "the turn carried on as the same generation"
    assert deploy.runs == ["prod"]
    assert len(stub.requests) == requests_before + 1, "the parked step was not asked again"
    chat = stub.requests[-1].messages
    assert [json.loads(m["content"]) for m in tool_messages(chat)] == [{"result": "deployed prod"}]
    assert "release notes are ready" in chat[-1]["content"], "its new input follows the results"


def test_star_asks_for_every_tool_but_the_coordinator_tools(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    deploy = Deploy()
    stub.handler = scripted([tool_call("deploy", {"target": "prod"}), DONE])
    with open_rt(tmp_path / "s", [profile(stub, deploy, approve=["*"])]) as rt:
        a = rt.spawn("ops", "ship it")
        request = parked(rt, a.id)
        assert request.tool == "deploy"
        rt.approve(request.id)
        rt.wait(a.id, timeout=SETTLE_S)
    # list_agents is a coordinator tool: never gated, even under "*".
    stub.handler = scripted([tool_call("list_agents", {}), DONE])
    with open_rt(tmp_path / "t", [profile(stub, deploy, approve=["*"])]) as rt:
        a = rt.spawn("ops", "look around")
        assert rt.wait(a.id, timeout=SETTLE_S).status == "completed"
        assert rt.approvals() == []


def test_a_bad_approve_setting_is_refused() -> None:
    from retinue import ConfigurationError

    with pytest.raises(ConfigurationError, match="approve must be a list"):
        Profile("p", approve="bash")
    with pytest.raises(ConfigurationError, match="approve must hold tool names"):
        Profile("p", approve=["", "bash"])


def test_the_cut_short_result_names_the_restart() -> None:
    assert "cut short by a restart" in json.loads(CUT_SHORT_RESULT)["error"]


def test_requests_go_with_their_agent_when_it_is_compacted(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    deploy = Deploy()
    stub.handler = scripted([tool_call("deploy", {"target": "prod"}), DONE])
    store = tmp_path / "s"
    with open_rt(store, [profile(stub, deploy)], retain_age_s=0.001) as rt:
        a = rt.spawn("ops", "ship it")
        request = parked(rt, a.id)
        rt.close(a.id)  # cancels the request; the closed agent is older than retain_age_s soon
        assert rt.wait(a.id, timeout=0).status == "interrupted"  # nothing left undelivered
        removed: list[int] = []

        def compacted() -> int:  # compact until the closed agent is old enough to go
            removed.append(rt.compact().agents)
            return sum(removed)

        wait_until(compacted, timeout=SETTLE_S)
        assert sum(removed) == 1
        with pytest.raises(UnknownApproval):
            rt.approve(request.id)
    with open_rt(store, [profile(stub, deploy)]) as rt:
        assert rt.diagnostics == [], "no request of a removed agent was left behind"
