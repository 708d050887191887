"""LiteLLMRunner end to end: real runtime, real LMDB store, real litellm call path, no network."""

from __future__ import annotations

import asyncio
import gc
import warnings
from types import ModuleType
from typing import Any

import pytest
from support import wait_settled, wait_until

from llm.conftest import SETTLE_S, run, stub_runner
from retinue import AgentState, Profile, Runtime, Turn, Usage
from retinue.actors.events import QUIET, TurnWatch
from retinue.actors.turns import AgentActor
from retinue.errors import ConfigurationError
from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner
from retinue.llm.model import CallSettings, script_reply, usage_of
from retinue.llm.tools import ToolBox
from retinue.llm.turn import REPAIR_PROMPT, TurnSession
from retinue.protocol.results import parse_result, result_instruction
from retinue.testing import OpenAIStub, StubReply

pytestmark = pytest.mark.usefixtures("litellm")


def test_a_scripted_leaf_answers_and_its_usage_is_recorded(llm_runtime: Any) -> None:
    rt: Runtime = llm_runtime([Profile("leaf", model=SCRIPTED_MODEL, instructions="Be brief.")])
    info = run(rt, "leaf", "check the login handler")
    assert info.state is AgentState.COMPLETED
    assert info.output == "Done: check the login handler"
    assert info.usage.prompt_tokens > 0 and info.usage.completion_tokens > 0
    assert info.usage.cost_usd == 0.0  # the scripted model is not priced
    assert info.tree_usage == info.usage  # a top-level agent: its tree is itself


def test_the_model_sees_instructions_then_the_task(llm_runtime: Any, stub: OpenAIStub) -> None:
    rt = llm_runtime([Profile("leaf", instructions="You review code.", runner=stub_runner(stub))])
    info = run(rt, "leaf", "review auth.py")
    assert info.output == "Done: review auth.py"
    (request,) = stub.requests
    assert request.messages == [
        {"role": "system", "content": "You review code."},
        {"role": "user", "content": "review auth.py"},
    ]
    # A leaf may not spawn: it is offered no spawn tool (and no workspace tools).
    assert "spawn_subagents" not in request.tool_names
    assert "spawn_subagent" not in request.tool_names
    assert "read_file" not in request.tool_names


def test_usage_and_cost_come_from_the_provider(llm_runtime: Any, stub: OpenAIStub) -> None:
    stub.handler = lambda r: StubReply(
        message={"role": "assistant", "content": "ok"}, usage=(1000, 500)
    )
    runner = LiteLLMRunner("openai/gpt-4o-mini", api_base=stub.url, api_key="x")
    rt = llm_runtime([Profile("leaf", runner=runner)])
    info = run(rt, "leaf", "x")
    assert (info.usage.prompt_tokens, info.usage.completion_tokens) == (1000, 500)
    assert info.usage.cost_usd > 0.0  # gpt-4o-mini is in litellm's local cost map


