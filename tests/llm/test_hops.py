"""What a model turn costs the supervisor: the commands it sends, counted by kind.

A model turn's stored state rides on its start (no ``LlmLoad``), and the
step that ends it is committed with its settle (no ``LlmStep`` of its own):
a one-call turn is its spawn and its settle. Counted through the runtime's
command timer (``rt._attach_timings``), as ``retinue.metrics`` counts them.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llm.conftest import SETTLE_S, tool_call
from retinue import AgentState, Limits, Profile, Runtime
from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner
from retinue.testing import OpenAIStub, StubReply

pytestmark = pytest.mark.usefixtures("litellm")


class Commands:
    """A timing sink that counts the supervisor's commands by kind."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kinds: Counter[str] = Counter()

    def observe_commit(self, seconds: float) -> None:
        pass

    def observe_command(self, kind: str, seconds: float) -> None:
        with self.lock:
            self.kinds[kind] += 1

    def counted(self) -> Counter[str]:
        with self.lock:
            return Counter(self.kinds)


def note(text: str) -> str:
    """Take a note."""
    return f"noted {text}"


def counted_run(rt: Runtime, profile: str, task: str) -> tuple[Any, Counter[str]]:
    """Run one turn of ``profile`` to its end; return its completion and the commands sent."""
    sink = Commands()
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
