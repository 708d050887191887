"""Content on spans, only when the host opts in: chats and answers in the conventions' shape.

The GenAI conventions record messages as ``{"role", "parts": [...]}`` (text,
``tool_call`` and ``tool_call_response`` parts; an output message adds its
``finish_reason``), serialised to JSON on spans. Each text in them (a
message's content, a call's arguments, a result) is cut at the runtime's
``Limits.trace_content_max_bytes`` with a marker, so the JSON stays whole; a
plain value (a tool call's arguments or result) is cut the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from retinue.protocol.text import bounded_text

__all__ = ["bounded_json", "input_messages", "output_messages", "system_instructions"]


def bounded_json(value: Any, limit: int) -> str:
    """``value`` as JSON text with every string in it cut at ``limit`` bytes (a str: cut)."""
    if isinstance(value, str):
        return bounded_text(value, limit)
    return json.dumps(_cut(value, limit), ensure_ascii=False, default=str)


def _cut(value: Any, limit: int) -> Any:
    """``value`` with each string in it cut at ``limit`` bytes of UTF-8."""
    if isinstance(value, str):
        return bounded_text(value, limit)
    if isinstance(value, Mapping):
        return {k: _cut(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cut(v, limit) for v in value]
    return value


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    """One chat message in the conventions' shape: its role and parts."""
    role = str(message.get("role") or "user")
    parts: list[dict[str, Any]] = []
    content = message.get("content")
    if role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": message.get("tool_call_id"), "result": content}
        )
    elif content:
        text = content if isinstance(content, str) else str(content)
        parts.append({"type": "text", "content": text})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    return {"role": role, "parts": parts}


def system_instructions(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The system messages of a chat as the conventions' instruction parts."""
    return [
        {"type": "text", "content": str(m.get("content") or "")}
        for m in messages
        if m.get("role") == "system"
    ]


def input_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The chat sent (its system messages left to :func:`system_instructions`)."""
    return [_message(m) for m in messages if m.get("role") != "system"]


def output_messages(choices: Sequence[Any], reasons: Sequence[str]) -> list[dict[str, Any]]:
    """The answer's choices (litellm's) as the conventions' output messages."""
    out = []
    for choice, reason in zip(choices, reasons, strict=True):
        message = getattr(choice, "message", None)
        entry = {
            "role": getattr(message, "role", None) or "assistant",
            "content": getattr(message, "content", None),
        }
        calls = getattr(message, "tool_calls", None) or []
        if calls:
            entry["tool_calls"] = [
                {
                    "id": c.id,
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in calls
            ]
        shaped = _message(entry)
        shaped["finish_reason"] = reason
        out.append(shaped)
    return out
