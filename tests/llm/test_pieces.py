"""The LLM layer's pure pieces: the scripted model's rules, rendering, bounding, retry rules."""

from __future__ import annotations

import json
import random
from typing import Any

from retinue.llm.chat import (
    decode_transcript,
    encode_transcript,
    render_message,
    repair_dangling,
    turn_input,
)
from retinue.llm.model import script_reply
from retinue.llm.model._retry import backoff_delay, classify
from retinue.protocol.chat import (
    CUT_MARKER,
    INTERRUPTED_TOOL_RESULT,
    bound,
    stored_calls,
    stored_journal,
    stored_transcript,
)
from retinue.protocol.effects import in_doubt_result
from retinue.protocol.messages import Completion, CompletionStatus, Message
from retinue.protocol.records import ModelCallRecord, ToolStep
from retinue.protocol.results import parse_result, result_instruction

SPAWN_TOOL = {
    "type": "function",
    "function": {
        "name": "spawn_subagents",
        "parameters": {
            "type": "object",
            "properties": {
                "tasks": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "agent": {"type": "string", "enum": ["reviewer", "tester"]},
                            "message": {"type": "string"},
                        },
                    },
                }
            },
        },
    },
}
READ_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {}}}
    for n in ("read_file", "list_dir", "grep", "find")
]


def _args(reply: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in reply["tool_calls"]
    ]


def test_a_scripted_lead_delegates_to_every_spawnable_profile_in_one_call() -> None:
    chat: list[dict[str, Any]] = [{"role": "user", "content": "review the API"}]
    reply = script_reply(chat, [SPAWN_TOOL])
    assert _args(reply) == [
        (
            "spawn_subagents",
            {
                "tasks": [
                    {"agent": "reviewer", "message": "review the API", "task_name": "reviewer"},
                    {"agent": "tester", "message": "review the API", "task_name": "tester"},
                ]
            },
        )
    ]
    results = [
        {"path": "/root/a/x", "status": "completed", "output": "looks fine"},
        {"error": "fan-out cap reached"},
    ]
    assert reply["tool_calls"][0]["id"] == "call_0_0_spawn_subagents"  # step 0, call 0
    chat += [
        reply,
        {
            "role": "tool",
            "tool_call_id": "call_0_0_spawn_subagents",
            "content": json.dumps(results),
        },
    ]
    final = script_reply(chat, [SPAWN_TOOL])
    assert final["content"] == (
        "Summary of 2 subagent results for: review the API\n"
        "- /root/a/x (completed): looks fine\n"
        "- [1] error: fan-out cap reached"
    )


def test_a_scripted_leaf_with_read_tools_lists_then_reads_then_answers() -> None:
    chat: list[dict[str, Any]] = [{"role": "user", "content": "summarise"}]
    listing = script_reply(chat, READ_TOOLS)
    assert _args(listing) == [("list_dir", {"path": "."})]
    chat += [
        listing,
        {
            "role": "tool",
            "tool_call_id": listing["tool_calls"][0]["id"],
            "name": "list_dir",
            "content": json.dumps(["b.txt", "a.txt", "sub/"]),
        },
    ]
    reads = script_reply(chat, READ_TOOLS)
    assert _args(reads) == [("read_file", {"path": "a.txt"}), ("read_file", {"path": "b.txt"})]
    for call, text in zip(reads["tool_calls"], ["alpha\nmore", "beta"], strict=True):
        chat.append(
            {"role": "tool", "tool_call_id": call["id"], "name": "read_file", "content": text}
        )
    chat.insert(len(chat) - 2, reads)
    final = script_reply(chat, READ_TOOLS)
    assert final["content"] == "Done: summarise (read 2 files: alpha; beta)"


def test_the_scripted_models_call_ids_are_unique_per_step() -> None:
    """A later step (or turn) never reuses an earlier call's id: ``call_<step>_<i>_<tool>``."""
    chat: list[dict[str, Any]] = [{"role": "user", "content": "summarise"}]
    listing = script_reply(chat, READ_TOOLS)
    chat += [listing, {"role": "tool", "tool_call_id": "call_0_0_list_dir", "content": "[]"}]
    chat += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "again"}]
    again = script_reply(chat, READ_TOOLS)
    assert [c["id"] for c in listing["tool_calls"]] == ["call_0_0_list_dir"]
    assert [c["id"] for c in again["tool_calls"]] == ["call_2_0_list_dir"]


def test_scripted_answers_follow_the_structured_contract_when_asked() -> None:
    chat = [
        {"role": "system", "content": result_instruction()},
        {"role": "user", "content": "check it"},
    ]
    result = parse_result(script_reply(chat)["content"])
    assert result.summary == "Done: check it"


