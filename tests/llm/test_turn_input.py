"""A model turn's input (its task, messages, children's completions) is never lost.

It is stored in the transcript with the turn's first model step, in the same
commit that makes it the transcript's; a model turn that fails or is
interrupted before that step gives its input back, so the agent's next turn
(``follow_up``, ``resume``, a wake) receives it. Found: a wake turn took its
child's completion, then failed on a 503 past its retries (or was
interrupted before the model's first answer), and after ``follow_up`` the
model never saw the child's result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from conftest import wait_settled

from llm.conftest import SETTLE_S, stub_runner, tool_call
from retinue import AgentState, CompletionStatus, Profile, Turn
from retinue.testing import OpenAIStub, StubReply

CHILD_SAID = "the child's result: 4217"


def _child(turn: Turn) -> str:
    return CHILD_SAID


def _saw_child(request: Any) -> bool:
    return any(CHILD_SAID in (m.get("content") or "") for m in request.messages)


def _parent_waiting_for_its_wake(stub: OpenAIStub, llm_runtime: Any, **runner: Any) -> Any:
    """A model parent dispatches a child (async spawn) and answers; the child then returns."""
    stub.handler = lambda r: None
    profiles = [
        Profile("boss", subagents=["kid"], runner=stub_runner(stub, **runner)),
        Profile("kid", runner=_child),
    ]
    rt = llm_runtime(profiles)
    return rt


def _dispatching(wake: Callable[[Any], StubReply | None]) -> Callable[[Any], StubReply | None]:
    """A stub handler: turn 1 dispatches the child and answers; ``wake`` answers the rest."""

    def handler(request: Any) -> StubReply | None:
        if request.number == 1:  # the first turn: dispatch the child, without waiting
            spawn = {"agent": "kid", "message": "go", "wait": False}
            return StubReply(message=tool_call("spawn_subagent", spawn, "c1"))
        if request.number == 2:
            return StubReply(message={"role": "assistant", "content": "dispatched"})
        return wake(request)

    return handler


def test_a_wake_turn_that_fails_before_its_first_answer_keeps_its_input(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    def wake(request: Any) -> StubReply | None:
        if not _saw_child(request) or request.number == 3:
            return StubReply(status=503, error="overloaded")  # the wake turn fails
        return None

    rt = _parent_waiting_for_its_wake(stub, llm_runtime, retries=0)
    stub.handler = _dispatching(wake)
    boss = rt.spawn("boss", "delegate", name="boss")
    woken = wait_settled(rt, boss.id, generation=2, timeout=SETTLE_S)  # the wake turn
    assert woken.state is AgentState.FAILED
    assert woken.generation == 2 and "503" in (woken.error or "")
    assert _saw_child(stub.requests[2])  # the failed wake turn was handed the completion
    # Its input went back: the follow-up turn's model call shows the child's result.
    rt.follow_up(boss.id, "what did the child say?")
    assert wait_settled(rt, boss.id, generation=3, timeout=SETTLE_S).state is AgentState.COMPLETED
    assert _saw_child(stub.requests[-1])
    assert rt.get(boss.id).generation == 3  # the failed wake did not wake itself again


def test_a_wake_turn_interrupted_before_its_first_answer_keeps_its_input(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    asked = threading.Event()

    def wake(request: Any) -> StubReply | None:
        if request.number == 3:
            asked.set()
            return StubReply(delay_s=60.0)  # interrupted while the model thinks
        return StubReply(message={"role": "assistant", "content": "noted"})  # spawns nothing

    rt = _parent_waiting_for_its_wake(stub, llm_runtime)
    stub.handler = _dispatching(wake)
    boss = rt.spawn("boss", "delegate", name="boss")
    assert asked.wait(SETTLE_S)
    assert _saw_child(stub.requests[2])  # the wake turn was handed the completion
    rt.interrupt(boss.id)
    assert rt.get(boss.id).state is AgentState.INTERRUPTED
    # Its input went back: the follow-up turn's model call shows the child's result, once.
    rt.follow_up(boss.id, "what did the child say?")
    assert wait_settled(rt, boss.id, generation=3, timeout=SETTLE_S).state is AgentState.COMPLETED
    follow_up = stub.requests[3]  # its one model call (the kid was not spawned again)
    assert len(stub.requests) == 4
    assert sum(CHILD_SAID in (m.get("content") or "") for m in follow_up.messages) == 1


def test_a_turn_interrupted_before_its_first_answer_keeps_its_input(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    asked = threading.Event()

    def handler(request: Any) -> StubReply | None:
        if request.number == 2:
            asked.set()
            return StubReply(delay_s=60.0)  # interrupted while the model thinks
        return None

    stub.handler = handler
    rt = llm_runtime([Profile("solo", runner=stub_runner(stub))])
    solo = rt.spawn("solo", "first", name="solo")
    rt.wait(solo.id, timeout=SETTLE_S)
    rt.send(solo.id, CHILD_SAID)
    rt.follow_up(solo.id, "second")  # its turn is handed the message
    assert asked.wait(SETTLE_S)
    assert _saw_child(stub.requests[1])
    rt.interrupt(solo.id)
    assert rt.get(solo.id).state is AgentState.INTERRUPTED
    rt.resume(solo.id)
    assert rt.wait(solo.id, timeout=SETTLE_S).status is CompletionStatus.INTERRUPTED
    assert rt.wait(solo.id, timeout=SETTLE_S).status is CompletionStatus.COMPLETED
    shown = [m.get("content") or "" for m in stub.requests[-1].messages]
    assert sum(CHILD_SAID in text for text in shown) == 1  # given back: exactly once, not lost


def test_the_input_is_stored_once_with_the_first_step(stub: OpenAIStub, llm_runtime: Any) -> None:
    profiles = [Profile("solo", runner=stub_runner(stub))]
    rt = llm_runtime(profiles)
    solo = rt.spawn("solo", "say hi", name="solo")
    rt.send(solo.id, CHILD_SAID)  # read by the follow-up turn, stored with its first step
    assert rt.wait(solo.id, timeout=SETTLE_S).status is CompletionStatus.COMPLETED
    rt.follow_up(solo.id, "again")
    assert rt.wait(solo.id, timeout=SETTLE_S).status is CompletionStatus.COMPLETED
    detail = rt.inspect(solo.id, transcript_tail=100)
    stored = [m.content or "" for m in detail.transcript if m.role == "user"]
    assert sum(CHILD_SAID in text for text in stored) == 1
    assert not detail.unread
