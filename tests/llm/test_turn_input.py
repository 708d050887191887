"""A model turn's input (its task, messages, children's completions) is never lost.

It is stored in the transcript with the turn's first model step, in the same
commit that makes it the transcript's; a model turn that fails or is
interrupted before that step gives its input back, so the agent's next turn
(``follow_up``, ``resume``, a wake) receives it. Found: a wake turn took its
child's completion, then failed on a 503 past its retries (or was
interrupted before the model's first answer), and after ``follow_up`` the
model never saw the child's result. The same holds for what a turn's tool calls
received (a child's result a spawn waited for): stored with the step that
carries the tool results, given back if the turn ends first, and never handed
again after a crash once stored.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support import wait_settled, wait_until

from llm.conftest import SETTLE_S, stub_runner, tool_call
from retinue import AgentState, CompletionStatus, Profile, Turn
from retinue.llm import tool
from retinue.testing import OpenAIStub, StubReply, check_invariants

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


# -- what a turn's tools received: a child's result a tool call waited for ---------------


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _spawn_then_block(
    stub: OpenAIStub, release: threading.Event, *, parallel: bool, received: threading.Event
) -> list[Profile]:
    """A model parent runs a child (spawn_subagent, waited for) and a host tool that blocks
    until ``release``: in one step (``parallel``), or in the step after the spawn's."""

    @tool(timeout_s=60)
    async def block() -> str:
        """Block until released (once the child's result reached its spawn call)."""
        while not received.is_set():
            await asyncio.sleep(0.05)  # the spawn call beside it resumes on this same loop
        await asyncio.to_thread(release.wait, 60)
        return "released"

    spawn = _call("c1", "spawn_subagent", '{"agent": "kid", "message": "go", "task_name": "kid"}')
    steps = (
        [[spawn, _call("c2", "block", "{}")]]
        if parallel
        else [[spawn], [_call("c2", "block", "{}")]]
    )

    def handler(request: Any) -> StubReply | None:
        if request.number <= len(steps):
            calls = steps[request.number - 1]
            return StubReply(message={"role": "assistant", "content": None, "tool_calls": calls})
        return StubReply(message={"role": "assistant", "content": "done"})

    stub.handler = handler
    runner = stub_runner(stub, host_tools={"block": block})
    return [
        Profile(
            "boss", subagents=["kid"], runner=runner, tools=["block"], wake_on_completion=False
        ),
        Profile("kid", runner=_child),
    ]


def test_a_childs_result_a_tool_received_goes_back_if_the_turn_is_interrupted_first(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    """Found by the chaos fuzzer: the child's completion, received by spawn_subagent, was
    marked received but never stored when an interrupt came before the step was saved; the
    model never saw it (retinue.testing.check_invariants: completion_not_in_transcript)."""
    release, received = threading.Event(), threading.Event()
    rt = llm_runtime(_spawn_then_block(stub, release, parallel=True, received=received))
    boss = rt.spawn("boss", "delegate", name="boss")
    kid = wait_until(lambda: [a for a in rt.agents() if a.profile == "kid"], timeout=SETTLE_S)[0]
    wait_settled(rt, kid.id, timeout=SETTLE_S)
    wait_until(lambda: not rt.inspect(boss.id).pending, timeout=SETTLE_S, what="the receipt")
    time.sleep(0.3)  # the spawn call's wait resumes on the loop and takes the result
    received.set()
    rt.interrupt(boss.id)
    release.set()
    assert rt.wait(boss.id, timeout=SETTLE_S).status is CompletionStatus.INTERRUPTED
    rt.follow_up(boss.id, "what did the child say?")
    assert rt.wait(boss.id, timeout=SETTLE_S).status is CompletionStatus.COMPLETED
    shown = [m.get("content") or "" for m in stub.requests[-1].messages]
    assert sum(CHILD_SAID in text for text in shown) == 1  # given back: once, not lost
    assert check_invariants(rt) == []


def test_a_childs_result_a_step_stored_is_not_handed_again_after_a_crash(
    stub: OpenAIStub, llm_runtime: Any, tmp_path: Path
) -> None:
    """The step that stored the child's result is the transcript's: a crash later in the turn
    (a copy of the running store) must not hand the completion to the next turn again."""
    release, received = threading.Event(), threading.Event()
    received.set()
    profiles = _spawn_then_block(stub, release, parallel=False, received=received)
    rt = llm_runtime(profiles)
    boss = rt.spawn("boss", "delegate", name="boss")
    wait_until(lambda: len(stub.requests) >= 2, timeout=SETTLE_S, what="the step after the spawn")
    crashed = rt.backup(tmp_path / "crashed")  # what a SIGKILL now would leave
    release.set()
    copy = llm_runtime(profiles, path=crashed)
    assert copy.get(boss.id).state is AgentState.INTERRUPTED
    copy.resume(boss.id)
    assert copy.wait(boss.id, timeout=SETTLE_S).status is CompletionStatus.INTERRUPTED
    assert copy.wait(boss.id, timeout=SETTLE_S).status is CompletionStatus.COMPLETED
    shown = [m.get("content") or "" for m in stub.requests[-1].messages]
    assert sum(CHILD_SAID in text for text in shown) == 1  # stored once, not handed twice
    assert check_invariants(copy) == []
