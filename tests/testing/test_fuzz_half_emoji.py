"""The fuzzer finds half an emoji that crossed the runtime raw: in a tool's name, a call's id,
a gated call's arguments (a chaos model that answers with little else, a team whose host tool
needs approval)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from retinue import Limits, Profile
from retinue.llm import tool
from retinue.llm.model import load_litellm
from retinue.testing._fuzz_ops import Op, lines
from retinue.testing._fuzz_run import Setup, run_case
from retinue.testing.chaos_answers import KINDS, SURROGATE_KINDS

FAST = {"request_timeout_s": 2.0, "retries": 1, "retry_base_s": 0.01, "retry_max_s": 0.1}


@tool(timeout_s=5)
def note(text: str) -> str:
    """Note a text.

    Args:
        text: what to note.
    """
    return f"noted: {text}"


def team(workspace: Path) -> dict[str, Any]:
    """A lead on the chaos model with a gated host tool, and a worker it may spawn."""
    del workspace
    settings = {**FAST, "host_tools": {"note": note}}
    lead = Profile(
        "lead",
        subagents=["worker"],
        model="retinue/chaos",
        tools=["note"],
        approve=["note"],
        model_settings=settings,
    )
    worker = Profile("worker", model="retinue/chaos", tools=["note"], model_settings=settings)
    return {"profiles": [lead, worker], "limits": Limits(wait_default_s=2.0, wait_max_s=20.0)}


@pytest.fixture(scope="module")
def litellm() -> ModuleType:
    return load_litellm()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_half_an_emoji_breaks_no_invariant(litellm: ModuleType, tmp_path: Path, seed: int) -> None:
    """Before names, ids and arguments were cleaned where the answer arrives, these runs broke
    ``agent_wedged`` (a gated call's approval request failed), ``event_not_encodable`` (a
    ``ToolCallStarted`` carried the raw name) and ``tool_call_without_result`` (a raw id in
    the chat, its result stored under the escaped one)."""
    weights = dict.fromkeys(KINDS, 0.0)
    weights.update({kind: 1.0 for kind in SURROGATE_KINDS}, text=0.3, tool_call=0.5)
    setup = Setup(f"{__name__}:team", seed=seed, weights=weights, label=f"h{seed}", settle_s=30.0)
    ops = [
        Op("spawn", profile="lead"),
        Op("spawn", profile="worker"),
        Op("pause", value=0.3),
        Op("approvals", value=1.0),
        Op("settle", value=2.0),
        Op("approvals", value=1.0),
        Op("settle", value=2.0),
        Op("approvals", value=0.0),
    ]
    result = run_case(setup, ops, tmp_path)
    assert result.broken == [], "\n".join(
        [*lines(ops, result.outcomes), *(str(b) for b in result.broken)]
    )
