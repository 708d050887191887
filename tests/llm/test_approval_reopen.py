"""Approvals across a reopen: an approved call that was running is in doubt (its journal
record, keyed by its step, stands for it), and a park a reopen restored still ends at its
turn's ``turn_timeout_s``.

Real litellm calls against the local OpenAI stub, which refuses a chat that
holds a tool call without its result (400), as OpenAI-compatible servers do.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from support import wait_settled, wait_until

from llm.conftest import SETTLE_S, stub_runner, tool_call, tool_messages
from retinue import AgentState, CompletionStatus, Limits, Profile, Runtime
from retinue.protocol.effects import in_doubt_result
from retinue.testing import OpenAIStub, StubReply, StubRequest

pytestmark = pytest.mark.usefixtures("litellm")

DONE = {"role": "assistant", "content": "all done"}


def unanswered(messages: list[dict[str, Any]]) -> set[str]:
    """The tool call ids of the chat's assistant messages that no tool result answers."""
    missing: set[str] = set()
    for index, message in enumerate(messages):
        wanted = {c["id"] for c in message.get("tool_calls") or ()}
        for after in messages[index + 1 :]:
            if after.get("role") != "tool":
                break
            wanted.discard(after.get("tool_call_id"))
        missing |= wanted
    return missing


class Server:
    """Stub answers in order; a chat with an unanswered call is refused with a 400."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = replies
        self.answered = 0
        self.refused: list[set[str]] = []

    def __call__(self, request: StubRequest) -> StubReply:
        missing = unanswered(request.messages)
        if missing:
            self.refused.append(missing)
            error = f"tool_call_ids did not have response messages: {sorted(missing)}"
            return StubReply(status=400, error=error)
        self.answered += 1
        return StubReply(message=self.replies[min(self.answered, len(self.replies)) - 1])


class Deploy:
    """An async host tool whose first run hangs (the runtime closes under it)."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.lock = threading.Lock()

        async def deploy(target: str) -> str:
            """Deploy ``target``."""
            with self.lock:
                self.runs.append(target)
                first = len(self.runs) == 1
            if first:
                await asyncio.sleep(SETTLE_S)
            return f"deployed {target}"

        self.tool = deploy


def ops(stub: OpenAIStub, deploy: Deploy, **extra: Any) -> list[Profile]:
    runner = stub_runner(stub, host_tools={"deploy": deploy.tool})
    return [Profile("ops", tools=["deploy"], runner=runner, approve=["deploy"], **extra)]


def open_rt(path: Path, profiles: list[Profile]) -> Runtime:
    return Runtime.open(path, profiles=profiles, limits=Limits(wait_default_s=30.0))


def approve_next(rt: Runtime, agent_id: str) -> None:
    """Wait for the agent's one pending request and approve it."""
    wait_until(lambda: rt.get(agent_id).state is AgentState.AWAITING_APPROVAL, timeout=SETTLE_S)
    (request,) = rt.approvals()
    rt.approve(request.id)


def test_a_later_call_reusing_an_id_keeps_the_earlier_calls_in_doubt_result(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    """The resumed model calls ``deploy`` again under the same call id: the earlier step's
    in-doubt result stays, so the next request is a valid chat and the task completes."""
    same = tool_call("deploy", {"target": "prod"}, call_id="call_1")
    server = Server([same, same, DONE])
    stub.handler = server
    deploy = Deploy()
    store = tmp_path / "s"
    with open_rt(store, ops(stub, deploy)) as rt:
        a = rt.spawn("ops", "ship it")
        approve_next(rt, a.id)
        wait_until(lambda: deploy.runs == ["prod"], timeout=SETTLE_S)
    # The runtime stopped while the approved call ran: it is in doubt, never run again unasked.
    with open_rt(store, ops(stub, deploy)) as rt:
        stopped = rt.get(a.id)
        assert (stopped.state, stopped.in_doubt) == (AgentState.INTERRUPTED, 1)
        (doubt,) = rt.inspect(a.id).in_doubt
        assert (doubt.tool, doubt.effect, doubt.call_id) == ("deploy", "unsafe", "call_1")
        again = rt.resume(a.id)
        approve_next(rt, a.id)
        done = wait_settled(rt, a.id, again.generation, timeout=SETTLE_S)
    assert server.refused == []
    assert (done.state, done.output) == (AgentState.COMPLETED, "all done")
    assert deploy.runs == ["prod", "prod"]
    first, second = tool_messages(stub.requests[-1].messages)
    assert first["content"] == in_doubt_result("deploy", doubt.idempotency_key)
    assert json.loads(second["content"]) == {"result": "deployed prod"}


def test_a_park_restored_by_a_reopen_ends_at_its_turn_timeout(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    """The deadline counts from when the turn started, in the process that started it:
    reopened past it, the restored park fails with ``TurnTimeout`` and its request goes."""
    stub.handler = lambda request: StubReply(message=tool_call("deploy", {"target": "prod"}))
    deploy = Deploy()
    store = tmp_path / "s"
    with open_rt(store, ops(stub, deploy)) as rt:
        a = rt.spawn("ops", "ship it")
        wait_until(lambda: rt.get(a.id).state is AgentState.AWAITING_APPROVAL, timeout=SETTLE_S)
    with open_rt(store, ops(stub, deploy, turn_timeout_s=0.05)) as rt:
        done = rt.wait(a.id, timeout=SETTLE_S)
        assert (done.status, done.error) == (
            CompletionStatus.FAILED,
            "TurnTimeout: turn exceeded 0.05 s",
        )
        assert rt.approvals() == []
    assert deploy.runs == []
