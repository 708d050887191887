"""What a model answers, kept whole: structured results near the bound, lone surrogates."""

from __future__ import annotations

import json
from typing import Any

from protocol.test_result_canonical import near_the_bound

from llm.conftest import run, stub_runner, tool_call, tool_messages
from retinue import AgentState, Profile
from retinue.protocol.results import MAX_INPUT_BYTES, parse_result
from retinue.testing import OpenAIStub, StubReply


def answer(content: str) -> Any:
    return lambda request: StubReply(message={"role": "assistant", "content": content})


def test_a_valid_result_near_the_bound_completes_as_valid_json(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    text = near_the_bound()
    stub.handler = answer(text)
    rt = llm_runtime([Profile("leaf", result_format="structured", runner=stub_runner(stub))])
    info = run(rt, "leaf", "report")
    assert info.state is AgentState.COMPLETED, info.error
    assert json.loads(info.output or "") == json.loads(text)  # whole, never cut
    assert parse_result(info.output or "") == parse_result(text)


def test_a_result_over_a_lowered_output_bound_fails_with_a_contract_error(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    stub.handler = answer(near_the_bound())
    rt = llm_runtime(
        [Profile("leaf", result_format="structured", runner=stub_runner(stub))],
        output_max_bytes=20_000,
    )
    info = run(rt, "leaf", "report")
    assert info.state is AgentState.FAILED
    assert (info.error or "").startswith("ResultContractError: invalid structured result")
    assert "output_max_bytes" in (info.error or "")
    assert MAX_INPUT_BYTES > 20_000


def test_an_answer_with_a_lone_surrogate_completes_and_is_stored(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    stub.handler = answer("half an emoji: \ud83d and the rest")
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub))])
    info = run(rt, "leaf", "say it")
    assert info.state is AgentState.COMPLETED, info.error
    assert "half an emoji" in (info.output or "")
    detail = rt.inspect(info.id)
    stored = [m for m in detail.transcript if m.role == "assistant"]
    assert stored and "half an emoji" in (stored[-1].content or "")
    (stored[-1].content or "").encode("utf-8")  # storable, lossless as an escape


def test_an_answer_litellm_cannot_parse_fails_in_one_line_without_a_traceback(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    """Content parts (a list where litellm 1.110 wants a string) fail litellm's parsing, and
    litellm's error text holds a Python traceback: the turn's error is one line without it."""
    parts = [{"type": "text", "text": "hello"}]
    stub.handler = lambda r: StubReply(message={"role": "assistant", "content": parts})
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub, retries=0))])
    info = run(rt, "leaf", "say hello")
    assert info.state is AgentState.FAILED
    error = info.error or ""
    assert error.startswith("ModelCallFailed: openai status 500: Invalid response object")
    assert "Traceback" not in error and "File " not in error and "\n" not in error


def test_tool_calls_sharing_an_id_each_get_an_id_and_a_result_of_their_own(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    """A provider that sends one id for two calls of a step must not leave two results
    answering one call (the next request would be refused): each call gets its own id."""

    def handler(request: Any) -> StubReply:
        if not any(m.get("role") == "tool" for m in request.messages):
            calls = [tool_call("list_agents", {}, "dup"), tool_call("list_agents", {}, "dup")]
            step = {**calls[0], "tool_calls": [c["tool_calls"][0] for c in calls]}
            return StubReply(message=step)
        return StubReply(message={"role": "assistant", "content": "done"})

    stub.handler = handler
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub))])
    info = run(rt, "leaf", "list twice")
    assert info.state is AgentState.COMPLETED, info.error
    sent = stub.requests[-1].messages
    (step,) = [m for m in sent if m.get("tool_calls")]
    ids = [c["id"] for c in step["tool_calls"]]
    assert len(set(ids)) == 2 and ids[0] == "dup"
    assert sorted(m["tool_call_id"] for m in tool_messages(sent)) == sorted(ids)
    stored = [m for m in rt.inspect(info.id).transcript if m.role == "tool"]
    assert sorted(m.tool_call_id or "" for m in stored) == sorted(ids)
