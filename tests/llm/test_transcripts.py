"""Transcripts: stored in LMDB, bounded, continued after a crash, removed by compaction."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support import wait_until

from llm.conftest import SETTLE_S, run, stub_runner, tool_call
from retinue import AgentState, Profile, Runtime, UnknownAgent
from retinue.llm.chat import decode_transcript
from retinue.protocol.chat import CUT_MARKER
from retinue.protocol.records import TranscriptMessage
from retinue.testing import OpenAIStub, StubReply

pytestmark = pytest.mark.usefixtures("litellm")

ROOT = Path(__file__).resolve().parents[2]


class BigTools:
    """A toolbox with one tool, ``dump``, whose result is large."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.calls: list[tuple[str, str]] = []

    def schemas(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": "dump",
                    "description": "Return a big text.",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ]

    async def call(self, name: str, arguments: str) -> str:
        self.calls.append((name, arguments))
        return "x" * self.size


def _stored(rt: Runtime, agent_id: str) -> list[dict[str, Any]]:
    """Return the agent's whole stored transcript as chat messages, read by ``rt.inspect``."""
    detail = rt.inspect(agent_id, transcript_tail=1_000_000)
    assert len(detail.transcript) == detail.transcript_length  # all of it
    return [_chat(m) for m in detail.transcript]


def _chat(message: TranscriptMessage) -> dict[str, Any]:
    """Return a stored message in the OpenAI chat shape the model is sent."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out


def test_the_tool_loop_runs_tools_until_the_model_answers(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    tools = BigTools(10)
    replies = [tool_call("dump", {"n": 1}, "c1"), tool_call("dump", {"n": 2}, "c2"), None]
    stub.handler = lambda r: StubReply(message=replies[r.number - 1])
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub, toolbox=lambda *a, **k: tools))])
    info = run(rt, "leaf", "use the tool")
    assert info.state is AgentState.COMPLETED
    assert tools.calls == [("dump", '{"n": 1}'), ("dump", '{"n": 2}')]
    assert [t["function"]["name"] for t in stub.requests[0].body["tools"]] == ["dump"]
    last = stub.requests[2].messages
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "assistant", "tool"]
    assert last[2] == {"role": "tool", "tool_call_id": "c1", "name": "dump", "content": "x" * 10}
    assert _stored(rt, info.id)[-1] == {"role": "assistant", "content": info.output}


def test_max_tool_calls_fails_the_turn(llm_runtime: Any, stub: OpenAIStub) -> None:
    tools = BigTools(1)
    stub.handler = lambda r: StubReply(message=tool_call("dump", {}, f"c{r.number}"))
    rt = llm_runtime(
        [Profile("leaf", runner=stub_runner(stub, max_tool_calls=3, toolbox=lambda *a, **k: tools))]
    )
    info = run(rt, "leaf", "loop forever")
    assert info.state is AgentState.FAILED
    assert info.error == (
        "ToolCallLimitExceeded: the model asked for more than max_tool_calls=3 tool calls "
        "in one turn"
    )
    assert len(tools.calls) == 3


def test_stored_transcripts_are_bounded_with_a_visible_marker(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    tools = BigTools(3000)
    replies = [tool_call("dump", {}, f"c{i}") for i in range(4)]
    stub.handler = lambda r: StubReply(message=replies[r.number - 1] if r.number <= 4 else None)
    rt = llm_runtime(
        [Profile("leaf", runner=stub_runner(stub, toolbox=lambda *a, **k: tools))],
        transcript_max_bytes=8000,
    )
    info = run(rt, "leaf", "dump a lot")
    assert info.state is AgentState.COMPLETED
    stored = _stored(rt, info.id)
    assert len(json.dumps(stored)) <= 8000
    results = [m["content"] for m in stored if m["role"] == "tool"]
    assert results[0] == CUT_MARKER  # the oldest went first
    assert results[-1] == "x" * 3000  # the newest is kept
    assert stored[0] == {"role": "user", "content": "dump a lot"}
    # The model saw the cut transcript too.
    assert CUT_MARKER in json.dumps(stub.requests[-1].messages)


def test_compaction_removes_the_transcript_with_the_agent(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub))], retain_closed_agents=1)
    first = rt.spawn("leaf", "one")
    second = rt.spawn("leaf", "two")
    assert rt.wait(first.id).status == rt.wait(second.id).status == "completed"
    assert _stored(rt, first.id) and _stored(rt, second.id)
    rt.close(first.id)
    rt.close(second.id)
    assert rt.compact().agents == 1
    with pytest.raises(UnknownAgent):
        rt.inspect(first.id)
    assert _stored(rt, second.id) != []
    # A transcript left behind would be invisible to every public read (its agent is
    # gone): this one check reads the store below the API.
    store: Any = rt._store
    assert decode_transcript(store.get("transcripts", first.id.encode())) == ([], 0)
    assert decode_transcript(store.get("transcripts", second.id.encode()))[0] != []


CHILD = textwrap.dedent(
    """
    import sys, time
    from retinue import Profile, Runtime
    from retinue.llm import LiteLLMRunner
    runner = LiteLLMRunner("openai/stub-model", api_base=sys.argv[2], api_key="x")
    rt = Runtime.open(sys.argv[1], profiles=[Profile("leaf", runner=runner)])
    info = rt.spawn("leaf", "remember the number 42", name="memo")
    rt.wait(info.id, timeout=60)
    rt.follow_up(info.id, "what was the number?")
    print("asked", flush=True)
    time.sleep(120)  # killed while the second call is in flight
    """
)


def test_an_agent_killed_mid_call_resumes_with_its_history(
    tmp_path: Path, stub: OpenAIStub, llm_runtime: Any
) -> None:
    stub.handler = lambda r: StubReply(delay_s=60.0) if r.number == 2 else None
    store = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(store), stub.url], env=env, stdout=subprocess.DEVNULL
    ) as child:
        try:
            wait_until(lambda: len(stub.requests) >= 2, timeout=150, what="the second model call")
        finally:
            child.send_signal(signal.SIGKILL)
    stub.handler = None
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub))], path=store)
    memo = rt.get("/root/memo")
    assert memo.state is AgentState.INTERRUPTED
    assert memo.usage.total_tokens > 0  # the first call's usage survived the crash
    rt.resume(memo.id)
    wait_until(lambda: rt.get(memo.id).state is AgentState.COMPLETED, timeout=SETTLE_S)
    messages = stub.requests[-1].messages
    # The killed turn had stored nothing yet (its input is replayed, never doubled).
    assert messages == [
        {"role": "user", "content": "remember the number 42"},
        {"role": "assistant", "content": "Done: remember the number 42"},
        {
            "role": "user",
            "content": "The previous turn was interrupted; carry on with the task: "
            "what was the number?",
        },
    ]
