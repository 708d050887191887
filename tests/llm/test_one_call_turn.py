"""A one-call model turn does only the work its one step needs, and stores what it stored.

A turn saved once (its last step, committed with its settle) makes no
transcript memo (the memo pays from a second save on); an agent's first turn
opens its chat with its input alone (no transcript decoded, no journal or
dangling call looked for); a message of a role and a content alone becomes
its record without the general conversion; a chat stored once, of plain messages a cheap
bound says fit, is neither scanned for the cut nor sized exactly. None of it changes a byte
stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import wait_settled

import retinue.llm.turn._session as session_module
from retinue import Profile, Runtime
from retinue.llm import SCRIPTED_MODEL
from retinue.protocol.chat import (
    _CHAR_BYTES,
    _PLAIN_SIZE,
    GENERATION_TAG,
    _plain_records,
    _to_record,
    encode_transcript,
    stored_chat,
    stored_once,
)
from retinue.protocol.records import ToolStep, TranscriptMessage, TranscriptRecord
from retinue.protocol.transcript_cut import cut_transcript, message_size
from retinue.protocol.transcript_memo import TranscriptMemo

PROMPT_S = 30.0


def _general_record(message: dict[str, Any], generation: int) -> TranscriptMessage:
    """The record of ``message`` (with no tool calls) as the general conversion makes it:
    every field read."""
    get = message.get
    content, call_id, name, tag = (
        get("content"),
        get("tool_call_id"),
        get("name"),
        get(GENERATION_TAG),
    )
    return TranscriptMessage(
        role=str(get("role", "user")),
        content=content if isinstance(content, str) else None,
        tool_call_id=call_id if isinstance(call_id, str) else None,
        name=name if isinstance(name, str) else None,
        generation=tag if isinstance(tag, int) and not isinstance(tag, bool) else generation,
    )


class _Role(str):
    """A role of a str subclass (stored as a plain str)."""


_values = st.one_of(st.none(), st.text(max_size=20), st.integers(), st.booleans())
_keys = st.sampled_from(["role", "content", "tool_call_id", "name", GENERATION_TAG, "x"])


@settings(derandomize=True, max_examples=300, deadline=None)
@given(
    st.dictionaries(_keys, _values, max_size=4),
    st.integers(0, 9),
    st.booleans(),
)
def test_a_messages_record_is_the_general_conversions(
    message: dict[str, Any], generation: int, subclass: bool
) -> None:
    if subclass and isinstance(message.get("role"), str):
        message["role"] = _Role(message["role"])
    got = _to_record(message, generation)
    assert got == _general_record(message, generation)
    assert type(got.role) is str
    assert msgspec.msgpack.encode(got) == msgspec.msgpack.encode(
        _general_record(message, generation)
    )


def test_a_role_and_a_content_alone_keep_every_other_field_empty() -> None:
    record = _to_record({"role": "assistant", "content": "hi"}, 4)
    assert record == TranscriptMessage(role="assistant", content="hi", generation=4)
    assert _to_record({"role": "user", "content": 7}, 2) == TranscriptMessage(
        role="user", generation=2
    )
    tagged = _to_record({"role": "user", GENERATION_TAG: 3}, 5)  # two keys, not a content
    assert tagged == TranscriptMessage(role="user", generation=3)


class _CountedMemo(TranscriptMemo):
    made = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).made += 1


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> type[_CountedMemo]:
    _CountedMemo.made = 0
    monkeypatch.setattr(session_module, "TranscriptMemo", _CountedMemo)
    return _CountedMemo


def _record(rt: Runtime, agent_id: str) -> TranscriptRecord:
    """The agent's stored transcript record, read below the API (its bytes are the point)."""
    store: Any = rt._store
    raw = store.get("transcripts", agent_id.encode())
    assert raw is not None
    return msgspec.msgpack.decode(raw, type=TranscriptRecord)


def test_a_one_call_turn_makes_no_memo_and_stores_its_input_and_answer(
    tmp_path: Path, counted: type[_CountedMemo]
) -> None:
    folder = tmp_path / "s"
    with Runtime.open(folder, profiles=[Profile("m", model=SCRIPTED_MODEL)]) as rt:
        done = rt.run("m", "say hi", name="a", timeout=PROMPT_S)
        record = _record(rt, done.agent_id)
        generation = rt.get(done.agent_id).generation
    assert done.output == "Done: say hi"
    assert counted.made == 0
    assert [(m.role, m.content, m.generation) for m in record.messages] == [
        ("user", "say hi", generation),
        ("assistant", "Done: say hi", generation),
    ]
    assert record.journal == ToolStep(generation=generation, step=0)
    assert record.cut == 0 and len(record.calls) == 1
    chat = [{"role": "user", "content": "say hi"}, {"role": "assistant", "content": "Done: say hi"}]
    assert msgspec.msgpack.encode(record) == encode_transcript(
        record.agent_id, chat, 0, record.calls, generation, record.journal
    )


