"""A perturbed replay answers the same whatever the clock: a late attempt changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from retinue import AgentState, Profile, Runtime
from retinue.llm import LiteLLMRunner
from retinue.llm.cassette import Cassette
from retinue.llm.model import load_litellm
from retinue.testing._fuzz_faults import FaultModels
from retinue.testing.fuzzing import perturbed_run

pytest.importorskip("hypothesis")

LATE_S = 2.5
"""Longer than the 2 s an off-script call had before: a first call as late as on a
loaded machine (litellm's first call in a process, at a load of 6 and more)."""


@pytest.fixture(scope="module", autouse=True)
def litellm() -> None:
    load_litellm()


def profiles(cassette: Cassette | Path, mode: str = "replay") -> list[Profile]:
    runner = LiteLLMRunner("retinue/scripted", cassette=cassette, mode=mode, retry_base_s=0.01)
    return [Profile("reviewer", runner=runner)]


def outcome(store: Path) -> tuple[AgentState, str | None, str | None]:
    with Runtime.open(store, readonly=True) as rt:
        (agent,) = rt.agents(include_closed=True)
        return agent.state, agent.output, agent.error


def test_a_fault_lands_the_same_when_its_first_attempt_is_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tape = tmp_path / "run.cassette"
    with Runtime.open(tmp_path / "live", profiles=profiles(tape, "record")) as rt:
        agent = rt.spawn("reviewer", "review the change", name="review")
        assert rt.wait(agent.id, timeout=60).status == "completed"
    perturb = {"/root/review#0": "server_error"}  # a 5xx, then the retry answered off script
    quiet = perturbed_run(tape, profiles, "reviewer", perturb=perturb, seed=3, store=tmp_path / "q")
    assert quiet.broken == []
    expected = outcome(tmp_path / "q")
    assert expected[0] is AgentState.COMPLETED, expected

    respond = FaultModels._respond
    arrivals: list[float] = []

    async def late(
        self: FaultModels, model: str, messages: list[Any], optional_params: Mapping[str, Any]
    ) -> Any:
        arrivals.append(asyncio.get_running_loop().time())
        if len(arrivals) == 1:  # the first attempt reaches the fault model late
            await asyncio.sleep(LATE_S)
        return await respond(self, model, messages, optional_params)

    monkeypatch.setattr(FaultModels, "_respond", late)
    late_run = tmp_path / "late"
    loaded = perturbed_run(tape, profiles, "reviewer", perturb=perturb, seed=3, store=late_run)
    assert loaded.broken == []
    assert len(arrivals) == 2, "the fault's first attempt and its retry"
    assert outcome(late_run) == expected
