"""The transcript cut keeps the chat a provider accepts: a property test over random chats."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from llm.conftest import run, stub_runner, tool_call
from retinue import AgentState, Profile
from retinue.llm.chat import bound_at, decode_transcript, encode_transcript
from retinue.protocol.chat import CUT_ARGUMENTS, CUT_MARKER, bound
from retinue.protocol.text import HEAD_TRUNCATION_MARKER
from retinue.protocol.transcript_cut import TASK_FLOOR_BYTES, message_size
from retinue.testing import OpenAIStub, StubReply

Chat = list[dict[str, Any]]


@st.composite
def chats(draw: st.DrawFn) -> tuple[Chat, int]:
    """A chat of several turns and the index of the current turn's task.

    Every message carries a unique ``name`` so the test can follow it through
    the cut (which never changes names). The last step may be an assistant
    whose calls have no results yet (the runner saves right after the model
    answers).
    """
    chat: Chat = []
    counter = iter(range(10**6))

    def text(kind: str) -> str:
        size = draw(st.sampled_from([0, 5, 40, 300, 3000]))
        return f"{kind}{next(counter)}:" + "x" * size

    turns = draw(st.integers(1, 4))
    task_at = 0
    for turn in range(turns):
        task_at = len(chat)
        chat.append({"role": "user", "content": text("task")})
        for _ in range(draw(st.integers(0, 4))):
            if draw(st.booleans()):
                chat.append({"role": "assistant", "content": text("say")})
                continue
            ids = [f"call{next(counter)}" for _ in range(draw(st.integers(1, 3)))]
            chat.append(
                {
                    "role": "assistant",
                    "content": draw(st.sampled_from([None, text("think")])),
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {
                                "name": "read_file",
                                "arguments": json.dumps({"path": text("arg")}),
                            },
                        }
                        for i in ids
                    ],
                }
            )
            last = turn == turns - 1
            answered = ids if not last or draw(st.booleans()) else []
            for i in answered:
                chat.append(
                    {
                        "role": "tool",
                        "tool_call_id": i,
                        "name": "read_file",
                        "content": text("result"),
                    }
                )
        if turn < turns - 1 and draw(st.booleans()):
            chat.append({"role": "assistant", "content": text("answer")})
    for number, message in enumerate(chat):
        message["name"] = f"m{number}"
    return chat, task_at


def units(chat: Chat) -> list[Chat]:
    out: list[Chat] = []
    for message in chat:
        if message["role"] == "tool" and out and out[-1][0].get("tool_calls"):
            out[-1].append(message)
        else:
            out.append([message])
    return out


def key(message: dict[str, Any]) -> str:
    """The message's tag (see :func:`chats`)."""
    name: str = message["name"]
    return name


def check_structure(out: Chat) -> None:
    """No tool result without its call, and it follows its call's assistant message."""
    assert not out or out[0]["role"] != "tool"
    open_ids: set[str] = set()
    for message in out:
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_ids, message
            open_ids.discard(message["tool_call_id"])
        else:
            open_ids = {c["id"] for c in message.get("tool_calls") or ()}