def test_a_turn_with_tool_steps_makes_one_memo(tmp_path: Path, counted: type[_CountedMemo]) -> None:
    folder = tmp_path / "s"
    workspace = tmp_path / "w"
    workspace.mkdir()
    (workspace / "a.txt").write_text("first line\n")
    profiles = [Profile("m", model=SCRIPTED_MODEL, tools="read")]
    with Runtime.open(folder, profiles=profiles, workspace=workspace) as rt:
        done = rt.run("m", "read the files", name="a", timeout=PROMPT_S)
        record = _record(rt, done.agent_id)
    assert counted.made == 1
    assert [m.role for m in record.messages][:2] == ["user", "assistant"]
    assert record.messages[-1].role == "assistant" and record.messages[-1].content


def test_a_second_turn_reads_what_the_first_stored(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    profiles = [Profile("m", model=SCRIPTED_MODEL)]
    with Runtime.open(folder, profiles=profiles) as rt:
        first = rt.run("m", "say hi", name="a", timeout=PROMPT_S)
        rt.follow_up(first.agent_id, "and again")
        wait_settled(rt, first.agent_id, generation=2, timeout=PROMPT_S)
        record = _record(rt, first.agent_id)
    assert [m.role for m in record.messages] == ["user", "assistant", "user", "assistant"]
    assert [m.content for m in record.messages[::2]] == ["say hi", "and again"]
    assert [m.generation for m in record.messages] == [1, 1, 2, 2]
    assert len(record.calls) == 2


_PLAIN_TEXT = st.text(max_size=30) | st.sampled_from(
    ['"\\', "\x00\x1f\x7f", "\u2028é漢🙂", "\n\t\r\b\f", "lone \\udc80 escaped"]
)


@st.composite
def _chats(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A chat of plain messages (some tagged as loaded ones are), now and then one that is
    not plain (a tool result, a tool call, a content that is no text, an extra key)."""
    chat: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 5))):
        role = draw(st.sampled_from(["user", "assistant", "system"]))
        message: dict[str, Any] = {"role": role, "content": draw(_PLAIN_TEXT)}
        if draw(st.booleans()):
            message[GENERATION_TAG] = draw(st.sampled_from([1, 2, 7]))
        chat.append(message)
    odd = draw(st.integers(0, 6))
    if chat and odd < 5:
        at = draw(st.integers(0, len(chat) - 1))
        chat[at] = [
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
            {**chat[at], "content": None},
            {**chat[at], "name": "x"},
            {**chat[at], GENERATION_TAG: True},
            {**chat[at], "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
        ][odd]
    return chat


@settings(derandomize=True, max_examples=300, deadline=None)
@given(_chats(), st.sampled_from([0, 40, 200, 600, 262_144]), st.integers(0, 4))
def test_a_chat_stored_once_stores_what_the_cut_and_the_general_encoding_store(
    chat: list[dict[str, Any]], max_bytes: int, generation: int
) -> None:
    # without a memo (a one-call turn's one save), plain messages are taken at once
    task_at = next((i for i, m in enumerate(chat) if m["role"] == "user"), None)
    calls = ()
    journal = ToolStep(generation=generation, step=0)
    got = stored_chat("a" * 32, chat, max_bytes, task_at, generation=generation, journal=journal)
    out, cuts, where = cut_transcript(chat, max_bytes, task_at)
    want = encode_transcript("a" * 32, out, 2 + cuts, calls, generation, journal)
    assert got == (
        out,
        cuts,
        where,
        encode_transcript("a" * 32, out, cuts, calls, generation, journal),
    )
    once = stored_once(
        "a" * 32, chat, max_bytes, task_at, cut=2, generation=generation, journal=journal
    )
    assert once == want  # the cut count so far (2) plus this bound's


def test_the_plain_bound_is_never_below_the_size() -> None:
    assert message_size({"role": "", "content": ""}) == _PLAIN_SIZE  # exact for no text
    assert message_size({"role": "", "content": "\x00"}) == _PLAIN_SIZE + _CHAR_BYTES
    for text in ("", "a", "\x00" * 50, "é漢🙂" * 9, '"\\' * 7, "\udc80"):
        for role in ("user", "assistant"):
            message = {"role": role, "content": text}
            records = _plain_records([message], 0, message_size(message))
            bound = _CHAR_BYTES * (len(role) + len(text)) + _PLAIN_SIZE
            assert bound >= message_size(message)
            assert (records is not None) == (bound <= message_size(message))


def test_a_chat_over_the_plain_bound_is_sized_exactly_and_kept_when_it_fits() -> None:
    chat = [{"role": "user", "content": "x" * 100}]
    exact = message_size(chat[0])
    assert _plain_records(chat, 1, exact) is None  # the bound says nothing: over it
    got = stored_chat("a" * 32, chat, exact, 0, generation=1)
    assert got[:3] == (chat, 0, 0)  # the exact size fits: nothing cut
    assert got[3] == encode_transcript("a" * 32, chat, 0, (), 1)