def test_an_unpriced_model_costs_nothing_and_is_priced_once_per_call(
    llm_runtime: Any, stub: OpenAIStub, litellm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # litellm prices a call as it answers; for a model it has no price for that
    # answer is None, and pricing the response again fails the same way
    asked: list[object] = []
    real = litellm.completion_cost

    def counted(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("completion_response"))
        return real(*args, **kwargs)

    monkeypatch.setattr(litellm, "completion_cost", counted)
    runner = LiteLLMRunner("openai/no-such-priced-model", api_base=stub.url, api_key="x")
    rt = llm_runtime([Profile("leaf", runner=runner)])
    info = run(rt, "leaf", "x")
    assert info.state is AgentState.COMPLETED
    assert info.usage.prompt_tokens > 0 and info.usage.cost_usd == 0.0
    assert asked == []  # retinue took litellm's answer, it did not ask again


def test_the_offline_model_tells_litellm_it_is_free(litellm: ModuleType) -> None:
    # litellm prices the call at zero instead of failing its cost-map lookups
    # (the work it spares), and a runner's own pricing keywords still win
    runner = LiteLLMRunner(SCRIPTED_MODEL)
    response = asyncio.run(
        litellm.acompletion(messages=[{"role": "user", "content": "x"}], **runner.calls.kwargs)
    )
    assert response._hidden_params["response_cost"] == 0.0
    priced = LiteLLMRunner(SCRIPTED_MODEL, input_cost_per_token=1e-6)
    assert priced.calls.kwargs["input_cost_per_token"] == 1e-6
    assert "input_cost_per_token" not in LiteLLMRunner("openai/gpt-4o-mini").calls.kwargs


def test_a_response_litellm_did_not_price_is_priced_through_its_cost_map(
    litellm: ModuleType,
) -> None:
    response = litellm.ModelResponse(
        model="gpt-4o-mini",
        choices=[{"message": {"role": "assistant", "content": "ok"}}],
        usage={"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500},
    )
    response._hidden_params = {}  # no response_cost: litellm did not price it
    settings = CallSettings("openai/gpt-4o-mini", {}, 60.0, 0, 1.0, 1.0)
    usage = usage_of(litellm, settings, response)
    assert (usage.prompt_tokens, usage.completion_tokens) == (1000, 500)
    assert usage.cost_usd == pytest.approx(litellm.completion_cost(completion_response=response))
    assert usage.cost_usd > 0.0


def test_a_profile_with_a_model_gets_a_runner_and_its_subagents_inherit_it(
    llm_runtime: Any,
) -> None:
    rt = llm_runtime(
        [
            Profile("lead", subagents=["worker"], model=SCRIPTED_MODEL),
            Profile("worker", subagents=["helper"]),
            Profile("helper"),
        ]
    )
    # worker and helper inherit the scripted model: worker delegates to helper, which answers.
    worker = run(rt, "worker", "w")
    (helper,) = [a for a in rt.agents() if a.profile == "helper"]
    assert (
        worker.output
        == f"Summary of 1 subagent results for: w\n- {helper.path} (completed): Done: w"
    )
    assert run(rt, "helper", "h").output == "Done: h"
    with pytest.raises(ConfigurationError, match="no runner"):
        Runtime.open(None, profiles=[Profile("orphan")])


def test_a_server_that_fails_twice_then_answers_succeeds(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    stub.handler = lambda r: StubReply(status=500, error="boom") if r.number <= 2 else None
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub, retries=4))])
    info = run(rt, "leaf", "retry me")
    assert info.state is AgentState.COMPLETED
    assert info.output == "Done: retry me"
    assert len(stub.requests) == 3


def test_a_server_that_always_fails_fails_the_turn_within_the_retry_budget(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    stub.handler = lambda r: StubReply(status=503, error="overloaded, try later")

    def lead(turn: Turn) -> str:
        done = turn.run("leaf", "doomed")
        return f"{done.status}|{done.error}"

    rt = llm_runtime(
        [
            Profile("lead", subagents=["leaf"], runner=lead),
            Profile("leaf", runner=stub_runner(stub, retries=2)),
        ]
    )
    info = run(rt, "lead", "go")
    status, error = (info.output or "").split("|", 1)
    assert status == "failed"
    assert error == "ModelCallFailed: openai status 503: overloaded, try later (3 attempts)"
    assert "\n" not in error and "Traceback" not in error
    assert len(stub.requests) == 3


def test_a_bad_request_is_not_retried(llm_runtime: Any, stub: OpenAIStub) -> None:
    stub.handler = lambda r: StubReply(status=400, error="bad tool schema")
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub, retries=4))])
    info = run(rt, "leaf", "x")
    assert info.state is AgentState.FAILED
    assert info.error == "ModelCallFailed: openai status 400: bad tool schema (1 attempt)"
    assert len(stub.requests) == 1


def test_429_waits_at_least_retry_after(llm_runtime: Any, stub: OpenAIStub) -> None:
    stub.handler = lambda r: (
        StubReply(status=429, error="slow down", headers={"Retry-After": "1"})
        if r.number == 1
        else None
    )
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub, retry_base_s=0.001))])
    info = run(rt, "leaf", "x")
    assert info.state is AgentState.COMPLETED
    first, second = stub.requests
    # The backoff alone would be ~1 ms: the gap is the server's Retry-After.
    assert second.at - first.at >= 1.0


def test_a_call_past_request_timeout_is_abandoned_and_retried(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    stub.handler = lambda r: StubReply(delay_s=3.0)
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub, request_timeout_s=0.2, retries=1))])
    info = run(rt, "leaf", "x")
    assert info.state is AgentState.FAILED
    assert info.error == "ModelCallFailed: openai: no answer within 0.2 s (2 attempts)"
    assert len(stub.requests) == 2


def test_an_offline_call_cancelled_while_litellm_prepares_it_leaves_no_coroutine_behind(
    litellm: ModuleType,
) -> None:
    """litellm prepares a call on an executor thread and awaits the provider's coroutine
    after; an interrupt (or a deadline) in between dropped that coroutine unrun, and Python
    reported it on stderr ("coroutine 'ScriptedLLM.acompletion' was never awaited")."""

    async def cancelled_at_once() -> None:
        call = asyncio.ensure_future(
            litellm.acompletion(model=SCRIPTED_MODEL, messages=[{"role": "user", "content": "x"}])
        )
        await asyncio.sleep(0)  # it is on the executor thread now
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            asyncio.run(cancelled_at_once())  # waits for the executor: the call was prepared
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


