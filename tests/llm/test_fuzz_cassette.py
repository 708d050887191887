"""A recorded run seeds the fuzzer: it finds a host tool that fails on its third call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm.conftest import SETTLE_S
from retinue import Profile, Runtime
from retinue.llm import LiteLLMRunner
from retinue.llm.cassette import Cassette
from retinue.testing import OpenAIStub, StubReply, StubRequest
from retinue.testing._fuzz_cassette import perturbed_run, recorded_start, seeded_search

pytest.importorskip("hypothesis")
pytestmark = pytest.mark.usefixtures("litellm")


def _call(word: str, call_id: str) -> dict[str, object]:
    function = {"name": "lookup", "arguments": json.dumps({"word": word})}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def test_the_seeded_fuzzer_finds_a_host_tool_failing_on_its_third_call(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    calls = [0]

    def lookup(word: str) -> str:
        """Look a word up (broken: the third call of a run fails)."""
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("lookup table exhausted")
        return f"{word}: found"

    def answer(request: StubRequest) -> StubReply:
        done = sum(1 for m in request.messages if m["role"] == "tool")
        if done < 2:
            return StubReply(message=_call(["alpha", "beta"][done], f"call_{done}"))
        return StubReply(message={"role": "assistant", "content": "both found"})

    stub.handler = answer

    def profiles(cassette: Cassette | Path, mode: str = "replay") -> list[Profile]:
        calls[0] = 0  # each run starts the host's counter again
        runner = LiteLLMRunner(
            "openai/stub-model",
            api_base=stub.url,
            api_key="x",
            host_tools={"lookup": lookup},
            cassette=cassette,
            mode=mode,
        )
        return [Profile("worker", runner=runner, tools=["lookup"])]

    cassette = tmp_path / "run.cassette"
    with Runtime.open(tmp_path / "live", profiles=profiles(cassette, "record")) as rt:
        info = rt.spawn("worker", "look up alpha and beta", name="lookups")
        assert rt.wait(info.id, timeout=SETTLE_S).output == "both found"
    assert calls[0] == 2, "the recorded run never reaches the bug"
    assert recorded_start(cassette) == ("lookups", "look up alpha and beta")
    live = len(stub.requests)
    # Replayed as recorded, nothing breaks.
    clean = perturbed_run(cassette, profiles, "worker", perturb={}, seed=0, store=tmp_path / "s0")
    assert clean.broken == []
    ran, finding = seeded_search(cassette, profiles, "worker", examples=30, seed=1)
    assert finding is not None, f"no failure in {ran} examples"
    assert finding.broken[0].startswith("host_tool_failed: lookup (/root/lookups)")
    assert "lookup table exhausted" in finding.broken[0]
    assert len(stub.requests) == live, "the fuzzer never calls the provider"
    # The example it prints runs again to the same failure.
    again = json.loads(finding.example())
    rerun = perturbed_run(
        cassette,
        profiles,
        "worker",
        perturb=again["perturb"],
        seed=again["seed"],
        store=tmp_path / "again",
    )
    assert rerun.broken[:1] == finding.broken[:1]
