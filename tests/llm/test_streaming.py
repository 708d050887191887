"""LiteLLMRunner(stream=True): litellm's streaming path, assembled into a plain call's answer.

Streamed through the real litellm code path: the offline model's ``astreaming``
and litellm's OpenAI provider against the stub's server-sent events (text and
tool-call arguments in pieces, parallel calls, usage in the last chunk).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support import wait_until

from llm.conftest import SETTLE_S, run, stub_runner
from retinue import (
    AgentState,
    Event,
    ModelCallFinished,
    ModelDelta,
    Profile,
    Runtime,
    TurnSettled,
)
from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner
from retinue.testing import OpenAIStub, StubReply

pytestmark = pytest.mark.usefixtures("litellm")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A folder with three files for a reading leaf (parallel read_file calls)."""
    folder = tmp_path / "ws"
    folder.mkdir()
    for name, text in (("a.txt", "alpha\n"), ("b.txt", "beta\n"), ("c.txt", "gamma é 🙂\n")):
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def transcript(rt: Runtime, ref: str) -> list[Any]:
    """The stored transcript of an agent."""
    return list(rt.inspect(ref, transcript_tail=1000).transcript)


def reading_run(
    tmp_path: Path, name: str, runner: LiteLLMRunner, workspace: Path
) -> tuple[Any, list[Any], list[Event]]:
    """Run one reading leaf in a fresh store; return its info, transcript and events."""
    seen: list[Event] = []
    profile = Profile("reader", runner=runner, tools="read")
    with Runtime.open(tmp_path / name, profiles=[profile], workspace=workspace) as rt:
        rt.subscribe(seen.append)
        info = run(rt, "reader", "read the files")
        rt.wait_idle(timeout=SETTLE_S)
        return info, transcript(rt, info.id), seen


def deltas_of(events: list[Event], agent_id: str) -> str:
    return "".join(e.text for e in events if isinstance(e, ModelDelta) and e.agent_id == agent_id)


