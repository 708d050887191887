"""Record and replay: the example team recorded against the OpenAI-compatible stub, replayed
offline byte for byte; misses named by field; sibling calls in any order; host tools; redaction.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm.conftest import SETTLE_S
from retinue import (
    CassetteError,
    CassetteMiss,
    ConfigurationError,
    Profile,
    Runtime,
    Team,
)
from retinue.llm import LiteLLMRunner
from retinue.testing import OpenAIStub, StubReply, StubRequest, outcome_of, replay

pytestmark = pytest.mark.usefixtures("litellm")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "code_review" / "team.toml"
KEY = "sk-test-0123456789-do-not-store"
TASK = "review the change"


def example_team(stub: OpenAIStub, change: tuple[str, str] = ("", "")) -> Team:
    """The example team on litellm's OpenAI path against ``stub``, with an API key (and
    ``change[0]`` replaced by ``change[1]`` in its file)."""
    text = (
        EXAMPLE.read_text(encoding="utf-8")
        .replace(*change)
        .replace(
            'model = "retinue/scripted"',
            f'model = "openai/stub-model"\napi_base = "{stub.url}"',
        )
    )
    return Team.from_toml(text, source=EXAMPLE).with_runner_settings(api_key=KEY)


def record(team: Team, cassette: Path, store: Path, **settings: Any) -> bytes:
    """Run ``team`` on TASK recording to ``cassette``; return the run's outcome."""
    taped = team.with_runner_settings(cassette=str(cassette), mode="record", **settings)
    with Runtime.open(store, team=taped) as rt:
        lead = rt.spawn(team.lead, TASK, name=team.name)
        assert rt.wait(lead.id, timeout=SETTLE_S).status == "completed"
        rt.wait_idle(SETTLE_S)
        return outcome_of(rt)


def lines(cassette: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in cassette.read_text(encoding="utf-8").splitlines()]


def test_the_example_team_replays_offline_byte_for_byte(stub: OpenAIStub, tmp_path: Path) -> None:
    team = example_team(stub)
    cassette = tmp_path / "review.cassette"
    recorded = record(team, cassette, tmp_path / "live")
    live_calls = len(stub.requests)
    entries = lines(cassette)
    assert entries[0] == {"format": "retinue-cassette", "version": 1, "redact": []}
    assert len(entries) - 1 == live_calls  # one entry per model call (no host tools here)
    assert KEY not in cassette.read_text(encoding="utf-8"), "API keys never reach a cassette"
    assert all("api_key" not in e["request"]["params"] for e in entries[1:])
    run = replay(cassette, team, TASK, store=tmp_path / "replayed")
    assert len(stub.requests) == live_calls, "a replay never calls the model"
    assert run.completion.status == "completed"
    assert run.outcome() == recorded
    assert len(run.agents) == 10


def test_sibling_calls_match_in_any_order(stub: OpenAIStub, tmp_path: Path) -> None:
    """Recorded with the security reviewers answered late, the entries shuffled: still a match."""

    def slow_security(request: StubRequest) -> StubReply | None:
        system = request.messages[0]["content"] if request.messages else ""
        return StubReply(delay_s=0.2) if "security" in system.lower() else None

    stub.handler = slow_security
    team = example_team(stub)
    cassette = tmp_path / "review.cassette"
    recorded = record(team, cassette, tmp_path / "live")
    header, *entries = cassette.read_text(encoding="utf-8").splitlines()
    cassette.write_text("\n".join([header, *reversed(entries)]) + "\n", encoding="utf-8")
    assert replay(cassette, team, TASK).outcome() == recorded


