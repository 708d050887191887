"""Model and tool text is cleaned once, where it arrives: a lone surrogate crosses nothing raw.

A provider sends half an emoji (a lone surrogate, which has no UTF-8 form) in
an answer's text, a tool's name, a call's id or its arguments; a tool answers
with one. Each is escaped (``\\ud83d``) where the answer or the result arrives,
so what crosses the supervisor next (approval requests, events, the chat of the
next request, stored transcripts) is text every encoder takes. Real litellm
calls against the local OpenAI stub.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support import EventLog, wait_until

from llm.conftest import SETTLE_S, stub_runner, tool_messages
from retinue import (
    AgentState,
    ApprovalRequested,
    Limits,
    ModelDelta,
    Profile,
    Runtime,
    ToolCallFinished,
    ToolCallStarted,
)
from retinue.llm import LiteLLMRunner, tool
from retinue.testing import CHAOS_MODEL, ChaosModel, OpenAIStub, StubReply
from retinue.testing.chaos_answers import KINDS

pytestmark = pytest.mark.usefixtures("litellm")

HALF = "\ud83d"  # the first half of 😀 (U+1F600): no UTF-8 form on its own
ESCAPED = "\\ud83d"  # what it becomes: the six characters of its escape
DONE = {"role": "assistant", "content": "all done"}


def raw_call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    """An assistant message calling ``name`` with the raw JSON text ``arguments``."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


def scripted(replies: list[dict[str, Any]]) -> Any:
    """A stub handler answering request n with ``replies[n-1]`` (the last one after that)."""
    return lambda request: StubReply(message=replies[min(request.number, len(replies)) - 1])


def encodable(value: Any) -> None:
    """Fail unless ``value`` encodes as JSON and as UTF-8 (what `retinue run --json` does)."""
    msgspec.json.encode(value)
    json.dumps(msgspec.to_builtins(value), ensure_ascii=False).encode("utf-8")


def open_rt(path: Path, profiles: list[Profile]) -> Runtime:
    return Runtime.open(path, profiles=profiles, limits=Limits(wait_default_s=30.0))