def test_streaming_with_tool_calls_in_pieces_gives_the_same_transcript(
    tmp_path: Path, stub: OpenAIStub, workspace: Path
) -> None:
    stub.handler = lambda r: StubReply(piece=3)  # arguments arrive three characters at a time
    plain, plain_transcript, _ = reading_run(
        tmp_path, "plain", stub_runner(stub, tools="read", workspace=workspace), workspace
    )
    streamed, streamed_transcript, events = reading_run(
        tmp_path,
        "streamed",
        stub_runner(stub, tools="read", workspace=workspace, stream=True),
        workspace,
    )
    assert streamed.state is AgentState.COMPLETED, streamed.error
    assert streamed.output == plain.output and "read 3 files" in (streamed.output or "")
    assert streamed_transcript == plain_transcript
    parallel = [m for m in streamed_transcript if m.role == "assistant" and len(m.tool_calls) == 3]
    assert [c.name for c in parallel[0].tool_calls] == ["read_file"] * 3
    # The usage is the one the provider reported in its last chunk.
    assert streamed.usage == plain.usage and streamed.usage.prompt_tokens > 0
    # Every request after the first asked for it, and was streamed.
    bodies = [r.body for r in stub.requests[len(stub.requests) // 2 :]]
    assert all(b["stream"] and b["stream_options"] == {"include_usage": True} for b in bodies)
    assert deltas_of(events, streamed.id) == streamed.output


def test_deltas_assemble_to_the_stored_answer(llm_runtime: Any, stub: OpenAIStub) -> None:
    answer = "A streamed answer, with é and 🙂, in many pieces."
    stub.handler = lambda r: StubReply(message={"role": "assistant", "content": answer}, piece=2)
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub, stream=True))])
    seen: list[Event] = []
    rt.subscribe(seen.append)
    info = run(rt, "leaf", "say it")
    rt.wait_idle(timeout=SETTLE_S)
    assert info.output == answer, info.error
    pieces = [e for e in seen if isinstance(e, ModelDelta)]
    assert len(pieces) == -(-len(answer) // 2)  # one per two-character piece
    assert deltas_of(seen, info.id) == answer
    assert transcript(rt, info.id)[-1].content == answer
    # The deltas come before the call's ModelCallFinished, and that before the settle.
    kinds = [type(e).__name__ for e in seen if e.agent_id == info.id]
    assert kinds.index("ModelCallFinished") > max(
        i for i, k in enumerate(kinds) if k == "ModelDelta"
    )
    assert kinds.index("TurnSettled") > kinds.index("ModelCallFinished")


def test_interleaved_parallel_calls_are_assembled_by_index(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    def call(
        index: int, call_id: str | None = None, name: str | None = None, args: str = ""
    ) -> Any:
        entry: dict[str, Any] = {"index": index, "function": {"arguments": args}}
        if call_id is not None:
            entry.update(id=call_id, type="function")
            entry["function"]["name"] = name
        return {"tool_calls": [entry]}

    chunks = [
        {"role": "assistant", "content": ""},
        call(0, "c0", "echo_back"),
        call(1, "c1", "echo_back"),
        call(1, args='{"text": "se'),
        call(0, args='{"text": "fi'),
        call(0, args='rst"}'),
        call(1, args='cond"}'),
    ]
    stub.handler = lambda r: StubReply(chunks=chunks) if r.number == 1 else None
    said: list[str] = []

    def echo_back(text: str) -> str:
        said.append(text)
        return text

    runner = stub_runner(stub, stream=True, host_tools={"echo_back": echo_back})
    rt = llm_runtime([Profile("leaf", runner=runner, tools=["echo_back"])])
    info = run(rt, "leaf", "go")
    assert info.state is AgentState.COMPLETED
    assert sorted(said) == ["first", "second"]
    (calls,) = [m for m in transcript(rt, info.id) if m.tool_calls]
    assert [(c.id, c.arguments) for c in calls.tool_calls] == [
        ("c0", '{"text": "first"}'),
        ("c1", '{"text": "second"}'),
    ]
    assert calls.content is None  # no text streamed: as a plain answer with only calls


def test_the_offline_model_streams_the_same_run(tmp_path: Path, workspace: Path) -> None:
    plain, plain_transcript, _ = reading_run(
        tmp_path, "plain", LiteLLMRunner(SCRIPTED_MODEL, workspace=workspace), workspace
    )
    streamed, streamed_transcript, events = reading_run(
        tmp_path,
        "streamed",
        LiteLLMRunner(SCRIPTED_MODEL, workspace=workspace, stream=True),
        workspace,
    )
    assert plain.state is AgentState.COMPLETED, plain.error
    assert streamed.output == plain.output and streamed_transcript == plain_transcript
    assert streamed.usage == plain.usage
    assert deltas_of(events, streamed.id) == streamed.output


def test_a_streamed_call_is_retried_and_bounded_like_a_plain_one(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    stub.handler = lambda r: StubReply(status=503, error="busy") if r.number == 1 else None
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub, stream=True, retries=2))])
    seen: list[Event] = []
    rt.subscribe(seen.append)
    info = run(rt, "leaf", "retry me")
    rt.wait_idle(timeout=SETTLE_S)
    assert info.output == "Done: retry me" and len(stub.requests) == 2
    assert len([e for e in seen if isinstance(e, ModelCallFinished)]) == 1
    # A stream slower than request_timeout_s is abandoned and retried, then fails.
    stub.handler = lambda r: StubReply(chunk_delay_s=0.3)
    slow = stub_runner(stub, stream=True, request_timeout_s=0.5, retries=1)
    rt2 = llm_runtime([Profile("leaf", runner=slow)], path=rt.path.parent / "slow")
    failed = run(rt2, "leaf", "slowly")
    assert failed.state is AgentState.FAILED
    assert failed.error == "ModelCallFailed: openai: no answer within 0.5 s (2 attempts)"


