"""What the web view shows of an agent: one JSON-ready row, its detail, the tool it is calling.

Everything here is plain data built from the public read API
(:class:`~retinue.protocol.messages.AgentInfo`,
:class:`~retinue.protocol.details.AgentDetail`). Fields the supervision work
adds to ``AgentInfo`` (the attempt, the last error, the restart's due time) are
read with ``getattr``, so a store written before them shows ``None``. Text is
sent as it is (the page escapes it by building the DOM with ``textContent``);
only its length is bounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from retinue.protocol.details import AgentDetail, InDoubtCall
from retinue.protocol.messages import AgentInfo, Completion, Message
from retinue.protocol.records import TranscriptMessage
from retinue.protocol.supervision import ApprovalRequest

__all__ = [
    "DUE_FIELDS",
    "PREVIEW_CHARS",
    "TEXT_CHARS",
    "Row",
    "approval_payload",
    "clip_text",
    "detail_payload",
    "row_of",
    "tool_in_progress",
]

PREVIEW_CHARS = 200
"""Characters of an output, error or task shown in a tree row."""
TEXT_CHARS = 20_000
"""Characters of one text shown in an agent's detail (task, output, a message)."""
DUE_FIELDS = ("restart_due_at", "restart_at", "next_attempt_at", "due_at")
"""``AgentInfo`` attributes that may carry a pending restart's due time (the first set wins)."""

Row = dict[str, Any]


def clip_text(text: str | None, limit: int) -> str | None:
    """Return ``text`` cut to ``limit`` characters with a visible ``…`` (None stays None)."""
    if text is None or len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + "…"


def _due(info: AgentInfo) -> float | None:
    for name in DUE_FIELDS:
        value = getattr(info, name, None)
        if isinstance(value, int | float):
            return float(value)
    return None


def _text_attr(info: AgentInfo, name: str) -> str | None:
    value = getattr(info, name, None)
    return value if isinstance(value, str) else None


def _attempt(info: AgentInfo) -> int | None:
    value = getattr(info, "attempt", None)
    return value if isinstance(value, int) else None


def row_of(
    info: AgentInfo,
    parent: str,
    kids: int,
    kids_all: int,
    tool: str | None,
    below: tuple[int, int] = (0, 0),
) -> Row:
    """Return the tree row of one agent.

    ``parent`` is the parent's id (``""`` for a top-level agent), ``kids`` its
    live children, ``kids_all`` its children closed ones included, ``tool`` the
    tool call in progress when known, ``below`` how many agents under it (not
    itself) are ``failed`` and ``awaiting_approval``.
    """
    state = str(info.state)
    usage = info.usage
    tree = info.tree_usage
    text = info.error if state == "failed" else info.output
    return {
        "id": info.id,
        "path": info.path,
        "name": info.name,
        "parent": parent,
        "profile": info.profile,
        "state": state,
        "generation": info.generation,
        "created_at": info.created_at,
        "updated_at": info.updated_at,
        "started_at": info.started_at,
        "tokens": usage.prompt_tokens + usage.completion_tokens,
        "cost_usd": usage.cost_usd,
        "tree_tokens": None if tree is None else tree.prompt_tokens + tree.completion_tokens,
        "tree_cost_usd": None if tree is None else tree.cost_usd,
        "kids": kids,
        "kids_all": kids_all,
        "attempt": _attempt(info),
        "last_error": clip_text(_text_attr(info, "last_error"), 300),
        "due_at": _due(info),
        "tool": tool,
        "in_doubt": info.in_doubt,
        "result": clip_text(text, PREVIEW_CHARS),
        "failed_below": below[0],
        "waiting_below": below[1],
        "forked_from": _forked_from(info),
    }


def _forked_from(info: AgentInfo) -> dict[str, Any] | None:
    """A fork's origin for the page: its path and the generation it was forked as of."""
    origin = getattr(info, "forked_from", None)
    if origin is None:
        return None
    return {"path": origin.path, "generation": origin.generation}


