"""The chaos model: every kind of bad answer, through litellm's real path, the same for a seed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, Literal

import msgspec
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from retinue import AgentState, Limits, Profile, Runtime
from retinue.llm import Workspace
from retinue.llm.model import load_litellm
from retinue.llm.model._retry import classify
from retinue.llm.tools import ToolDef
from retinue.llm.tools._arguments import decode_arguments
from retinue.llm.tools._builtins import builtin_tools
from retinue.protocol.tools import BUILTIN_TOOLS
from retinue.testing import CHAOS_MODEL, ChaosModel, check_invariants
from retinue.testing.chaos_answers import (
    FAULT_KINDS,
    KINDS,
    SURROGATE,
    SURROGATE_KINDS,
    TOOL_KINDS,
)

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "task 1"}]


@pytest.fixture(scope="module")
def litellm() -> ModuleType:
    return load_litellm()


class SpawnTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    agent: Literal["security", "style"]
    message: str
    task_name: Annotated[str, msgspec.Meta(pattern="^[a-z0-9_]+$", max_length=40)] | None = None


class Batch(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tasks: Annotated[list[SpawnTask], msgspec.Meta(min_length=1, max_length=3)]
    timeout_ms: Annotated[int, msgspec.Meta(ge=0)] | None = None


def tool_defs(tmp_path: Path) -> list[ToolDef]:
    """The built-in workspace tools, and a spawn-like tool with enums, patterns and bounds."""

    async def nothing(args: Any) -> None:
        return None

    batch = ToolDef("spawn_batch", "spawn some", Batch, nothing)
    return [*builtin_tools(Workspace(tmp_path), frozenset(BUILTIN_TOOLS)), batch]


def only(kind: str, seed: int = 7, **settings: Any) -> ChaosModel:
    """A chaos model that answers with ``kind`` alone (text where a kind needs no tools)."""
    weights = dict.fromkeys(KINDS, 0.0)
    weights[kind] = 1.0
    weights["text"] = 1e-9  # never drawn in practice; a model needs a non-fault kind
    return ChaosModel(seed, weights=weights, **settings)


def call(litellm: ModuleType, chaos: ChaosModel, tools: list[dict[str, Any]]) -> Any:
    async def go() -> Any:
        return await asyncio.wait_for(
            litellm.acompletion(model=CHAOS_MODEL, messages=MESSAGES, tools=tools), 30
        )

    with chaos:
        return asyncio.run(go())


def failure(litellm: ModuleType, chaos: ChaosModel, tools: list[dict[str, Any]]) -> Any:
    with pytest.raises(Exception) as caught:
        call(litellm, chaos, tools)
    return classify(caught.value, CHAOS_MODEL, 30)


def test_each_kind_of_answer_comes_through_litellm(litellm: ModuleType, tmp_path: Path) -> None:
    defs = tool_defs(tmp_path)
    tools = [d.schema() for d in defs]
    offered = {d.name for d in defs}
    seen: dict[str, Any] = {}
    for kind in [k for k in KINDS if k not in FAULT_KINDS]:
        message = call(litellm, only(kind), tools).choices[0].message
        seen[kind] = message
    assert seen["text"].content and not seen["text"].tool_calls
    assert "\ud83d" in seen["lone_surrogate"].content
    assert len(seen["tool_call"].tool_calls) == 1
    parallel = seen["parallel_calls"].tool_calls
    assert len(parallel) >= 2 and len({c.id for c in parallel}) == len(parallel)
    with pytest.raises(ValueError):
        json.loads(seen["malformed_json"].tool_calls[0].function.arguments or "x")
    assert seen["unknown_tool"].tool_calls[0].function.name not in offered
    assert len(seen["huge_arguments"].tool_calls[0].function.arguments) > 60_000
    assert seen["missing_id"].tool_calls[0].id  # litellm gives it one, as for a real provider
    twins = seen["duplicate_ids"].tool_calls
    assert len(twins) == 2 and twins[0].id == twins[1].id
    (named,) = seen["surrogate_name"].tool_calls
    assert SURROGATE in named.function.name
    assert named.function.name.replace(SURROGATE, "") in offered
    assert SURROGATE in seen["surrogate_id"].tool_calls[0].id
    (gateable,) = seen["surrogate_arguments"].tool_calls
    assert gateable.function.name in offered and SURROGATE in gateable.function.arguments
    assert seen["slow"].content or seen["slow"].tool_calls


def test_each_kind_of_failure_comes_through_litellm(litellm: ModuleType) -> None:
    limited = failure(litellm, only("rate_limited"), [])
    assert limited.status == 429 and limited.retryable
    assert failure(litellm, only("server_error"), []).status in (500, 502, 503, 504, 529)
    bad = failure(litellm, only("bad_request"), [])
    assert bad.status == 400 and not bad.retryable
    assert failure(litellm, only("timeout"), []).retryable
    assert failure(litellm, only("null_choices"), []).retryable  # litellm cannot read it
    parts = failure(litellm, only("content_parts"), [])
    assert "Traceback" not in parts.message
    assert call(litellm, only("empty_choices"), []).choices == []
    with pytest.raises(TimeoutError):  # a hang answers only past any deadline

        async def hang() -> Any:
            with only("hang"):
                return await asyncio.wait_for(
                    litellm.acompletion(model=CHAOS_MODEL, messages=MESSAGES), 0.5
                )

        asyncio.run(hang())


def test_without_hang_s_a_hang_times_out_at_once(litellm: ModuleType) -> None:
    # a replay's hang: no deadline has to fire, so no clock decides the call
    hang = failure(litellm, only("hang", hang_s=None), [])
    assert hang.retryable and "no answer in time [hang]" in hang.message
    assert call(litellm, only("text", hang_s=None), []).choices[0].message.content


def test_a_streamed_answer_is_the_answer_in_pieces(litellm: ModuleType, tmp_path: Path) -> None:
    tools = [d.schema() for d in tool_defs(tmp_path)]

    async def streamed() -> Any:
        with only("parallel_calls"):
            stream = await litellm.acompletion(
                model=CHAOS_MODEL, messages=MESSAGES, tools=tools, stream=True
            )
            return litellm.stream_chunk_builder([chunk async for chunk in stream])

    plain = call(litellm, only("parallel_calls"), tools).choices[0].message.tool_calls
    pieces = asyncio.run(streamed()).choices[0].message.tool_calls
    assert [(c.id, c.function.name, c.function.arguments) for c in pieces] == [
        (c.id, c.function.name, c.function.arguments) for c in plain
    ]


def test_half_an_emoji_goes_where_the_runtime_must_clean_it(tmp_path: Path) -> None:
    """Names, ids (and a twin id that is the escape written out), and the arguments of a tool
    approvals may gate: never a coordinator tool's when another is offered."""
    tools = [d.schema() for d in tool_defs(tmp_path)]
    coordinator = {
        "type": "function",
        "function": {"name": "send_message", "parameters": {"type": "object"}},
    }
    escaped_twin = gated = 0
    for seed in range(60):
        ids = only("surrogate_id", seed=seed).answer(MESSAGES, tools).message or {}
        calls = ids["tool_calls"]
        assert calls[0]["id"].endswith(SURROGATE)
        if len(calls) == 2:
            assert calls[1]["id"] == calls[0]["id"].replace(SURROGATE, "\\ud83d")
            escaped_twin += 1
        args = only("surrogate_arguments", seed=seed).answer(MESSAGES, [coordinator, *tools])
        (call,) = (args.message or {})["tool_calls"]
        assert call["function"]["name"] != "send_message"
        assert json.loads(call["function"]["arguments"])  # still a JSON object
        assert SURROGATE in call["function"]["arguments"]  # raw, as a decoded response holds it
        gated += 1
    assert escaped_twin and gated == 60