def test_completions_and_messages_render_as_the_model_sees_them() -> None:
    def completion(status: CompletionStatus, **kw: Any) -> Message:
        done = Completion(
            id="a:1", agent_id="a", path="/root/l/w", generation=1, status=status, **kw
        )
        return Message(
            id="m",
            kind="completion",
            sender="/root/l/w",
            sender_id="a",
            recipient="/root/l",
            recipient_id="l",
            content="",
            completion=done,
        )

    assert render_message(completion(CompletionStatus.COMPLETED, output="42")) == (
        "[subagent:/root/l/w] delegated task completed. Result: 42"
    )
    assert render_message(completion(CompletionStatus.FAILED, error="E: x")) == (
        "[subagent:/root/l/w] delegated task FAILED: E: x"
    )
    assert render_message(completion(CompletionStatus.INTERRUPTED)) == (
        "[subagent:/root/l/w] delegated task was interrupted"
    )
    done = completion(CompletionStatus.COMPLETED, output="ok")
    assert turn_input("task", "wake", [done]) == render_message(done)  # no repeated task
    assert turn_input("task", "follow_up", [done]) == "task\n\n" + render_message(done)


def test_bound_cuts_oldest_tool_results_first_and_keeps_the_last_message() -> None:
    chat: list[dict[str, Any]] = [{"role": "user", "content": "u" * 50}]
    for i in range(5):
        chat.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "t", "arguments": "{}"},
                    }
                ],
            }
        )
        chat.append({"role": "tool", "tool_call_id": f"c{i}", "content": str(i) * 1000})
    cut_chat, cut = bound(chat, 3500)
    assert len(json.dumps(cut_chat)) <= 3500
    contents = [m["content"] for m in cut_chat if m["role"] == "tool"]
    assert contents[:cut] == [CUT_MARKER] * cut and cut >= 1
    assert contents[-1] == "4" * 1000
    assert cut_chat[0]["content"] == "u" * 50  # tool results go before anything else
    tiny, _ = bound(chat, 10)
    # An absurd bound keeps the task and the last step whole: a tool result
    # alone (without its call) would be refused by the provider.
    assert tiny == [chat[0], chat[-2], chat[-1]]


def test_a_tool_call_left_without_a_result_gets_an_in_doubt_one() -> None:
    """A call stored without a journal (by an older retinue) and without a result may or
    may not have taken effect: the model is told it is in doubt, not that it did not run."""
    chat: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "done"},
    ]
    fixed = repair_dangling(chat)
    assert fixed[-1] == {"role": "tool", "tool_call_id": "b", "content": in_doubt_result("t", None)}
    assert INTERRUPTED_TOOL_RESULT not in json.dumps(fixed)
    again, _ = decode_transcript(encode_transcript("x", fixed))
    assert again == fixed


def test_an_unreadable_transcript_starts_over() -> None:
    assert decode_transcript(b"\xff\x00garbage") == ([], 0)
    assert decode_transcript(None) == ([], 0)
    assert stored_transcript(b"\xff\x00garbage") == stored_transcript(None) == ([], 0, [], None)


def test_a_transcript_decoded_once_reads_as_its_three_readers_read_it() -> None:
    chat: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "note", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "note", "content": "{}"},
    ]
    calls = [ModelCallRecord(model="m", generation=2, started_at=1.0, ended_at=2.0)]
    journal = ToolStep(generation=2, step=1)
    raw = encode_transcript("a1", chat, 3, calls, 2, journal)
    messages, cut = decode_transcript(raw)
    assert stored_transcript(raw) == (messages, cut, stored_calls(raw), stored_journal(raw))
    assert (cut, stored_calls(raw), stored_journal(raw)) == (3, calls, journal)


class FakeStatusError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.status_code = status
        self.message = message
        self.llm_provider = "openai"
        self.litellm_response_headers = headers


def test_classify_retries_what_is_worth_retrying() -> None:
    limited = classify(
        FakeStatusError(
            429,
            "litellm.RateLimitError: RateLimitError: OpenAIException - slow down",
            {"retry-after": "7"},
        ),
        "openai/x",
        10,
    )
    assert (limited.retryable, limited.status, limited.retry_after) == (True, 429, 7.0)
    assert limited.message == "slow down"
    assert limited.line(3) == "openai status 429: slow down (3 attempts)"
    assert not classify(FakeStatusError(401, "bad key", {}), "openai/x", 10).retryable
    assert (
        classify(FakeStatusError(503, "busy", {"retry-after-ms": "250"}), "m", 1).retry_after
        == 0.25
    )
    timeout = classify(TimeoutError(), "anthropic/claude", 2.5)
    assert timeout.retryable and timeout.line(1) == "anthropic: no answer within 2.5 s (1 attempt)"


def test_backoff_grows_with_jitter_is_capped_and_honours_retry_after() -> None:
    rng = random.Random(7)
    delays = [backoff_delay(n, 1.0, 8.0, None, rng) for n in range(1, 7)]
    for n, delay in enumerate(delays, start=1):
        ceiling = min(8.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert backoff_delay(1, 0.01, 60.0, 5.0, rng) == 5.0
    assert backoff_delay(1, 0.01, 3.0, 500.0, rng) == 3.0