def tool_in_progress(transcript: Sequence[TranscriptMessage]) -> str | None:
    """Return the tool calls a transcript's last step started and has no result for.

    The LLM runner stores the model's answer with its tool calls before it runs
    them, and the results after, so a running agent whose transcript ends in
    unanswered calls is running those tools. Returns ``"read_file, grep"``-like
    text (at most three names), or None.
    """
    answered: set[str] = set()
    for message in reversed(transcript):
        if message.role == "tool":
            if message.tool_call_id is not None:
                answered.add(message.tool_call_id)
            continue
        if message.role != "assistant":
            return None
        waiting = [call.name for call in message.tool_calls if call.id not in answered]
        if not waiting:
            return None
        more = f" +{len(waiting) - 3}" if len(waiting) > 3 else ""
        return ", ".join(waiting[:3]) + more
    return None


def _message(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "kind": message.kind,
        "sender": message.sender,
        "content": clip_text(message.content, TEXT_CHARS),
        "created_at": message.created_at,
    }


def _completion(completion: Completion) -> dict[str, Any]:
    return {
        "id": completion.id,
        "path": completion.path,
        "generation": completion.generation,
        "status": str(completion.status),
        "output": clip_text(completion.output, TEXT_CHARS),
        "error": clip_text(completion.error, TEXT_CHARS),
        "created_at": completion.created_at,
    }


def _entry(message: TranscriptMessage) -> dict[str, Any]:
    return {
        "role": message.role,
        "content": clip_text(message.content, TEXT_CHARS),
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": clip_text(c.arguments, 2000)}
            for c in message.tool_calls
        ],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
    }


def detail_payload(detail: AgentDetail, row: Row | None, tool: str | None) -> dict[str, Any]:
    """Return an agent's detail for the page: its row, full texts, mailbox, transcript tail.

    ``row`` is the agent's tree row when the live snapshot has it (for its
    parent and children counts); ``tool`` the tool call in progress when known
    from events, else it is read from the transcript.
    """
    info = detail.info
    base = row if row is not None else row_of(info, "", 0, 0, None)
    running = str(info.state) == "running"
    found = tool or (tool_in_progress(detail.transcript) if running else None)
    return {
        **base,
        "tool": found,
        "task": clip_text(info.task, TEXT_CHARS),
        "output": clip_text(info.output, TEXT_CHARS),
        "error": clip_text(info.error, TEXT_CHARS),
        "last_error": clip_text(_text_attr(info, "last_error"), TEXT_CHARS),
        "usage": msgspec.to_builtins(info.usage),
        "tree_usage": None if info.tree_usage is None else msgspec.to_builtins(info.tree_usage),
        "unread": [_message(m) for m in detail.unread],
        "pending": [_completion(c) for c in detail.pending],
        "transcript": [_entry(m) for m in detail.transcript],
        "transcript_length": detail.transcript_length,
        "transcript_cut": detail.transcript_cut,
        "in_doubt_calls": [_in_doubt(c) for c in detail.in_doubt],
    }


def _in_doubt(call: InDoubtCall) -> dict[str, Any]:
    """A tool call in doubt for the page (it may or may not have taken effect)."""
    return {
        "call_id": call.call_id,
        "tool": call.tool,
        "effect": call.effect,
        "idempotency_key": call.idempotency_key,
        "attempt": call.attempt,
        "arguments": clip_text(call.arguments, 2000),
        "awaiting_approval": call.awaiting_approval,
    }


def approval_payload(request: ApprovalRequest) -> dict[str, Any]:
    """Return a pending approval request for the agent's detail (its arguments clipped)."""
    return {
        "id": request.id,
        "tool": request.tool,
        "arguments": clip_text(request.arguments, 2000),
        "requested_at": request.requested_at,
        "expires_at": request.expires_at,
        "generation": request.generation,
        "in_doubt": request.in_doubt,
        "idempotency_key": request.idempotency_key,
    }
