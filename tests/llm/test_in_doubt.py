"""The journal of tool calls: a call running when its turn stopped is in doubt, and what
happens to it depends on its effect class, never on luck.

The runtime is closed while a host tool runs (its first run hangs), which
leaves the call's intent stored without a result, as a crash does (the stress
crash loop, ``python -m stress --only effects``, kills the process for real).
Real litellm calls against the local OpenAI stub, which refuses a chat that
holds a tool call without its result (400), as OpenAI-compatible servers do.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support import wait_settled, wait_until

from llm.conftest import SETTLE_S, stub_runner, tool_call, tool_messages
from retinue import (
    AgentState,
    ConfigurationError,
    Limits,
    Profile,
    Runtime,
    ToolCall,
    ToolCallInDoubt,
)
from retinue.cli.main import main as cli_main
from retinue.llm import tool
from retinue.persistence.store import Store
from retinue.protocol.effects import IDEMPOTENCY_ENV, idempotency_key, in_doubt_result
from retinue.protocol.records import AgentRecord
from retinue.testing import OpenAIStub, StubReply, StubRequest, check_invariants

pytestmark = pytest.mark.usefixtures("litellm")

DONE = {"role": "assistant", "content": "all done"}


class Script:
    """Stub answers in order (the last repeats); a chat with an unanswered call gets a 400."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = replies
        self.answered = 0
        self.refused = 0

    def __call__(self, request: StubRequest) -> StubReply:
        for index, message in enumerate(request.messages):
            wanted = {c["id"] for c in message.get("tool_calls") or ()}
            for after in request.messages[index + 1 :]:
                if after.get("role") != "tool":
                    break
                wanted.discard(after.get("tool_call_id"))
            if wanted:
                self.refused += 1
                return StubReply(status=400, error=f"unanswered tool calls {sorted(wanted)}")
        self.answered += 1
        return StubReply(message=self.replies[min(self.answered, len(self.replies)) - 1])


class Refund:
    """A host tool ``refund(order)`` that records each run's ToolCall; its first run hangs
    (the runtime closes under it, after its effect: the run is recorded)."""

    def __init__(self, effect: str | None = None) -> None:
        self.runs: list[ToolCall] = []
        self.lock = threading.Lock()

        async def refund(order: str, call: ToolCall) -> str:
            """Refund ``order``."""
            with self.lock:
                self.runs.append(call)
                first = len(self.runs) == 1
            if first:
                await asyncio.sleep(SETTLE_S)
            return f"refunded {order}"

        self.tool = tool(refund) if effect is None else tool(refund, effect=effect)  # type: ignore[call-overload]


def shop(stub: OpenAIStub, refund: Refund, **extra: Any) -> list[Profile]:
    runner = stub_runner(stub, host_tools={"refund": refund.tool})
    return [Profile("shop", tools=["refund"], runner=runner, **extra)]


def open_rt(path: Path, profiles: list[Profile]) -> Runtime:
    return Runtime.open(path, profiles=profiles, limits=Limits(wait_default_s=30.0))


def crash_during_refund(stub: OpenAIStub, store: Path, refund: Refund, **extra: Any) -> str:
    """Spawn an agent whose model calls ``refund``; close the runtime while it runs."""
    stub.handler = Script([tool_call("refund", {"order": "A1"}), DONE])
    with open_rt(store, shop(stub, refund, **extra)) as rt:
        agent = rt.spawn("shop", "refund order A1")
        wait_until(lambda: refund.runs, timeout=SETTLE_S, what="the refund to start")
    return agent.id


