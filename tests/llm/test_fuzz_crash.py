"""Faults and crashes as perturbations of a recorded run (``retinue fuzz TEAM --cassette C``).

The recorded run (:mod:`llm.taped_team`: a lookup, then an ``unsafe`` deploy
counted in a file outside the store) is replayed with calls perturbed: model
calls that fail as a provider does and host tools that raise (in this
process), and crashes: the child process running the replay SIGKILLed inside
the deploy (after its effect, before its record), the store reopened and the
run carried on. The fuzzer's checks hold (no finding), and the deploy never
runs twice behind the model's back: the call the crash left in doubt is
reported, not run again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llm.conftest import SETTLE_S
from llm.taped_team import DONE, TASK, profiles, runs, script
from retinue import Profile, Runtime
from retinue.llm.cassette import Cassette
from retinue.testing import OpenAIStub
from retinue.testing._fuzz_cassette import Finding, load_example, perturbed_run

pytest.importorskip("hypothesis")
pytestmark = pytest.mark.usefixtures("litellm")

AGENT = "/root/deployer"
FACTORY = "llm.taped_team:runtime"


@pytest.fixture
def recorded(stub: OpenAIStub, tmp_path: Path) -> Path:
    """The run recorded against the stub (its deploy counted in ``tmp_path/recorded``)."""
    stub.handler = script
    cassette = tmp_path / "run.cassette"
    counter = str(tmp_path / "recorded")
    taped = profiles(cassette, counter=counter, mode="record", api_base=stub.url)
    with Runtime.open(tmp_path / "live", profiles=taped) as rt:
        info = rt.spawn("worker", TASK, name="deployer")
        assert rt.wait(info.id, timeout=SETTLE_S).output == DONE
    assert runs(counter) == 1
    return cassette


def test_provider_faults_and_a_raising_host_tool_break_nothing(
    recorded: Path, tmp_path: Path
) -> None:
    counter = str(tmp_path / "deploys")

    def taped(tape: Cassette) -> list[Profile]:
        return profiles(tape, counter=counter)

    for number, perturb in enumerate(
        [
            {f"{AGENT}#0": "rate_limited", f"{AGENT}#1": "server_error"},
            {f"{AGENT}#1": "timeout", f"{AGENT}#tool0": "raise"},
            {f"{AGENT}#0": "malformed_json"},
        ]
    ):
        found = perturbed_run(
            recorded, taped, "worker", perturb=perturb, seed=3, store=tmp_path / f"s{number}"
        )
        assert found.broken == [], (perturb, found.broken)


def _deploy_results(store: Path) -> list[str]:
    """The results the stored chat shows for deploy calls."""
    with Runtime.open(store, readonly=True) as rt:
        (top,) = [a for a in rt.agents(include_closed=True) if a.depth == 1]
        messages = rt.inspect(top.id, transcript_tail=1000).transcript
    return [m.content or "" for m in messages if m.role == "tool" and m.name == "deploy"]


def test_a_crash_inside_an_unsafe_host_tool_never_runs_it_twice(
    recorded: Path, tmp_path: Path
) -> None:
    counter = str(tmp_path / "deploys")
    store = tmp_path / "store"
    found = perturbed_run(
        recorded,
        lambda tape: [],
        "worker",
        perturb={f"{AGENT}#tool1": "crash"},
        seed=5,
        store=store,
        factory=FACTORY,
        factory_args={"counter": counter},
        settle_s=SETTLE_S,
    )
    assert found.crashes == 1, found
    assert found.broken == [], found.broken
    results = _deploy_results(store)
    assert "in doubt" in results[0], results  # the call the crash cut: reported, not rerun
    # Every run of the deploy is one the chat shows (a later one the model asked for).
    assert runs(counter) == 1 + sum("deployed" in r for r in results), results


def test_a_crash_finds_a_tool_declared_read_that_is_not_and_its_example_runs_again(
    recorded: Path, tmp_path: Path
) -> None:
    def run(perturb: dict[str, str], seed: int, store: str) -> Finding:
        counter = str(tmp_path / f"{store}-deploys")
        return perturbed_run(
            recorded,
            lambda tape: [],
            "worker",
            perturb=perturb,
            seed=seed,
            store=tmp_path / store,
            factory=FACTORY,
            factory_args={"counter": counter, "lookup_once": True},
            settle_s=SETTLE_S,
        )

    assert run({}, 1, "clean").broken == []  # replayed as recorded, the lookup runs once
    found = run({f"{AGENT}#tool0": "crash"}, 1, "crashed")
    assert found.crashes == 1
    assert [b.split(":")[0] for b in found.broken] == ["host_tool_failed"], found.broken
    assert "already consumed" in found.broken[0]
    perturb, seed = load_example(found.example())  # the line retinue fuzz prints
    assert run(perturb, seed, "again").broken[:1] == found.broken[:1]