def test_cost_is_counted_for_a_streamed_call(llm_runtime: Any, stub: OpenAIStub) -> None:
    stub.handler = lambda r: StubReply(
        message={"role": "assistant", "content": "ok"}, usage=(1000, 500)
    )
    plain = LiteLLMRunner("openai/gpt-4o-mini", api_base=stub.url, api_key="x")
    streamed = LiteLLMRunner("openai/gpt-4o-mini", api_base=stub.url, api_key="x", stream=True)
    rt = llm_runtime([Profile("plain", runner=plain), Profile("streamed", runner=streamed)])
    a = run(rt, "plain", "x")
    b = run(rt, "streamed", "x")
    assert (b.usage.prompt_tokens, b.usage.completion_tokens) == (1000, 500)
    assert b.usage.cost_usd == pytest.approx(a.usage.cost_usd) and b.usage.cost_usd > 0


@pytest.fixture
def no_streaming_provider(litellm: ModuleType) -> Iterator[str]:
    """Register the custom provider ``nostream`` for one test; return its model name."""

    class Plain(litellm.CustomLLM):  # type: ignore[name-defined,misc]
        async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
            return litellm.ModelResponse(
                choices=[{"index": 0, "message": {"role": "assistant", "content": "plain"}}]
            )

    before = list(getattr(litellm, "custom_provider_map"))  # noqa: B009 - a module's global
    added = {"provider": "nostream", "custom_handler": Plain()}
    setattr(litellm, "custom_provider_map", [*before, added])  # noqa: B010
    try:
        yield "nostream/model"
    finally:
        setattr(litellm, "custom_provider_map", before)  # noqa: B010


def test_a_provider_that_cannot_stream_fails_in_one_clear_line(
    llm_runtime: Any, no_streaming_provider: str
) -> None:
    runner = LiteLLMRunner(no_streaming_provider, stream=True, retries=3, retry_base_s=0.01)
    rt = llm_runtime([Profile("leaf", runner=runner)])
    info = run(rt, "leaf", "x")
    assert info.state is AgentState.FAILED
    assert info.error == (
        "ModelCallFailed: nostream/model: the provider 'nostream' cannot stream (its handler "
        "has no astreaming); give the runner stream=False"
    )
    # Not retried (one line, no 503 from litellm's stream wrapper); unstreamed it works.
    rt2 = llm_runtime(
        [Profile("leaf", runner=LiteLLMRunner(no_streaming_provider))],
        path=rt.path.parent / "plain",
    )
    assert run(rt2, "leaf", "y").output == "plain"


def test_stream_must_be_a_bool() -> None:
    from retinue.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="stream must be True or False"):
        LiteLLMRunner(SCRIPTED_MODEL, stream="yes")  # type: ignore[arg-type]


def test_an_interrupted_stream_publishes_nothing_after_its_settle(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    stub.handler = lambda r: StubReply(
        message={"role": "assistant", "content": "x" * 400}, piece=4, chunk_delay_s=0.02
    )
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub, stream=True))])
    seen: list[Event] = []
    rt.subscribe(seen.append)
    info = rt.spawn("leaf", "slow")
    wait_until(
        lambda: any(isinstance(e, ModelDelta) for e in seen), timeout=SETTLE_S, what="a delta"
    )
    rt.interrupt(info.id)
    assert rt.wait(info.id).status == "interrupted"
    rt.wait_idle(timeout=SETTLE_S)
    mine = [e for e in seen if e.agent_id == info.id]
    settled = next(i for i, e in enumerate(mine) if isinstance(e, TurnSettled))
    assert not [e for e in mine[settled:] if isinstance(e, ModelDelta | ModelCallFinished)]
    assert json.dumps(deltas_of(seen, info.id)).count("x") < 400
