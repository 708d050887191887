"""A turn's transcript kept from step to step: the cut's shortcut and the memo store the same bytes.

Each step of a model turn bounds its chat (``bound_at``) and encodes it
(``encode_transcript``). The shortcut (a chat that fits comes back as it is,
nothing copied) and the :class:`~retinue.protocol.transcript_memo.TranscriptMemo`
(sizes and records computed once per message) must change nothing stored:
every step is compared with the cut as it was before them (kept verbatim in
``tests/support/old_transcript_cut.py``) and an encoding without a memo.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.old_transcript_cut import cut_transcript as old_cut

import retinue.protocol.chat as chat_module
from llm.test_transcript_cut import Chat, chats
from retinue.protocol.chat import (
    CUT_MARKER,
    GENERATION_TAG,
    bound_at,
    encode_transcript,
    repair_dangling,
)
from retinue.protocol.transcript_cut import _size_bound, message_size
from retinue.protocol.transcript_memo import TranscriptMemo

BOUNDS = [10, 500, 2000, 6000, 20000, 10**7]


def _reference(chat: Chat, max_bytes: int, task_at: int | None, generation: int) -> Any:
    """One step as it was stored before the shortcut and the memo: every message copied and
    sized, every record built."""
    out, cut, where = old_cut(chat, max_bytes, task_at)
    return out, cut, where, encode_transcript("a" * 32, out, cut, generation=generation)


def _memoized(
    chat: Chat, max_bytes: int, task_at: int | None, generation: int, memo: TranscriptMemo
) -> Any:
    """One step as a turn's session stores it now (``TurnSession._step``)."""
    out, cut, where = bound_at(chat, max_bytes, task_at, memo=memo)
    raw = encode_transcript("a" * 32, out, cut, generation=generation, memo=memo)
    return out, cut, where, raw


def _edit(history: Chat, how: int, draw: Any) -> None:
    """Change the list in place between two steps: replace, insert or remove a message."""
    if not history:
        return
    at = draw(st.integers(0, len(history) - 1))
    if how == 0:
        history[at] = {**history[at], "content": f"changed {at}"}
    elif how == 1:
        history.insert(at, {"role": "user", "content": f"inserted {at}"})
    else:
        del history[at]


@st.composite
def turns(draw: st.DrawFn) -> tuple[Chat, int, int, list[tuple[int, int]]]:
    """A chat to grow message by message, its task's index, a bound, and edits (step, kind).

    Some messages keep a stored generation (as loaded ones do); every content
    and argument size of :func:`chats` is drawn, so small bounds cut.
    """
    chat, task_at = draw(chats())
    for message in chat:
        if draw(st.integers(0, 3)) == 0:
            message[GENERATION_TAG] = draw(st.sampled_from([1, 2, 7]))
    edits = draw(st.lists(st.tuples(st.integers(1, len(chat)), st.integers(0, 2)), max_size=3))
    return chat, task_at, draw(st.sampled_from(BOUNDS)), edits


@settings(derandomize=True, max_examples=150, deadline=None)
@given(turns(), st.data())
def test_every_step_stores_the_same_bytes_as_before_the_shortcut_and_the_memo(
    drawn: tuple[Chat, int, int, list[tuple[int, int]]], data: st.DataObject
) -> None:
    chat, task_at, max_bytes, edits = drawn
    memo = TranscriptMemo()
    mine: Chat = []  # the session's history, step after step
    theirs: Chat = []  # the same, stored as before
    where_mine: int | None = None
    where_theirs: int | None = None
    for step, message in enumerate(chat, start=1):
        if step - 1 == task_at:
            where_mine, where_theirs = len(mine), len(theirs)
        mine.append(message)
        theirs.append(dict(message))
        for kind in (kind for at, kind in edits if at == step):
            _edit(mine, kind, data.draw)
            theirs[:] = [dict(m) for m in mine]  # the reference follows the same edit
        if step == len(chat) // 2:  # a repair mid-turn: new result messages, the rest kept
            mine = repair_dangling(mine)
            theirs = [dict(m) for m in mine]
        before = json.dumps(mine)
        got = _memoized(mine, max_bytes, where_mine, 3, memo)
        want = _reference(theirs, max_bytes, where_theirs, 3)
        assert json.dumps(mine) == before  # the input is not changed
        assert got[0] == want[0] and got[1:] == want[1:]
        mine, where_mine = got[0], got[2]
        theirs, where_theirs = want[0], want[2]


def test_a_chat_that_fits_comes_back_as_it_is_nothing_copied() -> None:
    chat: Chat = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "{}"},
    ]
    before = json.dumps(chat)
    for memo in (None, TranscriptMemo()):
        out, cut, where = bound_at(chat, 10**6, 0, memo=memo)
        assert out is not chat and (cut, where) == (0, 0)
        assert all(a is b for a, b in zip(out, chat, strict=True))
        assert json.dumps(chat) == before