def test_an_unsafe_call_in_doubt_is_reported_never_run_again(
    stub: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shown in doubt (``rt.inspect``, ``retinue inspect``), then reported to the model."""
    refund, store = Refund(), tmp_path / "s"
    agent = crash_during_refund(stub, store, refund)
    key = idempotency_key(agent, 1, 1, 0)
    assert refund.runs[0].idempotency_key == key
    assert cli_main(["inspect", agent, "--store", str(store)]) == 0
    shown = capsys.readouterr().out
    assert "in doubt  1 tool calls" in shown
    assert f'refund [unsafe] key {key} attempt 1: {{"order": "A1"}}' in shown
    assert cli_main(["inspect", agent, "--store", str(store), "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["in_doubt"]
    assert (listed["tool"], listed["idempotency_key"]) == ("refund", key)
    with open_rt(store, shop(stub, refund)) as rt:
        stopped = rt.get(agent)
        assert (stopped.state, stopped.in_doubt) == (AgentState.INTERRUPTED, 1)
        (doubt,) = rt.inspect(agent).in_doubt
        assert (doubt.tool, doubt.effect, doubt.idempotency_key) == ("refund", "unsafe", key)
        assert json.loads(doubt.arguments) == {"order": "A1"}
        seen: list[Any] = []
        rt.subscribe(seen.append)
        again = rt.resume(agent)
        done = wait_settled(rt, agent, again.generation, timeout=SETTLE_S)
        assert (done.state, done.output, done.in_doubt) == (AgentState.COMPLETED, "all done", 0)
        assert rt.inspect(agent).in_doubt == ()
    assert len(refund.runs) == 1  # never run again behind the model's back
    (result,) = tool_messages(stub.requests[-1].messages)
    assert result["content"] == in_doubt_result("refund", key)
    events = [e for e in seen if isinstance(e, ToolCallInDoubt)]
    assert [(e.tool, e.idempotency_key, e.effect, e.action) for e in events] == [
        ("refund", key, "unsafe", "reported")
    ]


@pytest.mark.parametrize("effect", ["read", "idempotent"])
def test_a_read_or_idempotent_call_in_doubt_runs_again_with_the_same_key(
    stub: OpenAIStub, tmp_path: Path, effect: str
) -> None:
    refund, store = Refund(effect), tmp_path / "s"
    agent = crash_during_refund(stub, store, refund)
    with open_rt(store, shop(stub, refund)) as rt:
        seen: list[Any] = []
        rt.subscribe(seen.append)
        again = rt.resume(agent)
        done = wait_settled(rt, agent, again.generation, timeout=SETTLE_S)
        assert done.state is AgentState.COMPLETED
    first, second = refund.runs
    assert second.idempotency_key == first.idempotency_key == idempotency_key(agent, 1, 1, 0)
    assert (first.attempt, first.in_doubt, second.attempt, second.in_doubt) == (1, False, 2, True)
    assert second.effect == effect
    (result,) = tool_messages(stub.requests[-1].messages)
    assert json.loads(result["content"]) == {"result": "refunded A1"}
    actions = [(e.effect, e.action) for e in seen if isinstance(e, ToolCallInDoubt)]
    assert actions == [(effect, "rerun")]


def test_a_profile_override_makes_a_tool_idempotent(stub: OpenAIStub, tmp_path: Path) -> None:
    refund, store = Refund(), tmp_path / "s"
    agent = crash_during_refund(stub, store, refund, effects={"refund": "idempotent"})
    with open_rt(store, shop(stub, refund, effects={"refund": "idempotent"})) as rt:
        again = rt.resume(agent)
        assert wait_settled(rt, agent, again.generation, timeout=SETTLE_S).output == "all done"
    assert [(r.attempt, r.effect) for r in refund.runs] == [(1, "idempotent"), (2, "idempotent")]


@pytest.mark.parametrize("answer", ["approve", "deny"])
def test_in_doubt_approve_asks_a_person_whether_the_call_runs_again(
    stub: OpenAIStub, tmp_path: Path, answer: str
) -> None:
    refund, store = Refund(), tmp_path / "s"
    agent = crash_during_refund(stub, store, refund, in_doubt="approve")
    key = idempotency_key(agent, 1, 1, 0)
    with open_rt(store, shop(stub, refund, in_doubt="approve")) as rt:
        seen: list[Any] = []
        rt.subscribe(seen.append)
        again = rt.resume(agent)
        wait_until(lambda: rt.get(agent).state is AgentState.AWAITING_APPROVAL, timeout=SETTLE_S)
        (request,) = rt.approvals()
        assert (request.tool, request.in_doubt, request.idempotency_key) == ("refund", True, key)
        (doubt,) = rt.inspect(agent).in_doubt
        assert doubt.awaiting_approval
        if answer == "approve":
            rt.approve(request.id)
        else:
            rt.deny(request.id, reason="it went through")
        done = wait_settled(rt, agent, again.generation, timeout=SETTLE_S)
        assert (done.state, done.output) == (AgentState.COMPLETED, "all done")
    (result,) = tool_messages(stub.requests[-1].messages)
    if answer == "approve":
        assert [(r.idempotency_key, r.attempt, r.in_doubt) for r in refund.runs] == [
            (key, 1, False),
            (key, 2, True),
        ]
        assert json.loads(result["content"]) == {"result": "refunded A1"}
    else:
        assert len(refund.runs) == 1
        data = json.loads(result["content"])
        assert data["idempotency_key"] == key
        assert data["error"].startswith("in doubt: refund was running")
        assert "it went through" in data["error"]
    assert [e.action for e in seen if isinstance(e, ToolCallInDoubt)] == ["approval"]


def test_a_model_that_repeats_a_call_id_gets_a_new_key_per_step(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    """Keys come from the step and the call's place, never from the provider's call id."""
    keys: list[ToolCall] = []

    @tool(effect="read")
    def look(order: str, call: ToolCall) -> str:
        """Look an order up."""
        keys.append(call)
        return "ok"

    same = tool_call("look", {"order": "A1"}, call_id="call_1")
    stub.handler = Script([same, same, DONE])
    runner = stub_runner(stub, host_tools={"look": look})
    rt = llm_runtime([Profile("shop", tools=["look"], runner=runner)])
    agent = rt.spawn("shop", "look twice")
    assert wait_settled(rt, agent.id, timeout=SETTLE_S).output == "all done"
    assert [c.idempotency_key for c in keys] == [
        idempotency_key(agent.id, 1, 1, 0),
        idempotency_key(agent.id, 1, 2, 0),
    ]
    assert [(c.call_id, c.step, c.index, c.effect) for c in keys] == [
        ("call_1", 1, 0, "read"),
        ("call_1", 2, 0, "read"),
    ]


def test_bash_finds_the_calls_key_in_its_environment(
    stub: OpenAIStub, llm_runtime: Any, tmp_path: Path
) -> None:
    command = {"command": f'echo "key=${IDEMPOTENCY_ENV}"'}
    stub.handler = Script([tool_call("bash", command), DONE])
    runner = stub_runner(stub, workspace=tmp_path)
    rt = llm_runtime([Profile("sh", tools=["bash"], runner=runner)])
    agent = rt.spawn("sh", "print the key")
    assert wait_settled(rt, agent.id, timeout=SETTLE_S).output == "all done"
    (result,) = tool_messages(stub.requests[-1].messages)
    stdout = json.loads(result["content"])["stdout"]
    assert stdout.strip() == f"key={idempotency_key(agent.id, 1, 1, 0)}"


def test_effect_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="effect must be"):
        tool(lambda order: order, name="bad", effect="sometimes")  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError, match="effects\\['refund'\\]"):
        Profile("p", effects={"refund": "maybe"})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="in_doubt must be"):
        Profile("p", in_doubt="retry")  # type: ignore[arg-type]


def test_an_effects_override_of_a_tool_the_profile_lacks_is_refused(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    refund = Refund()
    runner = stub_runner(stub, host_tools={"refund": refund.tool})
    profile = Profile("shop", tools=["refund"], runner=runner, effects={"refnud": "read"})
    with pytest.raises(ConfigurationError, match="'refnud', which is not one of its tools"):
        llm_runtime([profile])


def test_a_call_denied_before_the_crash_is_not_asked_about_again(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    """One step of two gated calls: the first denied, the second approved and running when
    the runtime stops. After the reopen only the call in doubt goes to a person."""
    refund, store = Refund(), tmp_path / "s"
    two = tool_call("refund", {"order": "A1"}, call_id="c1")
    two["tool_calls"].append(
        {**tool_call("refund", {"order": "A2"}, call_id="c2")["tool_calls"][0]}
    )
    stub.handler = Script([two, DONE])
    extra: dict[str, Any] = {"approve": ["refund"], "in_doubt": "approve"}
    with open_rt(store, shop(stub, refund, **extra)) as rt:
        agent = rt.spawn("shop", "refund two orders").id
        wait_until(lambda: len(rt.approvals()) == 2, timeout=SETTLE_S)
        first, second = sorted(rt.approvals(), key=lambda r: r.call_id)
        rt.deny(first.id, reason="not A1")
        rt.approve(second.id)
        wait_until(lambda: refund.runs, timeout=SETTLE_S, what="the approved refund to start")
    with open_rt(store, shop(stub, refund, **extra)) as rt:
        again = rt.resume(agent)
        wait_until(lambda: rt.approvals(), timeout=SETTLE_S, what="the in-doubt request")
        (request,) = rt.approvals()
        assert (request.call_id, request.in_doubt) == ("c2", True)
        rt.deny(request.id, reason="it went through")
        done = wait_settled(rt, agent, again.generation, timeout=SETTLE_S)
        assert done.output == "all done"
    assert [
        json.loads(m["content"])["error"][:9] for m in tool_messages(stub.requests[-1].messages)
    ] == [
        "denied: n",
        "in doubt:",
    ]


class HoldSecondCall:
    """Stub answers: a call of ``note``, then (once the results are stored) a model call
    that waits for ``release`` before it answers "all done"."""

    def __init__(self) -> None:
        self.calls = 0
        self.waiting = threading.Event()
        self.release = threading.Event()

    def __call__(self, request: StubRequest) -> StubReply:
        self.calls += 1
        if self.calls == 1:
            return StubReply(message=tool_call("note", {"text": "x"}))
        if self.calls == 2:
            self.waiting.set()
            self.release.wait(SETTLE_S)
        return StubReply(message=DONE)


def test_a_crash_after_a_tool_step_was_answered_leaves_no_call_in_doubt(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    """A step that stores tool results and spent nothing changes the journal, not the
    agent's record (a running agent's record counts its open calls as of its last write):
    a crash in the next model call (a copy of the running store) is counted from the
    journal as the copy opens, so no call shows in doubt and the invariants hold."""

    def note(text: str) -> str:
        """Note ``text``."""
        return "noted"

    hold = HoldSecondCall()
    stub.handler = hold
    profiles = [
        Profile("notes", tools=["note"], runner=stub_runner(stub, host_tools={"note": tool(note)}))
    ]
    with open_rt(tmp_path / "s", profiles) as rt:
        agent = rt.spawn("notes", "note x")
        assert hold.waiting.wait(SETTLE_S)
        crashed = rt.backup(tmp_path / "crashed")  # what a SIGKILL now would leave
        hold.release.set()
        assert rt.wait(agent.id).status.value == "completed"
    store = Store(crashed, readonly=True)
    try:
        raw = store.get("agents", agent.id.encode())
    finally:
        store.close()
    assert raw is not None
    stored = msgspec.msgpack.decode(raw, type=AgentRecord)
    assert (stored.state, stored.open_calls) == (AgentState.RUNNING, 1)  # as the call started
    assert check_invariants(crashed) == []
    with open_rt(crashed, profiles) as copy:
        found = copy.get(agent.id)
        assert (found.state, found.in_doubt) == (AgentState.INTERRUPTED, 0)
        assert copy.inspect(agent.id).in_doubt == ()
    assert check_invariants(crashed) == []