def test_a_changed_instruction_is_a_miss_that_names_the_field(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    team = example_team(stub)
    cassette = tmp_path / "review.cassette"
    record(team, cassette, tmp_path / "live")
    changed = example_team(stub, ("You lead the review", "You lead the careful review"))
    with pytest.raises(CassetteMiss) as caught:
        replay(cassette, changed, TASK)
    miss = caught.value
    assert miss.agent == "/root/review"
    assert "/root/review's model call 0 differs" in str(miss)
    assert "at messages[0].content" in str(miss)
    run = replay(cassette, changed, TASK, strict=False)
    assert [a.path for a in run.misses()] == ["/root/review"]
    assert run.completion.error_type == "CassetteMiss"
    # A run that goes further than the recording: the miss says nothing was recorded there.
    direct = LiteLLMRunner("openai/stub-model", cassette=cassette, mode="replay")
    assert direct.cassette is not None
    with pytest.raises(CassetteMiss) as nothing:
        direct.cassette.model_answer("/root/other", 0, {"model": "m"})
    assert (nothing.value.agent, nothing.value.index, nothing.value.field) == (
        "/root/other",
        0,
        None,
    )


def test_host_tools_are_recorded_and_replayed(stub: OpenAIStub, tmp_path: Path) -> None:
    ran: list[str] = []

    def lookup(word: str) -> str:
        """Look a word up."""
        ran.append(word)
        return f"{word}: found"

    def answer(request: StubRequest) -> StubReply:
        if request.messages[-1]["role"] == "tool":
            return StubReply(message={"role": "assistant", "content": "looked it up"})
        call = {"name": "lookup", "arguments": json.dumps({"word": "retinue"})}
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": call}],
        }
        return StubReply(message=message)

    stub.handler = answer

    def team(mode: str, **settings: Any) -> list[Profile]:
        runner = LiteLLMRunner(
            "openai/stub-model",
            api_base=stub.url,
            api_key=KEY,
            host_tools={"lookup": lookup},
            cassette=tmp_path / "tools.cassette",
            mode=mode,
            **settings,
        )
        return [Profile("worker", runner=runner, tools=["lookup"])]

    def run(store: str, profiles: list[Profile]) -> bytes:
        with Runtime.open(tmp_path / store, profiles=profiles) as rt:
            info = rt.spawn("worker", "look up retinue", name="w")
            assert rt.wait(info.id, timeout=SETTLE_S).output == "looked it up"
            rt.wait_idle(SETTLE_S)
            return outcome_of(rt)

    recorded = run("live", team("record"))
    assert ran == ["retinue"]
    kinds = [str(e.get("kind")) for e in lines(tmp_path / "tools.cassette")[1:]]
    assert sorted(kinds) == ["model", "model", "tool"]
    calls = len(stub.requests)
    assert run("replayed", team("replay")) == recorded
    assert ran == ["retinue"], "a replayed host tool is answered from the cassette"
    assert run("rerun", team("replay", replay_tools=False)) == recorded
    assert ran == ["retinue", "retinue"]
    assert len(stub.requests) == calls


def test_redaction_and_bad_cassettes(stub: OpenAIStub, tmp_path: Path) -> None:
    team = example_team(stub)
    cassette = tmp_path / "redacted.cassette"
    record(team, cassette, tmp_path / "live", redact=[r"\bsmall\b"])
    text = cassette.read_text(encoding="utf-8")
    header, body = text.split("\n", 1)
    assert json.loads(header)["redact"] == [r"\bsmall\b"]
    assert "small" not in body and "[REDACTED]" in body
    # The keys are computed after redaction: the replay still finds every call.
    assert replay(cassette, team, TASK).completion.status == "completed"
    # Redacting what the run acts on (here a file name the models read) changes the
    # replayed run: it misses, loudly, where it first differs.
    acted_on = tmp_path / "acted_on.cassette"
    record(team, acted_on, tmp_path / "live2", redact=[r"payments?"])
    with pytest.raises(CassetteMiss, match=r"at messages\[\d+\]\.content"):
        replay(acted_on, team, TASK)
    with pytest.raises(CassetteError, match="no cassette at"):
        LiteLLMRunner("openai/x", cassette=tmp_path / "missing", mode="replay")
    with pytest.raises(ConfigurationError, match="cassette mode"):
        LiteLLMRunner("openai/x", cassette=cassette, mode="rewind")
    with pytest.raises(ConfigurationError, match="redact pattern"):
        LiteLLMRunner("openai/x", cassette=cassette, mode="record", redact=["("])
    newer = tmp_path / "newer.cassette"
    newer.write_text('{"format":"retinue-cassette","version":99}\n', encoding="utf-8")
    with pytest.raises(CassetteError, match="version 99"):
        replay(newer, team, TASK)
    damaged = tmp_path / "damaged.cassette"
    head, first, *rest = text.splitlines()
    damaged.write_text("\n".join([head, first[:20], *rest]) + "\n", encoding="utf-8")
    with pytest.raises(CassetteError, match="line 2 is damaged"):
        replay(damaged, team, TASK)