def test_a_gated_call_with_a_lone_surrogate_in_its_arguments_is_asked_and_answered(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    """Half an emoji in a gated call's arguments: the request is asked with the escape (not an
    error that left the agent running forever); once approved the model is told the
    arguments hold half a character (no tool is handed text with no UTF-8 form), and the
    turn completes."""
    targets: list[str] = []

    def deploy(target: str) -> str:
        """Deploy ``target``."""
        targets.append(target)
        return f"deployed {target}"

    arguments = '{"target": "prod ' + HALF + '"}'  # the JSON text as the provider's decoded
    stub.handler = scripted([raw_call("deploy", arguments), DONE])
    runner = stub_runner(stub, host_tools={"deploy": deploy})
    events = EventLog()
    ops = Profile("ops", tools=["deploy"], runner=runner, approve=["deploy"])
    with open_rt(tmp_path / "s", [ops]) as rt:
        rt.subscribe(events)
        agent = rt.spawn("ops", "ship it")
        wait_until(rt.approvals, timeout=SETTLE_S, what="the approval request")
        (request,) = rt.approvals()
        assert request.arguments == '{"target": "prod ' + ESCAPED + '"}'
        encodable(request)
        rt.approve(request.id)
        done = rt.wait(agent.id, timeout=SETTLE_S)
        assert (done.status, done.output) == ("completed", "all done"), done.error
        rt.wait_idle(SETTLE_S)
        assert rt.get(agent.id).state is AgentState.COMPLETED
        assert targets == []
        (result,) = tool_messages(stub.requests[-1].messages)
        error = json.loads(result["content"])["error"]
        assert error.startswith("invalid arguments for deploy: a string holds half a character")
        seen = events.wait_for(lambda es: any(isinstance(e, ToolCallFinished) for e in es))
    asked = [e for e in seen if isinstance(e, ApprovalRequested)]
    assert [e.arguments for e in asked] == [request.arguments]
    for event in seen:
        encodable(event)


def test_a_tool_name_and_call_id_with_a_lone_surrogate_are_escaped_everywhere(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    """The live events carry the escaped name and id; the next request sends the escaped call
    with its result (one request, not a 500 retried as a server error); the transcript keeps
    the call and its result."""
    name, call_id = "look" + HALF, "call_" + HALF
    stub.handler = scripted([raw_call(name, "{}", call_id), DONE])
    events = EventLog()
    with open_rt(tmp_path / "s", [Profile("leaf", runner=stub_runner(stub))]) as rt:
        rt.subscribe(events)
        agent = rt.spawn("leaf", "look around")
        done = rt.wait(agent.id, timeout=SETTLE_S)
        assert (done.status, done.output) == ("completed", "all done"), done.error
        assert len(stub.requests) == 2, "the second request was refused and retried"
        sent = stub.requests[-1].messages
        (assistant,) = [m for m in sent if m.get("tool_calls")]
        (call,) = assistant["tool_calls"]
        assert (call["id"], call["function"]["name"]) == ("call_" + ESCAPED, "look" + ESCAPED)
        (result,) = tool_messages(sent)
        assert result["tool_call_id"] == call["id"]
        assert "unknown tool" in json.loads(result["content"])["error"]
        stored = rt.inspect(agent.id).transcript
        calls = [c for m in stored for c in m.tool_calls]
        assert [(c.id, c.name) for c in calls] == [("call_" + ESCAPED, "look" + ESCAPED)]
        assert [m.tool_call_id for m in stored if m.role == "tool"] == ["call_" + ESCAPED]
        seen = events.wait_for(lambda es: any(isinstance(e, ToolCallFinished) for e in es))
    started = [e for e in seen if isinstance(e, ToolCallStarted)]
    assert [(e.call_id, e.tool) for e in started] == [("call_" + ESCAPED, "look" + ESCAPED)]
    for event in seen:
        encodable(event)


def test_two_ids_that_differ_only_by_their_escape_stay_two_calls(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    """A raw lone surrogate and its escape written out are the same text once cleaned: each
    call keeps an id of its own, so each result answers one call."""
    reply = raw_call("nothing", "{}", "c" + HALF)
    reply["tool_calls"].append(
        {"id": "c" + ESCAPED, "type": "function", "function": {"name": "none", "arguments": "{}"}}
    )
    stub.handler = scripted([reply, DONE])
    with open_rt(tmp_path / "s", [Profile("leaf", runner=stub_runner(stub))]) as rt:
        agent = rt.spawn("leaf", "two calls")
        assert rt.wait(agent.id, timeout=SETTLE_S).status == "completed"
        sent = stub.requests[-1].messages
        ids = [c["id"] for m in sent for c in m.get("tool_calls") or ()]
        assert len(set(ids)) == 2 and all(i.startswith("c" + ESCAPED) for i in ids)
        assert sorted(m["tool_call_id"] for m in tool_messages(sent)) == sorted(ids)


def test_a_tool_error_with_a_lone_surrogate_is_escaped(stub: OpenAIStub, tmp_path: Path) -> None:
    """A host tool that raises with half an emoji in its message: the model and the event get
    the escaped text."""

    @tool
    def broken() -> str:
        """Fail."""
        raise ValueError("no " + HALF + " here")

    stub.handler = scripted([raw_call("broken", "{}"), DONE])
    events = EventLog()
    runner = stub_runner(stub, host_tools={"broken": broken})
    with open_rt(tmp_path / "s", [Profile("leaf", tools=["broken"], runner=runner)]) as rt:
        rt.subscribe(events)
        agent = rt.spawn("leaf", "break it")
        assert rt.wait(agent.id, timeout=SETTLE_S).status == "completed"
        (result,) = tool_messages(stub.requests[-1].messages)
        assert "no " + ESCAPED + " here" in result["content"]  # the text the model is sent
        assert "no " + HALF + " here" in json.loads(result["content"])["error"]
        seen = events.wait_for(lambda es: any(isinstance(e, ToolCallFinished) for e in es))
    (finished,) = [e for e in seen if isinstance(e, ToolCallFinished)]
    assert finished.error is not None and ESCAPED in finished.error
    encodable(finished)


def test_streamed_text_with_a_lone_surrogate_is_escaped_in_its_deltas(tmp_path: Path) -> None:
    """Each streamed piece is cleaned as it arrives, as the whole answer is (the chaos model
    streams half an emoji as it is; litellm's OpenAI stream decoder would replace it)."""
    weights = {**dict.fromkeys(KINDS, 0.0), "lone_surrogate": 1.0}
    events = EventLog()
    runner = LiteLLMRunner(CHAOS_MODEL, stream=True, retries=0)
    with (
        ChaosModel(3, weights=weights),
        open_rt(tmp_path / "s", [Profile("leaf", runner=runner)]) as rt,
    ):
        rt.subscribe(events)
        agent = rt.spawn("leaf", "say it")
        done = rt.wait(agent.id, timeout=SETTLE_S)
        assert done.status == "completed", done.error
        assert done.output is not None and done.output.endswith("half an emoji: " + ESCAPED)
        rt.wait_idle(SETTLE_S)
    deltas = [e for e in events.events if isinstance(e, ModelDelta)]
    assert "".join(e.text for e in deltas) == done.output
    for event in deltas:
        encodable(event)