def test_interrupt_abandons_a_slow_call_and_discards_its_answer(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    stub.handler = lambda r: StubReply(delay_s=1.0) if r.number == 1 else None
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub))])
    info = rt.spawn("leaf", "slow")
    wait_until(lambda: stub.requests, timeout=SETTLE_S, what="the model call")
    assert rt.interrupt(info.id).state is AgentState.INTERRUPTED
    completion = rt.wait(info.id)
    assert completion.status == "interrupted"
    wait_until(lambda: stub.answered >= 1, timeout=SETTLE_S, what="the late answer")
    # The late answer was never recorded: no usage, and the next turn does not see it.
    assert rt.get(info.id).usage == Usage()
    rt.follow_up(info.id, "again")
    done = rt.wait(info.id)
    assert done.output == "Done: again"
    assert all(m.get("role") != "assistant" for m in stub.requests[1].messages)


def test_a_structured_answer_that_breaks_the_contract_gets_one_repair(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    contract = {"role": "system", "content": result_instruction()}
    good = script_reply([contract, {"role": "user", "content": "fine"}])["content"]
    answers = [
        {"role": "assistant", "content": "I think it is fine."},
        {"role": "assistant", "content": good},
    ]
    stub.handler = lambda r: StubReply(message=answers[min(r.number, 2) - 1])
    rt = llm_runtime([Profile("leaf", result_format="structured", runner=stub_runner(stub))])
    info = run(rt, "leaf", "x")
    assert info.state is AgentState.COMPLETED
    assert parse_result(info.output or "").summary == "Done: fine"
    first, second = stub.requests
    assert "retinue.result.v2" in first.messages[0]["content"]  # result_instruction()
    repair = second.messages[-1]
    assert repair["role"] == "user"
    assert repair["content"].startswith(REPAIR_PROMPT.split("{", 1)[0])
    assert "no JSON object found" in repair["content"]


def test_a_structured_answer_that_breaks_the_contract_twice_fails(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    stub.handler = lambda r: StubReply(message={"role": "assistant", "content": "{}"})
    rt = llm_runtime([Profile("leaf", result_format="structured", runner=stub_runner(stub))])
    info = run(rt, "leaf", "x")
    assert info.state is AgentState.FAILED
    assert (info.error or "").startswith("ResultContractError: invalid structured result")
    assert len(stub.requests) == 2


def test_tokens_per_agent_fails_the_turn_naming_the_budget(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    stub.handler = lambda r: StubReply(usage=(80, 40))
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub))], tokens_per_agent=200)
    info = run(rt, "leaf", "first")
    assert info.state is AgentState.COMPLETED and info.usage.total_tokens == 120
    rt.follow_up(info.id, "second")  # 120 < 200: the call is made, then 240 > 200
    done = rt.wait(info.id)
    done = rt.wait(info.id)
    assert done.status == "failed"
    assert done.error == (
        "TokenBudgetExceeded: tokens_per_agent budget of 200 tokens is spent: "
        f"{info.path} has used 240; raise Limits.tokens_per_agent to continue"
    )
    rt.follow_up(info.id, "third")  # already spent: no call at all
    assert rt.wait(info.id).status == "failed"
    assert len(stub.requests) == 2


def test_tokens_per_tree_is_shared_by_the_whole_tree(llm_runtime: Any, stub: OpenAIStub) -> None:
    stub.handler = lambda r: StubReply(usage=(100, 50))

    def lead(turn: Turn) -> str:
        return ",".join(str(turn.run("leaf", t).status) for t in ("a", "b", "c"))

    rt = llm_runtime(
        [
            Profile("lead", subagents=["leaf"], runner=lead),
            Profile("leaf", runner=stub_runner(stub)),
        ],
        tokens_per_tree=250,
    )
    info = run(rt, "lead", "go")
    # a: 150 <= 250; b: 300 > 250 (fails after its call); c: spent before any call.
    assert info.output == "completed,failed,failed"
    assert len(stub.requests) == 2
    assert info.tree_usage == Usage(prompt_tokens=200, completion_tokens=100, cost_usd=0.0)
    assert info.usage == Usage()  # the lead itself called no model
    leaves = [a for a in rt.agents() if a.profile == "leaf"]
    assert "tokens_per_tree budget of 250 tokens" in (leaves[1].error or "")
    assert leaves[1].tree_usage is None  # only top-level agents carry the tree total


