"""Budgets in tokens and in USD: no overshoot by calls in flight, and cost from litellm's map.

The model is priced through litellm's own cost map registration
(``litellm.register_model``), never the network; calls go through litellm's
OpenAI provider against the local stub, which reports fixed usage.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from llm.conftest import SETTLE_S, tool_call
from retinue import (
    AgentState,
    CostBudgetExceeded,
    LimitExceeded,
    Limits,
    Profile,
    Restart,
    Runtime,
    Turn,
    Usage,
)
from retinue.llm import LiteLLMRunner
from retinue.protocol.budgets import budget_error
from retinue.testing import OpenAIStub, StubReply

pytestmark = pytest.mark.usefixtures("litellm")

PRICED = "openai/retinue-test-priced"
INPUT_USD, OUTPUT_USD = 0.001, 0.002  # per token


@pytest.fixture
def priced(litellm: ModuleType) -> str:
    """A model litellm prices (registered in its local cost map for this test run)."""
    litellm.register_model(
        {
            PRICED: {
                "input_cost_per_token": INPUT_USD,
                "output_cost_per_token": OUTPUT_USD,
                "litellm_provider": "openai",
                "mode": "chat",
                "max_tokens": 4096,
            }
        }
    )
    return PRICED


def note(text: str) -> str:
    """Take a note."""
    return f"noted {text}"


def looping(stub: OpenAIStub, usage: tuple[int, int], delay_s: float = 0.0) -> None:
    """Make the stub answer every request with a tool call of ``usage`` tokens."""

    def handler(request: Any) -> StubReply:
        message = tool_call("note", {"text": "x"}, f"call_{request.number}")
        return StubReply(message=message, usage=usage, delay_s=delay_s)

    stub.handler = handler


def runner(stub: OpenAIStub, model: str) -> LiteLLMRunner:
    return LiteLLMRunner(
        model,
        api_base=stub.url,
        api_key="x",
        host_tools={"note": note},
        max_tool_calls=200,
        retry_base_s=0.01,
    )


def test_a_cost_budget_stops_an_agent_once_it_is_crossed(
    stub: OpenAIStub, priced: str, tmp_path: Path
) -> None:
    looping(stub, (100, 50))  # $0.20 a call
    profiles = [Profile("worker", tools=["note"], runner=runner(stub, priced))]
    limits = Limits(usd_per_agent=0.5, wait_default_s=30.0)
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=limits) as rt:
        a = rt.spawn("worker", "note things")
        done = rt.wait(a.id, timeout=SETTLE_S)
        info = rt.get(a.id)
    assert done.status == "failed"
    assert done.error is not None and done.error.startswith(
        "CostBudgetExceeded: usd_per_agent budget of $0.5 is spent"
    )
    # Two calls ($0.40) left room; the third was admitted and crossed it; no fourth was made.
    assert info.usage.cost_usd == pytest.approx(0.6)
    assert len(stub.requests) == 3


def test_a_spent_cost_budget_never_restarts(stub: OpenAIStub, priced: str, tmp_path: Path) -> None:
    looping(stub, (100, 50))
    policy = Restart(backoff_s=0.01, jitter=0.0)
    profiles = [Profile("worker", tools=["note"], runner=runner(stub, priced), restart=policy)]
    limits = Limits(usd_per_tree=0.3, wait_default_s=30.0)
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=limits) as rt:
        done = rt.wait(rt.spawn("worker", "t").id, timeout=SETTLE_S)
    assert done.error is not None and done.error.startswith("CostBudgetExceeded: usd_per_tree")
    assert done.attempt == 1


def test_the_budget_error_carries_its_bound() -> None:
    limits = Limits(usd_per_agent=0.5)
    error = budget_error(limits, "/root/a", Usage(cost_usd=0.6), Usage(), before=False)
    assert isinstance(error, CostBudgetExceeded) and isinstance(error, LimitExceeded)
    assert (error.limit, error.value, error.path, error.budget) == (
        0.5,
        0.6,
        "/root/a",
        "usd_per_agent",
    )
    assert budget_error(limits, "/root/a", Usage(cost_usd=0.5), Usage(), before=False) is None
    assert budget_error(limits, "/root/a", Usage(cost_usd=0.5), Usage(), before=True) is not None


def test_usd_per_tree_comes_from_the_environment() -> None:
    assert Limits.from_env({"RETINUE_USD_PER_TREE": "2.5"}).usd_per_tree == 2.5
    assert Limits.from_env({"RETINUE_USD_PER_TREE": "unlimited"}).usd_per_tree is None


def eight_workers(turn: Turn) -> str:
    results = turn.run_many([("worker", f"job {n}") for n in range(8)], timeout=SETTLE_S)
    return ",".join(getattr(r, "status", "error") for r in results)


@pytest.mark.parametrize("call", [(200, 150), (120, 130)])
def test_eight_agents_calling_at_once_overshoot_a_tree_budget_by_less_than_one_call(
    stub: OpenAIStub, tmp_path: Path, call: tuple[int, int]
) -> None:
    looping(stub, call, delay_s=0.05)
    one_call = sum(call)
    profiles = [
        Profile("lead", subagents=["worker"], tools=["note"], runner=eight_workers),
        Profile("worker", tools=["note"], runner=runner(stub, "openai/stub-model")),
    ]
    limits = Limits(tokens_per_tree=3000, fanout_cap=8, max_active_turns=16, wait_default_s=30)
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=limits) as rt:
        lead = rt.spawn("lead", "fan out")
        done = rt.wait(lead.id, timeout=SETTLE_S)
        spent = rt.get(lead.id).tree_usage
        workers = [a for a in rt.agents() if a.profile == "worker"]
    assert done.output == ",".join(["failed"] * 8)
    assert all(w.state is AgentState.FAILED for w in workers)
    assert all((w.error or "").startswith("TokenBudgetExceeded") for w in workers)
    assert spent is not None
    assert 3000 <= spent.total_tokens < 3000 + one_call
    assert stub.max_in_flight > 1, "calls did fly at once: the admission was put to the test"


def test_a_call_reserve_admits_first_calls_together(stub: OpenAIStub, tmp_path: Path) -> None:
    # Without an estimate a tree's first call flies alone; call_reserve_tokens is one, so the
    # eight first calls (7 x 400 reserved < 3000) fly together: each first request is held
    # until all eight are in flight (a barrier, bounded only to fail instead of hang).
    together = threading.Barrier(8, timeout=SETTLE_S)
    broken: list[int] = []

    def handler(request: Any) -> StubReply:
        if request.number <= 8:
            try:
                together.wait()
            except threading.BrokenBarrierError:
                broken.append(request.number)
        message = tool_call("note", {"text": "x"}, f"call_{request.number}")
        return StubReply(message=message, usage=(200, 150))

    stub.handler = handler
    profiles = [
        Profile("lead", subagents=["worker"], tools=["note"], runner=eight_workers),
        Profile("worker", tools=["note"], runner=runner(stub, "openai/stub-model")),
    ]
    limits = Limits(
        tokens_per_tree=3000, call_reserve_tokens=400, max_active_turns=16, wait_default_s=30
    )
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=limits) as rt:
        lead = rt.spawn("lead", "fan out")
        rt.wait(lead.id, timeout=SETTLE_S)
        spent = rt.get(lead.id).tree_usage
    assert broken == [], "the first calls did not all fly at once"
    assert spent is not None and 3000 <= spent.total_tokens < 3000 + 350


def test_a_settled_agent_leaves_no_estimate_behind(stub: OpenAIStub, tmp_path: Path) -> None:
    """Before, every agent that ever called a model under a token budget kept its estimate
    (~165 bytes each, for ever, closed and compacted or not)."""

    def done_at_once(request: Any) -> StubReply:
        return StubReply(message={"role": "assistant", "content": "done"}, usage=(20, 10))

    stub.handler = done_at_once
    profiles = [
        Profile("lead", subagents=["worker"], tools=["note"], runner=eight_workers),
        Profile("worker", tools=["note"], runner=runner(stub, "openai/stub-model")),
    ]
    limits = Limits(tokens_per_tree=100_000, max_active_turns=16, wait_default_s=30)
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=limits) as rt:
        admission = rt._system.core.supervision.admission  # type: ignore[union-attr]
        for _ in range(3):
            lead = rt.spawn("lead", "fan out")
            assert rt.wait(lead.id, timeout=SETTLE_S).output == ",".join(["completed"] * 8)
            assert set(admission.largest_tokens) <= {lead.id}  # the tree's own, while it lives
            rt.close_tree(lead.id)
        assert admission.largest_tokens == {} and admission.largest_usd == {}