@settings(derandomize=True, max_examples=300, deadline=None)
@given(chats(), st.sampled_from([10, 500, 2000, 6000, 20000, 10**7]))
def test_the_cut_keeps_the_task_the_structure_and_the_bound(
    drawn: tuple[Chat, int], max_bytes: int
) -> None:
    chat, task_at = drawn
    original = json.dumps(chat)
    out, cut, where = bound_at(chat, max_bytes, task_at)
    assert json.dumps(chat) == original  # the input is not changed
    check_structure(out)
    # The current task is kept, whole unless it alone is too big.
    assert where is not None and out[where]["role"] == "user"
    task = chat[task_at]["content"]
    kept = out[where]["content"]
    if kept != task:
        assert kept.endswith(HEAD_TRUNCATION_MARKER)
        assert task.startswith(kept.removesuffix(HEAD_TRUNCATION_MARKER))
        assert len(kept.encode()) >= min(len(task.encode()), TASK_FLOOR_BYTES)
    # The step in progress is kept, its last message whole.
    last_unit = units(chat)[-1]
    if where != len(out) - 1:  # (the task itself may be the step in progress)
        assert out[-1] == chat[-1]
    assert [key(m) for m in out[-len(last_unit) :]] == [key(m) for m in last_unit]
    # Order is kept; messages only go whole, with every result of a call.
    keys = [key(m) for m in chat]
    positions = [keys.index(key(m)) for m in out]
    assert positions == sorted(positions)
    for unit in units(out):
        calls = unit[0].get("tool_calls")
        if calls:
            source = next(u for u in units(chat) if key(u[0]) == key(unit[0]))
            assert [key(m) for m in unit] == [key(m) for m in source]
    # Contents and arguments are unchanged or replaced by the visible markers.
    by_key = {key(m): m for m in chat}
    for message in out:
        before = by_key[key(message)]
        if message is not out[where]:
            assert message.get("content") in (before.get("content"), CUT_MARKER)
        calls = zip(message.get("tool_calls") or (), before.get("tool_calls") or (), strict=True)
        for new, old in calls:
            arguments = new["function"]["arguments"]
            assert arguments in (old["function"]["arguments"], CUT_ARGUMENTS)
            json.loads(arguments)
    # It fits whenever the task and the step in progress fit.
    floor = message_size(chat[task_at]) + sum(message_size(m) for m in last_unit)
    total = sum(message_size(m) for m in out)
    if floor <= max_bytes:
        assert total <= max_bytes
    if total < sum(message_size(m) for m in chat):
        assert cut > 0
    # What the cut gives is what is stored, and a second cut changes nothing.
    stored, _ = decode_transcript(encode_transcript("a" * 32, out, cut))
    assert len(stored) == len(out)
    again, more, _ = bound_at(out, max_bytes, where)
    if floor <= max_bytes:
        assert (again, more) == (out, 0)


def test_oversized_tool_call_arguments_are_cut_with_the_marker() -> None:
    chat: Chat = [{"role": "user", "content": "old task"}]
    chat.append(tool_call("write_file", {"path": "a", "content": "z" * 50_000}, "c1"))
    chat.append({"role": "tool", "tool_call_id": "c1", "content": "{}"})
    chat += [{"role": "user", "content": "new task"}, {"role": "assistant", "content": "ok"}]
    out, cut = bound(chat, 2000)
    assert cut >= 1
    assert out[1]["tool_calls"][0]["function"]["arguments"] == CUT_ARGUMENTS
    assert CUT_MARKER in json.loads(CUT_ARGUMENTS)["retinue_cut"]
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "user", "assistant"]


def test_an_orphan_tool_result_left_by_an_older_cut_is_removed() -> None:
    chat: Chat = [
        {"role": "tool", "tool_call_id": "gone", "content": "orphan"},
        {"role": "user", "content": "task"},
    ]
    out, cut = bound(chat, 10**6)
    assert out == [chat[1]] and cut == 1


def test_a_long_turn_keeps_its_task_and_the_next_request_starts_validly(
    stub: OpenAIStub, llm_runtime: Any, tmp_path: Any
) -> None:
    (tmp_path / "ws").mkdir()
    content = "z" * 5000  # six calls of these arguments alone pass transcript_max_bytes
    replies = [
        tool_call("write_file", {"path": f"f{i}.txt", "content": content}, f"c{i}")
        for i in range(6)
    ]
    replies.append({"role": "assistant", "content": "done"})
    stub.handler = lambda r: StubReply(message=replies[min(r.number, len(replies)) - 1])
    runner = stub_runner(stub, workspace=tmp_path / "ws")
    rt = llm_runtime([Profile("leaf", tools="modify", runner=runner)], transcript_max_bytes=20_000)
    info = run(rt, "leaf", "THE TASK: write six files")
    assert info.state is AgentState.COMPLETED, info.error
    assert len(stub.requests) == 7
    for request in stub.requests:
        chat = [m for m in request.messages if m["role"] != "system"]
        check_structure(chat)
        assert any(m["role"] == "user" and "THE TASK" in (m["content"] or "") for m in chat)
    stored = rt.inspect(info.id, transcript_tail=100).transcript
    assert any("THE TASK" in (m.content or "") for m in stored)
