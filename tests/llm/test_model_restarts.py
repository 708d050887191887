"""A model turn under a restart policy: failed calls past their retries, then an answer.

litellm's OpenAI provider against the local stub, which fails the requests a
test scripts with 503s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llm.conftest import SETTLE_S, stub_runner, tool_call, tool_messages
from retinue import Limits, Profile, Restart, Runtime, Turn
from retinue.testing import OpenAIStub, StubReply


def note(text: str) -> str:
    """Take a note."""
    return f"noted {text}"


pytestmark = pytest.mark.usefixtures("litellm")


def test_a_model_that_fails_past_its_retries_twice_completes_on_attempt_3(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    # retries=1: a failing call is two requests. Attempt 1 makes a step (a tool call), then
    # its next call fails (requests 2-3); attempt 2's call fails (4-5); attempt 3 answers.
    def handler(request: Any) -> StubReply:
        if request.number == 1:
            return StubReply(message=tool_call("note", {"text": "looked"}))
        if request.number <= 5:
            return StubReply(status=503, error="overloaded")
        return StubReply(message={"role": "assistant", "content": "reviewed"})

    stub.handler = handler
    seen: list[str] = []

    def lead(turn: Turn) -> str:
        done = turn.run("reviewer", "review the change", timeout=SETTLE_S)
        seen.append(f"{done.status}:{done.attempt}:{done.output}")
        pending = turn.children()
        return f"{done.status} after {done.attempt} attempts; {len(pending)} children"

    policy = Restart(max_restarts=3, backoff_s=0.01, jitter=0.0)
    profiles = [
        Profile("lead", subagents=["reviewer"], tools=["note"], runner=lead),
        Profile(
            "reviewer",
            tools=["note"],
            runner=stub_runner(stub, retries=1, host_tools={"note": note}),
            restart=policy,
        ),
    ]
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=Limits(wait_default_s=30)) as rt:
        top = rt.spawn("lead", "go")
        assert rt.wait(top.id, timeout=SETTLE_S).output == "completed after 3 attempts; 1 children"
        reviewer = next(a for a in rt.agents() if a.profile == "reviewer")
        rt.wait_idle(SETTLE_S)
        backlog = rt.backlog()
    assert seen == ["completed:3:reviewed"], "one completion reached the parent"
    assert (reviewer.generation, reviewer.attempt) == (3, 3)
    assert reviewer.last_error is not None
    assert reviewer.last_error.startswith("ModelCallFailed: openai status 503")
    assert backlog.pending_completions == 0
    # Attempt 3 carried on from the transcript (attempt 1's input and step; attempt 2 stored
    # nothing) with a marker naming the failure.
    last = stub.requests[-1].messages
    user = [m["content"] for m in last if m["role"] == "user"]
    assert user[0] == "review the change"
    assert [m["content"] for m in tool_messages(last)] == ['{"result":"noted looked"}']
    assert len(user) == 2
    assert user[1].startswith("[retinue: the previous attempt at this task failed (ModelCallFailed")
    assert user[1].endswith("Carry on with the task: review the change")
    assert len(stub.requests) == 6


@pytest.mark.parametrize(
    ("status", "restarted"), [(400, False), (401, False), (404, False), (429, True), (503, True)]
)
def test_a_providers_4xx_is_permanent_and_its_5xx_or_429_transient(
    stub: OpenAIStub, tmp_path: Path, status: int, restarted: bool
) -> None:
    """A model call the provider refuses (4xx but 408/409/425/429) is not restarted under
    ``retry_on="transient"``; a rate limit or a server error is (retries=0: one request per
    attempt). The failed completion says ``ModelCallFailed`` with the provider's status."""

    def handler(request: Any) -> StubReply:
        if request.number == 1:
            return StubReply(status=status, error="refused" if status < 500 else "overloaded")
        return StubReply(message={"role": "assistant", "content": "reviewed"})

    stub.handler = handler
    policy = Restart(max_restarts=3, backoff_s=0.01, jitter=0.0)
    profiles = [Profile("reviewer", runner=stub_runner(stub, retries=0), restart=policy)]
    with Runtime.open(tmp_path / "s", profiles=profiles) as rt:
        done = rt.wait(rt.spawn("reviewer", "review").id, timeout=SETTLE_S)
    if restarted:
        assert (done.status, done.attempt, done.output) == ("completed", 2, "reviewed")
        assert len(stub.requests) == 2
    else:
        assert (done.status, done.attempt, done.error_type) == ("failed", 1, "ModelCallFailed")
        assert done.error is not None and f"status {status}" in done.error
        assert len(stub.requests) == 1


def test_retry_on_any_restarts_a_refused_model_call(stub: OpenAIStub, tmp_path: Path) -> None:
    def handler(request: Any) -> StubReply:
        if request.number == 1:
            return StubReply(status=400, error="context too long")
        return StubReply(message={"role": "assistant", "content": "reviewed"})

    stub.handler = handler
    policy = Restart(max_restarts=3, backoff_s=0.01, jitter=0.0, retry_on="any")
    profiles = [Profile("reviewer", runner=stub_runner(stub, retries=0), restart=policy)]
    with Runtime.open(tmp_path / "s", profiles=profiles) as rt:
        done = rt.wait(rt.spawn("reviewer", "review").id, timeout=SETTLE_S)
        info = rt.get(done.agent_id)
    assert (done.status, done.attempt) == ("completed", 2)
    assert info.last_error is not None and "status 400" in info.last_error