def test_a_cut_copies_only_the_messages_it_changes_and_the_task() -> None:
    chat: Chat = [
        {"role": "user", "content": "old task"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "r" * 5000},
        {"role": "user", "content": "new task"},
        {"role": "assistant", "content": "ok"},
    ]
    before = json.dumps(chat)
    memo = TranscriptMemo()
    out, cut, where = bound_at(chat, 1000, 3, memo=memo)
    assert (cut, where) == (1, 3) and json.dumps(chat) == before
    assert out[2]["content"] == CUT_MARKER and chat[2]["content"] == "r" * 5000
    assert [a is b for a, b in zip(out, chat, strict=True)] == [True, True, False, False, True]
    assert out[3] == chat[3]  # the task: a copy, unchanged
    assert encode_transcript("a", out, memo=memo) == encode_transcript("a", out)


def test_a_message_replaced_in_the_chat_between_steps_is_encoded_again() -> None:
    memo = TranscriptMemo()
    chat: Chat = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "one"}]
    assert encode_transcript("a", chat, memo=memo) == encode_transcript("a", chat)
    chat[1] = {"role": "assistant", "content": "two"}  # replaced in place in the list
    chat.append({"role": "user", "content": "more"})
    assert encode_transcript("a", chat, memo=memo) == encode_transcript("a", chat)
    del chat[0]
    assert encode_transcript("a", chat, memo=memo) == encode_transcript("a", chat)
    chat.insert(0, {"role": "user", "content": "first"})
    assert encode_transcript("a", chat, generation=4, memo=memo) == encode_transcript(
        "a", chat, generation=4
    )


@pytest.fixture
def converted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The contents of the messages converted to records, in order (``_to_record`` counted)."""
    seen: list[str] = []
    to_record = chat_module._to_record

    def counting(message: dict[str, Any], generation: int) -> Any:
        seen.append(message["content"])
        return to_record(message, generation)

    monkeypatch.setattr(chat_module, "_to_record", counting)
    return seen


def test_each_message_is_converted_once_per_turn_not_once_per_step(
    converted: list[str],
) -> None:
    memo = TranscriptMemo()
    chat: Chat = []
    for step in range(10):
        chat.append({"role": "user", "content": f"m{step}"})
        chat[:], cut, _ = bound_at(chat, 10**6, 0, memo=memo)
        encode_transcript("a", chat, cut, memo=memo)
    assert converted == [f"m{step}" for step in range(10)]


def test_a_message_replaced_by_an_equal_copy_keeps_its_values(
    converted: list[str],
) -> None:
    memo = TranscriptMemo()
    chat: Chat = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "one"}]
    encode_transcript("a", chat, memo=memo)
    chat[1] = dict(chat[1])  # another object, the same content: the same record
    chat.append({"role": "user", "content": "more"})
    assert encode_transcript("a", chat, memo=memo) == encode_transcript("a", chat)
    assert converted == ["task", "one", "more", "task", "one", "more"]  # the last three: no memo


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


_TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ['"\\', "\x00\x1f\x7f", "\u2028é漢🙂", "\n\t\r\b\f"]
)
_NUMBER = st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
_JSON = st.recursive(
    st.none() | st.booleans() | _NUMBER | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT, _JSON, max_size=5))
def test_the_cheap_size_bound_is_never_below_the_size(message: dict[str, Any]) -> None:
    assert _size_bound(message) >= message_size(message)


def test_the_size_bound_of_a_value_compact_json_cannot_hold_is_the_size() -> None:
    for message in (
        {"role": "tool", "content": "lone \udc80 surrogate"},
        {"role": "tool", "content": math.nan},
        {"role": "tool", "content": ("a", "tuple")},
    ):
        assert _size_bound(message) == message_size(message)
    with pytest.raises(TypeError):  # as the size itself: a set is no JSON
        _size_bound({"role": "tool", "content": {1, 2}})


def test_a_long_chat_grown_step_by_step_stores_the_bytes_of_one_encoded_at_once() -> None:
    memo = TranscriptMemo()
    chat: Chat = [{"role": "user", "content": "task"}]
    for step in range(40):  # past 16 messages: the array's header grows
        chat.append({"role": "assistant", "content": None, "tool_calls": [_call(f"c{step}")]})
        assert encode_transcript("a", chat, generation=2, memo=memo) == encode_transcript(
            "a", chat, generation=2
        )
        chat.append({"role": "tool", "tool_call_id": f"c{step}", "name": "f", "content": "r"})
        if step == 30:  # a message replaced: the records from it on are encoded again
            chat[3] = {**chat[3], "content": "changed"}
        got = encode_transcript("a", chat, generation=2, memo=memo)
        assert got == encode_transcript("a", chat, generation=2)