def test_the_strategy_reaches_every_half_emoji_kind(tmp_path: Path) -> None:
    """Hypothesis finds models of :meth:`ChaosModel.strategy` that answer with each kind."""
    tools = [d.schema() for d in tool_defs(tmp_path)]
    fast = settings(max_examples=2_000, derandomize=True, database=None, deadline=None)
    for kind in SURROGATE_KINDS:

        def answers(chaos: ChaosModel, kind: str = kind) -> bool:
            return chaos.answer(MESSAGES, tools).kind == kind

        found = find(ChaosModel.strategy(), answers, settings=fast)
        assert found.weights[kind] > 0


def test_a_rate_limit_carries_its_retry_after(litellm: ModuleType) -> None:
    afters = set()
    for seed in range(40):
        weights = {**dict.fromkeys(KINDS, 0.0), "rate_limited": 1.0, "text": 1e-9}
        afters.add(failure(litellm, ChaosModel(seed, weights=weights), []).retry_after)
    assert {0.05, 0.3, 1.0} <= afters


def test_valid_calls_decode_with_the_tools_own_structs(tmp_path: Path) -> None:
    defs = {d.name: d for d in tool_defs(tmp_path)}
    tools = [d.schema() for d in defs.values()]
    decoded = 0
    for seed in range(300):
        answer = ChaosModel(seed, weights={"text": 0}).answer(MESSAGES, tools)
        if answer.kind not in ("tool_call", "parallel_calls"):
            continue
        for raw in (answer.message or {})["tool_calls"]:
            function = raw["function"]
            decode_arguments(
                defs[function["name"]].decoder, function["name"], function["arguments"]
            )
            decoded += 1
    assert decoded > 150


