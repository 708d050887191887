"""The times of each model call are stored with the transcript (the web view's timeline)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from support import wait_settled

from llm.conftest import SETTLE_S, run
from retinue import Profile
from retinue.protocol.records import TranscriptMessage, TranscriptRecord

pytestmark = pytest.mark.usefixtures("litellm")

SOLO = Profile("solo", model="retinue/scripted", tools="none")


def test_each_call_is_stored_with_its_turn_and_times(llm_runtime: Any) -> None:
    rt = llm_runtime([SOLO])
    first = run(rt, "solo", "say hello")
    rt.follow_up(first.id, "say it again")
    second = wait_settled(rt, first.id, 2, timeout=SETTLE_S)
    calls = rt.inspect(first.id).calls
    assert [c.generation for c in calls] == [1, 2]
    assert {c.model for c in calls} == {"retinue/scripted"}
    assert all(c.prompt_tokens > 0 and c.completion_tokens > 0 for c in calls)
    assert calls[0].turn_started_at == first.started_at
    assert calls[1].turn_started_at == second.started_at
    assert first.started_at is not None and second.started_at is not None
    assert first.started_at <= calls[0].started_at <= calls[0].ended_at <= first.updated_at
    assert second.started_at <= calls[1].started_at <= calls[1].ended_at <= second.updated_at


def test_the_newest_calls_are_kept_up_to_the_limit(llm_runtime: Any) -> None:
    rt = llm_runtime([SOLO], transcript_max_calls=2)
    agent = run(rt, "solo", "one")
    for generation in (2, 3):
        rt.follow_up(agent.id, "again")
        wait_settled(rt, agent.id, generation, timeout=SETTLE_S)
    detail = rt.inspect(agent.id)
    assert [c.generation for c in detail.calls] == [2, 3]
    assert detail.transcript_length == 6  # the messages stay


def test_a_transcript_stored_before_call_times_reads_without_them() -> None:
    class Old(msgspec.Struct, kw_only=True):  # TranscriptRecord before its calls field
        version: int = 1
        agent_id: str
        messages: tuple[TranscriptMessage, ...] = ()
        cut: int = 0

    raw = msgspec.msgpack.encode(Old(agent_id="a", messages=(TranscriptMessage(role="user"),)))
    record = msgspec.msgpack.decode(raw, type=TranscriptRecord)
    assert record.calls == () and len(record.messages) == 1