def test_max_concurrent_calls_bounds_calls_per_model(llm_runtime: Any, stub: OpenAIStub) -> None:
    stub.handler = lambda r: StubReply(delay_s=0.2)
    rt = llm_runtime([Profile("leaf", runner=stub_runner(stub))], max_concurrent_calls=2)
    infos = [rt.spawn("leaf", f"t{i}") for i in range(6)]
    for info in infos:
        assert rt.wait(info.id).status == "completed"
    assert stub.max_in_flight == 2


def test_a_follow_up_continues_the_conversation(llm_runtime: Any, stub: OpenAIStub) -> None:
    rt = llm_runtime([Profile("leaf", instructions="sys", runner=stub_runner(stub))])
    info = run(rt, "leaf", "first task")
    rt.follow_up(info.id, "second task")
    assert rt.wait(info.id).output == "Done: first task"
    assert rt.wait(info.id).output == "Done: second task"
    assert stub.requests[1].messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "first task"},
        {"role": "assistant", "content": "Done: first task"},
        {"role": "user", "content": "second task"},
    ]


def test_messages_and_child_completions_are_rendered_for_the_model(
    llm_runtime: Any, stub: OpenAIStub
) -> None:
    def failing(turn: Turn) -> str:
        raise RuntimeError("disk full")

    rt = llm_runtime(
        [
            Profile(
                "top", subagents=["leaf", "bad"], runner=stub_runner(stub), wake_on_completion=False
            ),
            Profile("leaf", runner=lambda t: f"result of {t.task}"),
            Profile("bad", runner=failing),
        ]
    )
    top = run(rt, "top", "coordinate")
    rt.send(top.id, "hello from the host")
    # Children of the LLM agent (spawned by the host under it) settle into its mailbox.
    ok = rt.spawn("leaf", "worker task", name="w", parent=top.path)
    bad = rt.spawn("bad", "x", name="b", parent=top.path)
    assert wait_settled(rt, ok.id, timeout=SETTLE_S).state is AgentState.COMPLETED
    assert wait_settled(rt, bad.id, timeout=SETTLE_S).state is AgentState.FAILED
    rt.follow_up(top.id, "report")
    rt.wait(top.id)
    rt.wait(top.id)
    last = stub.requests[-1].messages[-1]["content"]
    assert last.split("\n\n") == [
        "report",
        "[message from /root] hello from the host",
        f"[subagent:{top.path}/w] delegated task completed. Result: result of worker task",
        f"[subagent:{top.path}/b] delegated task FAILED: RuntimeError: disk full",
    ]


def test_the_runner_checks_its_settings() -> None:
    with pytest.raises(ConfigurationError, match="model"):
        LiteLLMRunner("")
    with pytest.raises(ConfigurationError, match="retries"):
        LiteLLMRunner("m", retries=-1)
    with pytest.raises(ConfigurationError, match="request_timeout_s"):
        LiteLLMRunner("m", request_timeout_s=0)
    with pytest.raises(ConfigurationError, match="result_format"):
        LiteLLMRunner("m", result_format="xml")
    assert "x" not in repr(LiteLLMRunner("m", api_key="x"))


def test_model_turns_leave_nothing_of_theirs_to_the_cyclic_collector(llm_runtime: Any) -> None:
    """A model turn (its context, watch, session, toolbox and actor) is freed as it ends.

    Kept in a reference cycle, each would wait for the cyclic collector, whose
    passes with many turns in flight cost more than the turns' own work.
    The lead's turns run the tool loop (a spawn_subagents call), the leaves' do not.
    """
    rt: Runtime = llm_runtime(
        [
            Profile("lead", subagents=["leaf"], model=SCRIPTED_MODEL),
            Profile("leaf", model=SCRIPTED_MODEL),
        ]
    )
    kinds = (AgentActor, Turn, TurnWatch, TurnSession, ToolBox)

    def held() -> list[object]:
        # Below the API on purpose: the promise is about what the collector holds.
        return [o for o in gc.get_objects() if isinstance(o, kinds) and o is not QUIET]

    assert run(rt, "lead", "warm up").state is AgentState.COMPLETED
    gc.collect()
    gc.disable()
    try:
        for n in range(5):
            assert run(rt, "lead", f"task {n}").state is AgentState.COMPLETED
        wait_until(lambda: not held(), what="every model turn's objects to be freed")
    finally:
        gc.enable()
