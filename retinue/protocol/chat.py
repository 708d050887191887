"""What a model sees: the turn's input rendered as chat messages, and the stored transcript.

A turn's input is one ``user`` message: its task (unless it is a wake-up turn),
then its unread messages in arrival order, a child's completion rendered as
``[subagent:<path>] delegated task completed. Result: <output>``,
``... delegated task FAILED: <error>`` or ``... delegated task was interrupted``.

The transcript is the chat without its system prompt, stored as a
:class:`~retinue.protocol.records.TranscriptRecord`. :func:`bound` keeps it
within ``Limits.transcript_max_bytes`` without breaking the chat's structure
(:mod:`retinue.protocol.transcript_cut`): the current task and the step in
progress stay, the oldest tool results are replaced by :data:`CUT_MARKER`
first, then oversized tool-call arguments, then the oldest other contents,
then whole units (an assistant message with its tool results) go, oldest
first. The chat's texts arrive storable (a model's answer and a tool's result
are cleaned where they arrive, :mod:`retinue.protocol.arrival`; the rest is the
runtime's own or was checked when it was sent), so the history a turn sends
is the one it stores, as it is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from retinue.protocol.effects import in_doubt_result
from retinue.protocol.messages import AgentInfo, CompletionStatus, Message, Usage
from retinue.protocol.records import (
    TRANSCRIPT_VERSION,
    ModelCallRecord,
    ToolCallRecord,
    ToolStep,
    TranscriptMessage,
    TranscriptRecord,
)
from retinue.protocol.text import storable_text
from retinue.protocol.transcript_cut import (
    CUT_ARGUMENTS,
    CUT_MARKER,
    GENERATION_TAG,
    cut_transcript,
    fits,
    task_index,
)
from retinue.protocol.transcript_memo import TranscriptMemo

__all__ = [
    "CUT_ARGUMENTS",
    "CUT_MARKER",
    "GENERATION_TAG",
    "INTERRUPTED_TOOL_RESULT",
    "ChatMessage",
    "bound",
    "bound_at",
    "decode_transcript",
    "encode_transcript",
    "for_model",
    "render_message",
    "repair_dangling",
    "storable",
    "stored_calls",
    "stored_chat",
    "stored_journal",
    "stored_once",
    "stored_transcript",
    "timed_call",
    "turn_input",
    "unanswered_calls",
]

ChatMessage = dict[str, Any]
"""One OpenAI-shaped chat message."""

INTERRUPTED_TOOL_RESULT = json.dumps(
    {"error": "this tool call did not finish: the turn was interrupted before it returned"}
)
"""The result an older retinue gave a tool call whose turn died before it answered (false
when the call had taken effect: calls without a result are in doubt now, see
:func:`repair_dangling`)."""

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(TranscriptRecord)


def render_message(message: Message) -> str:
    """Render one mailbox entry for the model (a message or a child's completion)."""
    completion = message.completion
    if message.kind == "completion" and completion is not None:
        head = f"[subagent:{completion.path}] delegated task"
        if completion.status is CompletionStatus.COMPLETED:
            return f"{head} completed. Result: {completion.output or ''}"
        if completion.status is CompletionStatus.FAILED:
            return f"{head} FAILED: {completion.error or 'unknown error'}"
        return f"{head} was interrupted"
    return f"[message from {message.sender}] {message.content}"


def turn_input(
    task: str, reason: str, messages: Sequence[Message], error: str | None = None
) -> str:
    """Return the text of the ``user`` message that opens a turn.

    ``reason`` is the turn's reason: a ``wake`` turn shows only its messages
    (the task was shown before); a ``resume`` turn says the last one was
    interrupted; a ``restart`` turn says the previous attempt failed and why
    (``error``).
    """
    if not messages and reason != "resume" and reason != "restart":
        return task  # the task alone (a wake-up turn with no message shows it too)
    parts: list[str] = []
    if reason == "resume":
        parts.append(f"The previous turn was interrupted; carry on with the task: {task}")
    elif reason == "restart":
        why = f" ({error})" if error else ""
        parts.append(
            f"[retinue: the previous attempt at this task failed{why}; it was restarted] "
            f"Carry on with the task: {task}"
        )
    elif reason != "wake" or not messages:
        parts.append(task)
    parts.extend(render_message(m) for m in messages)
    return "\n\n".join(parts)


storable = storable_text
"""Return ``text`` with lone surrogates (no UTF-8 form) escaped as ``\\udXXX``
(:func:`retinue.protocol.text.storable_text`, which the LLM layer applies where
text arrives: :mod:`retinue.protocol.arrival`)."""


def _to_record(message: ChatMessage, generation: int) -> TranscriptMessage:
    """``message`` as its record: a text field that is not a string is None; the generation
    is the message's tag (a stored one), else ``generation``."""
    get = message.get
    content = get("content")
    if len(message) == 2 and "role" in message and "content" in message:
        # a role and a content alone (a turn's input, an answer without tool calls)
        role = message["role"]
        return TranscriptMessage(
            role=role if type(role) is str else str(role),
            content=content if isinstance(content, str) else None,
            generation=generation,
        )
    calls, call_id, name, tag = (
        get("tool_calls"),
        get("tool_call_id"),
        get("name"),
        get(GENERATION_TAG),
    )
    return TranscriptMessage(
        role=str(get("role", "user")),
        content=content if isinstance(content, str) else None,
        tool_calls=tuple(map(_call_record, calls)) if calls else (),
        tool_call_id=call_id if isinstance(call_id, str) else None,
        name=name if isinstance(name, str) else None,
        generation=tag if isinstance(tag, int) and not isinstance(tag, bool) else generation,
    )


def _call_record(call: dict[str, Any]) -> ToolCallRecord:
    """One OpenAI-shaped tool call as its record (a missing field is empty)."""
    function = call.get("function") or {}
    return ToolCallRecord(
        id=str(call.get("id", "")),
        name=str(function.get("name", "")),
        arguments=str(function.get("arguments", "")),
    )


def _raw(message: ChatMessage, generation: int) -> msgspec.Raw:
    """``message``'s record (:func:`_to_record`) encoded on its own, to be copied as it is
    into a transcript's encoding (msgpack puts an array's items one after the other)."""
    return msgspec.Raw(_ENCODER.encode(_to_record(message, generation)))


def for_model(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Return ``messages`` as a model is sent them: without their generation tags."""
    return [
        {k: v for k, v in m.items() if k != GENERATION_TAG} if GENERATION_TAG in m else m
        for m in messages
    ]


def _to_chat(record: TranscriptMessage) -> ChatMessage:
    message: ChatMessage = {"role": record.role, "content": record.content}
    if record.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in record.tool_calls
        ]
    if record.tool_call_id is not None:
        message["tool_call_id"] = record.tool_call_id
    if record.name is not None:
        message["name"] = record.name
    if record.generation:
        message[GENERATION_TAG] = record.generation
    return message


def bound_at(
    messages: Sequence[ChatMessage],
    max_bytes: int,
    task_at: int | None,
    *,
    memo: TranscriptMemo | None = None,
) -> tuple[list[ChatMessage], int, int | None]:
    """Return ``messages`` cut to fit ``max_bytes``, the cut count, and the new index of
    the current task (``task_at``: its index in ``messages``).

    See :mod:`retinue.protocol.transcript_cut` for what the cut keeps: the current
    task, the step in progress, system messages and the chat's structure (no
    tool result without its call). ``memo``: the chat's sizes kept between
    calls (:class:`~retinue.protocol.transcript_memo.TranscriptMemo`).
    """
    return cut_transcript(messages, max_bytes, task_at, memo=memo)


def bound(
    messages: list[ChatMessage], max_bytes: int, task_at: int | None = None
) -> tuple[list[ChatMessage], int]:
    """Return ``messages`` cut to fit ``max_bytes`` (approximately, as encoded) and the cut count.

    Like :func:`bound_at` without the task's new index; with ``task_at`` None
    the current task is the last ``user`` message.
    """
    out, cut, _ = bound_at(messages, max_bytes, task_at)
    return out, cut


def repair_dangling(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Give every tool call without a result the 'in doubt' result (a crash mid-turn).

    A provider refuses a chat where an assistant's tool call has no result, so
    a transcript saved between a tool call and its answer is completed here:
    the call may or may not have taken effect, and the model is told so
    (:func:`~retinue.protocol.effects.in_doubt_result`, with no key). A
    journaled step's calls are settled by their effect class instead
    (:mod:`retinue.llm.turn._intents`); this is for calls stored without a
    journal (by an older retinue).
    """
    out: list[ChatMessage] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        out.append(message)
        index += 1
        wanted = [c.get("id") for c in message.get("tool_calls") or ()]
        if message.get("role") != "assistant" or not wanted:
            continue
        seen: set[Any] = set()
        while index < len(messages) and messages[index].get("role") == "tool":
            seen.add(messages[index].get("tool_call_id"))
            out.append(messages[index])
            index += 1
        for call in message.get("tool_calls") or ():
            call_id = call.get("id")
            if call_id not in seen:
                tool = str((call.get("function") or {}).get("name", "the tool"))
                result = {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": in_doubt_result(tool, None),
                }
                if GENERATION_TAG in message:  # the result of that step's generation
                    result[GENERATION_TAG] = message[GENERATION_TAG]
                out.append(result)
    return out


def unanswered_calls(messages: Sequence[ChatMessage]) -> list[Any]:
    """Return the tool calls of the last assistant message that have no result yet.

    That is the step a turn parked on (for approval) when its process stopped.
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "tool":
            continue
        if message.get("role") != "assistant":
            return []
        answered = {m.get("tool_call_id") for m in messages[index + 1 :]}
        return [c for c in message.get("tool_calls") or () if c.get("id") not in answered]
    return []


def encode_transcript(
    agent_id: str,
    messages: Sequence[ChatMessage],
    cut: int = 0,
    calls: Sequence[ModelCallRecord] = (),
    generation: int = 0,
    journal: ToolStep | None = None,
    *,
    memo: TranscriptMemo | None = None,
) -> bytes:
    """Encode a chat (without its system prompt), the times of its model ``calls`` and its
    tool calls' ``journal`` as a stored transcript record.

    A message keeps the generation it was loaded with (:func:`decode_transcript`
    tags it); the others were added by the turn ``generation``. ``memo`` keeps
    the messages' records between calls
    (:class:`~retinue.protocol.transcript_memo.TranscriptMemo`): only the
    messages added or changed since are converted again (the same bytes).
    """
    records: Sequence[TranscriptMessage | msgspec.Raw]
    if memo is None:
        records = [_to_record(m, generation) for m in messages]
    else:  # each message's record encoded once, then copied as it is (the same bytes)
        memo.hold(messages)
        records = _held_records(memo, generation)
    return _encode(agent_id, records, cut, calls, journal)


def _held_records(memo: TranscriptMemo, generation: int) -> list[msgspec.Raw]:
    """The encoded records of the messages ``memo`` holds (computed for those it lacks)."""
    return memo.held_column(("record", generation), lambda m: _raw(m, generation))


def _encode(
    agent_id: str,
    records: Sequence[TranscriptMessage | msgspec.Raw],
    cut: int,
    calls: Sequence[ModelCallRecord],
    journal: ToolStep | None,
) -> bytes:
    """The transcript record of ``records`` (messages, or their encodings), encoded."""
    record = TranscriptRecord(
        version=TRANSCRIPT_VERSION,
        agent_id=agent_id,
        messages=tuple(records),  # type: ignore[arg-type]  # records or their encodings
        cut=cut,
        calls=tuple(calls),
        journal=journal,
    )
    return _ENCODER.encode(record)


_CHAR_BYTES = 6
"""The most bytes :func:`~retinue.protocol.transcript_cut.message_size` writes one
character of a text in (an escape such as ``\\u001f``; UTF-8 takes at most 4)."""
_PLAIN_SIZE = 35
""":func:`~retinue.protocol.transcript_cut.message_size` of a plain message (a role and a
text content) less its two texts: ``{"role": "", "content": ""}`` and the 8 it adds."""


def _plain_records(
    messages: Sequence[ChatMessage], generation: int, max_bytes: int
) -> list[TranscriptMessage] | None:
    """The records of ``messages`` when each is plain (a role, not ``tool``, and a text
    content; a generation tag aside) and a cheap upper bound of their sizes says they fit
    ``max_bytes`` (nothing to cut: no tool result at all, so none without its call);
    else None.

    The bound: :func:`~retinue.protocol.transcript_cut.message_size` writes each
    character of a text in at most :data:`_CHAR_BYTES`, so a plain message is at
    most :data:`_PLAIN_SIZE` plus that per character of its texts.
    Each record is what :func:`_to_record` makes of the message.
    """
    records = []
    chars = 0
    for message in messages:
        role, content = message.get("role"), message.get("content")
        tag: Any = generation
        if len(message) != 2:
            tag = message.get(GENERATION_TAG)
            if len(message) != 3 or type(tag) is not int:
                return None
        if type(role) is not str or type(content) is not str or role == "tool":
            return None
        chars += len(role) + len(content)
        records.append(TranscriptMessage(role=role, content=content, generation=tag))
    if _CHAR_BYTES * chars + _PLAIN_SIZE * len(records) > max_bytes:
        return None
    return records


def stored_once(
    agent_id: str,
    messages: Sequence[ChatMessage],
    max_bytes: int,
    task_at: int | None,
    *,
    cut: int = 0,
    calls: Sequence[ModelCallRecord] = (),
    generation: int = 0,
    journal: ToolStep | None = None,
) -> bytes:
    """The encoded record :func:`stored_chat` (without a memo) stores for ``messages``, for
    a chat stored once, whose bounded messages nothing reads again (a one-call turn's)."""
    plain = _plain_records(messages, generation, max_bytes)
    if plain is not None:
        return _encode(agent_id, plain, cut, calls, journal)
    out, cuts, _ = cut_transcript(messages, max_bytes, task_at)  # as stored_chat's
    return encode_transcript(agent_id, out, cut + cuts, calls, generation, journal)


def stored_chat(
    agent_id: str,
    messages: Sequence[ChatMessage],
    max_bytes: int,
    task_at: int | None,
    *,
    cut: int = 0,
    calls: Sequence[ModelCallRecord] = (),
    generation: int = 0,
    journal: ToolStep | None = None,
    memo: TranscriptMemo | None = None,
) -> tuple[list[ChatMessage], int, int | None, bytes]:
    """What a model turn's step stores: ``messages`` bounded (:func:`bound_at`), then
    encoded (:func:`encode_transcript`) with the ``cut`` count so far plus this bound's.

    Returns the bounded messages, the new cut count, the task's new index and the
    encoded record. With the turn's ``memo``, a chat that fits is checked
    against the memo once for both (its new messages alone sized and encoded).
    """
    if memo is None:  # a chat stored once (a one-call turn's): its plain messages at once
        plain = _plain_records(messages, generation, max_bytes)
        if plain is not None:
            where = task_index(messages, task_at)
            return list(messages), cut, where, _encode(agent_id, plain, cut, calls, journal)
    elif fits(messages, max_bytes, memo):  # the memo holds messages
        out, where = list(messages), task_index(messages, task_at)
        return (
            out,
            cut,
            where,
            _encode(agent_id, _held_records(memo, generation), cut, calls, journal),
        )
    out, cuts, where = cut_transcript(messages, max_bytes, task_at, memo=memo)
    cut += cuts
    raw = encode_transcript(agent_id, out, cut, calls, generation, journal, memo=memo)
    return out, cut, where, raw


def decode_transcript(raw: bytes | None) -> tuple[list[ChatMessage], int]:
    """Decode a stored transcript into chat messages and its cut count.

    Each message is tagged with the generation that added it
    (:data:`GENERATION_TAG`; none for one stored before retinue kept it):
    :func:`encode_transcript` keeps it, :func:`for_model` leaves it out.

    An absent, undecodable or newer-version record gives an empty history
    (the agent starts over rather than fail on a record it cannot read).
    """
    if raw is None:
        return [], 0
    try:
        record = _DECODER.decode(raw)
    except msgspec.DecodeError:
        return [], 0
    if record.version > TRANSCRIPT_VERSION:
        return [], 0
    return [_to_chat(m) for m in record.messages], record.cut


def _record(raw: bytes | None) -> TranscriptRecord | None:
    """The stored transcript record, or None when absent, undecodable or of a newer version."""
    if raw is None:
        return None
    try:
        record = _DECODER.decode(raw)
    except msgspec.DecodeError:
        return None
    return record if record.version <= TRANSCRIPT_VERSION else None


def stored_transcript(
    raw: bytes | None,
) -> tuple[list[ChatMessage], int, list[ModelCallRecord], ToolStep | None]:
    """Return a stored transcript's messages and cut count (:func:`decode_transcript`), its
    model calls' times (:func:`stored_calls`) and its journal (:func:`stored_journal`),
    decoded once (an absent, undecodable or newer record: nothing of each)."""
    record = _record(raw)
    if record is None:
        return [], 0, [], None
    messages = [_to_chat(m) for m in record.messages]
    return messages, record.cut, list(record.calls), record.journal


def stored_calls(raw: bytes | None) -> list[ModelCallRecord]:
    """Return the model calls a stored transcript keeps the times of, oldest first (none
    when it is absent, undecodable or of a newer version, as :func:`decode_transcript`)."""
    record = _record(raw)
    return [] if record is None else list(record.calls)


def stored_journal(raw: bytes | None) -> ToolStep | None:
    """Return a stored transcript's tool-call journal (None: none, or a record that is
    absent, undecodable or of a newer version, as :func:`decode_transcript`)."""
    record = _record(raw)
    return None if record is None else record.journal


def timed_call(agent: AgentInfo, model: str, started: float, usage: Usage) -> ModelCallRecord:
    """Return the times of ``agent``'s call to ``model`` that started at ``started`` (epoch
    seconds) and answered now with ``usage``, in the turn the agent's snapshot shows."""
    return ModelCallRecord(
        model=model,
        generation=agent.generation,
        turn_started_at=agent.started_at,
        started_at=started,
        ended_at=time.time(),
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
    )