def test_valid_tool_calls_dominate_the_first_step(tmp_path: Path) -> None:
    tools = [d.schema() for d in tool_defs(tmp_path)]
    kinds = [ChaosModel(seed).answer(MESSAGES, tools).kind for seed in range(500)]
    valid = sum(k in ("tool_call", "parallel_calls", "slow") for k in kinds)
    assert valid > len(kinds) / 2
    assert set(kinds) >= {*TOOL_KINDS, "text", "rate_limited", "server_error"}


def test_a_turn_ends_in_text_after_max_steps(tmp_path: Path) -> None:
    tools = [d.schema() for d in tool_defs(tmp_path)]
    step: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": []}
    long_turn: list[dict[str, Any]] = [*MESSAGES, *([step] * 3)]
    for seed in range(100):
        answer = ChaosModel(seed, max_steps=3).answer(long_turn, tools)
        assert not (answer.message or {}).get("tool_calls"), answer.kind


def test_a_seed_gives_each_agent_the_same_answers_whatever_the_order(tmp_path: Path) -> None:
    tools = [d.schema() for d in tool_defs(tmp_path)]
    agents = [[{"role": "user", "content": f"task {i}"}] for i in range(5)]
    first, second = ChaosModel(11), ChaosModel(11)
    forward = {i: [first.answer(a, tools) for _ in range(3)] for i, a in enumerate(agents)}
    interleaved: dict[int, list[Any]] = {i: [] for i in range(5)}
    for _ in range(3):
        for i in reversed(range(5)):
            interleaved[i].append(second.answer(agents[i], tools))
    assert forward == interleaved  # a retry (the same messages again) is the next attempt
    other = ChaosModel(12)
    assert [other.answer(a, tools) for a in agents] != [forward[i][0] for i in range(5)]


def test_the_chaos_model_must_be_installed_and_installs_nest(litellm: ModuleType) -> None:
    with pytest.raises(litellm.BadRequestError, match=r"install a retinue\.testing\.ChaosModel"):
        asyncio.run(litellm.acompletion(model=CHAOS_MODEL, messages=MESSAGES))
    outer, inner = only("text"), only("bad_request")
    with outer:
        with inner:
            assert failure(litellm, inner, []).status == 400
        assert call(litellm, outer, []).choices[0].message.content


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown chaos answer kind 'hangs'"):
        ChaosModel(weights={"hangs": 1})
    with pytest.raises(ValueError, match=">= 0"):
        ChaosModel(weights={"hang": -1})
    with pytest.raises(ValueError, match="not a fault"):
        ChaosModel(weights=dict.fromkeys(("text", "lone_surrogate", *TOOL_KINDS, "slow"), 0))
    with pytest.raises(ValueError, match="max_steps"):
        ChaosModel(max_steps=0)


@settings(max_examples=5, derandomize=True, deadline=None)
@given(chaos=ChaosModel.strategy(weights={"hang": 0}, slow_s=(0.0, 0.05)), data=st.data())
def test_teams_on_drawn_chaos_models_settle_with_every_invariant_held(
    tmp_path_factory: pytest.TempPathFactory, chaos: ChaosModel, data: st.DataObject
) -> None:
    """The chaos model always answers in the end: every turn settles; nothing is broken."""
    load_litellm()
    folder = tmp_path_factory.mktemp("chaos")
    (folder / "ws").mkdir()
    (folder / "ws" / "notes.md").write_text("TODO: check\n")
    fast = {"request_timeout_s": 1.0, "retry_base_s": 0.01, "retry_max_s": 0.1}
    fast["stream"] = data.draw(st.booleans())  # the streamed answers are assembled alike
    profiles = [
        Profile("lead", subagents=["leaf"], model=CHAOS_MODEL, tools="read", model_settings=fast),
        Profile("leaf", tools="read", result_format="structured"),
    ]
    limits = Limits(fanout_cap=2, depth_cap=2, wait_default_s=2.0, wait_max_s=120.0)
    tasks = data.draw(st.integers(1, 3))
    received = []
    with (
        chaos,
        Runtime.open(
            folder / "store", profiles=profiles, workspace=folder / "ws", limits=limits
        ) as rt,
    ):
        leads = [rt.spawn("lead", f"task {i} of {chaos.seed}") for i in range(tasks)]
        received = [rt.wait(lead.id, timeout=120) for lead in leads]
        rt.wait_idle(120)
        assert all(a.state is not AgentState.RUNNING for a in rt.agents())
    assert check_invariants(folder / "store", host_received=received, workspace=folder / "ws") == []
    assert sum(chaos.counts.values()) >= tasks
