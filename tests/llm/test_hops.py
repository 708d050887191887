"""What a model turn costs the supervisor: the commands it sends, counted by kind.

A model turn's stored state rides on its start (no ``LlmLoad``), and the
step that ends it is committed with its settle (no ``LlmStep`` of its own):
a one-call turn is its spawn and its settle. A ``spawn_subagent`` with
``wait=true`` is one ``RunMany`` of one child (no ``Spawn``, no ``Wait``).
Counted through the runtime's command timer (``rt._attach_timings``), as
``retinue.metrics`` counts them.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from protocol.test_result_canonical import near_the_bound
from support import CommandCounter

from llm.conftest import SETTLE_S, tool_call
from retinue import AgentState, Limits, Profile, Runtime, Turn
from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner, build_toolbox
from retinue.testing import OpenAIStub, StubReply

pytestmark = pytest.mark.usefixtures("litellm")


def note(text: str) -> str:
    """Take a note."""
    return f"noted {text}"


def counted_run(rt: Runtime, profile: str, task: str) -> tuple[Any, Counter[str]]:
    """Run one turn of ``profile`` to its end; return its completion and the commands sent."""
    sink = CommandCounter()
    detach = rt._attach_timings(sink)
    assert detach is not None
    try:
        done = rt.wait(rt.spawn(profile, task).id, timeout=SETTLE_S)
    finally:
        detach()
    return done, sink.counted()


def test_a_one_call_turn_is_its_spawn_and_its_settle(tmp_path: Path) -> None:
    profiles = [Profile("leaf", model=SCRIPTED_MODEL)]
    with Runtime.open(tmp_path / "s", profiles=profiles) as rt:
        done, kinds = counted_run(rt, "leaf", "check the login handler")
        info = rt.get(done.agent_id)
        detail = rt.inspect(done.agent_id, transcript_tail=10)
    assert done.status == "completed" and done.output == "Done: check the login handler"
    assert kinds["LlmLoad"] == 0  # the stored state came with the turn's start
    assert kinds["LlmStep"] == 0  # the one step was committed with the settle
    assert kinds["Spawn"] == 1 and kinds["Settle"] == 1
    # The step the settle carried is stored: the usage and the transcript.
    assert info.usage.prompt_tokens > 0 and info.tree_usage == info.usage
    assert [m.role for m in detail.transcript] == ["user", "assistant"]


def test_a_turn_with_tool_steps_sends_one_step_per_save_but_the_last(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    def handler(request: Any) -> StubReply:
        if request.number == 1:
            return StubReply(message=tool_call("note", {"text": "x"}, "call_1"))
        return StubReply(message={"role": "assistant", "content": "noted"})

    stub.handler = handler
    runner = LiteLLMRunner(
        "openai/stub-model", api_base=stub.url, api_key="x", host_tools={"note": note}
    )
    profiles = [Profile("worker", tools=["note"], runner=runner)]
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=Limits()) as rt:
        done, kinds = counted_run(rt, "worker", "note x")
        info = rt.get(done.agent_id)
    assert done.status == "completed" and done.output == "noted", done.error
    assert kinds["LlmLoad"] == 0
    # The tool step: its intents before the call runs, its result after; the answer
    # went with the settle.
    assert kinds["LlmStep"] == 2 and kinds["Settle"] == 1
    assert info.state is AgentState.COMPLETED and info.usage.prompt_tokens > 0


def rt_path(done: Any) -> str:
    return str(done.path)


def test_spawn_subagent_with_wait_is_one_command_with_the_childs_messages(
    tmp_path: Path,
) -> None:
    results: dict[str, Any] = {}

    async def lead(turn: Turn) -> str:
        box = build_toolbox(turn, tools=turn.profile.tools)
        arguments = {"agent": "worker", "message": "look", "task_name": "w"}
        results["ok"] = json.loads(await box.call("spawn_subagent", json.dumps(arguments)))
        again = json.loads(await box.call("spawn_subagent", json.dumps(arguments)))
        results["refused"] = again  # the name is taken: the spawn's own error
        return "led"

    async def worker(turn: Turn) -> str:
        parent = turn.agent.parent_path
        await turn.send_async(parent, "halfway")
        await turn.send_async(parent, "almost")
        return "found it"

    profiles = [
        Profile("lead", subagents=["worker"], runner=lead),
        Profile("worker", runner=worker),
    ]
    with Runtime.open(tmp_path / "s", profiles=profiles) as rt:
        done, kinds = counted_run(rt, "lead", "go")
        path = results["ok"]["path"]
        child = rt.get(path)
        unread = rt.inspect(done.agent_id).unread
    assert done.status == "completed" and done.output == "led", done.error
    assert path == f"{rt_path(done)}/w"
    assert results["ok"] == {
        "path": path,
        "status": "completed",
        "output": "found it",
        "messages": ["halfway", "almost"],  # taken with the result: no next turn gets them
    }
    assert unread == ()
    assert "error" in results["refused"] and path in results["refused"]["error"]
    assert child.state is AgentState.COMPLETED
    # One RunMany a call: no Spawn of the child and no Wait of the lead.
    assert kinds["RunMany"] == 2 and kinds["Spawn"] == 1 and kinds["Wait"] == 1


def test_a_structured_result_over_the_bound_fails_with_its_step_stored(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    stub.handler = lambda request: StubReply(
        message={"role": "assistant", "content": near_the_bound()}
    )
    runner = LiteLLMRunner("openai/stub-model", api_base=stub.url, api_key="x")
    profiles = [Profile("leaf", result_format="structured", runner=runner)]
    limits = Limits(output_max_bytes=20_000)
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=limits) as rt:
        done, kinds = counted_run(rt, "leaf", "report")
        info = rt.get(done.agent_id)
        detail = rt.inspect(done.agent_id, transcript_tail=10)
    assert (done.error or "").startswith("ResultContractError: invalid structured result")
    # The answer's step went with the failed settle: its usage and the answer are stored.
    assert kinds["LlmStep"] == 0 and kinds["Settle"] == 1
    assert info.usage.prompt_tokens > 0
    assert [m.role for m in detail.transcript] == ["user", "assistant"]
