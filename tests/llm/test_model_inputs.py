"""The input rule for model turns: one rule with Python runners, the transcript counting as use.

A model turn stores its input in its transcript with its first model step; a
turn that fails after that step is restarted, and the restarted attempt reads
its input from the transcript, exactly once: it is not handed again.
"""

from __future__ import annotations

from typing import Any

from support import wait_settled

from llm.conftest import SETTLE_S, stub_runner, tool_call
from retinue import AgentState, Profile, Restart
from retinue.testing import OpenAIStub, StubReply

NOTE = "the release notes are in docs/notes.md"


def test_a_model_turn_failing_after_its_first_step_reads_its_input_once_when_restarted(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    def handler(request: Any) -> StubReply | None:
        if request.number == 2:  # the follow-up's first step: its input is stored with it
            return StubReply(message=tool_call("list_agents", {}, "c1"))
        if request.number == 3:  # then the provider fails (a 5xx: transient, restarted)
            return StubReply(status=503, error="overloaded")
        return StubReply(message={"role": "assistant", "content": "noted"})

    stub.handler = handler
    restart = Restart(max_restarts=2, backoff_s=0.01, jitter=0.0)
    rt = llm_runtime([Profile("solo", runner=stub_runner(stub, retries=0), restart=restart)])
    solo = rt.spawn("solo", "first", name="solo")
    wait_settled(rt, solo.id, timeout=SETTLE_S)
    rt.send(solo.id, NOTE)
    rt.follow_up(solo.id, "ship the release")
    done = wait_settled(rt, solo.id, generation=3, timeout=SETTLE_S)  # 2 failed, 3 restarted
    assert (done.state, done.attempt, done.output) == (AgentState.COMPLETED, 2, "noted")
    assert "503" in (done.last_error or "")
    restarted = [m.get("content") or "" for m in stub.requests[3].messages]
    assert sum(NOTE in text for text in restarted) == 1, "from its transcript, not handed again"
    assert rt.inspect(solo.id).unread == ()
