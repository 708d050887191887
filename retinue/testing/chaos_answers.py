"""What the chaos model can answer: the kinds, their default weights, and each answer built.

An :class:`Answer` is pure data: the assistant message a provider would send
(OpenAI shape, as raw JSON would decode), or the raw ``choices`` it would send
instead, or the error it would fail with, and how long it takes. The litellm
side (:mod:`retinue.testing.chaos_provider`) turns it into litellm's response
or exception. :func:`build` makes one answer of a kind; every random choice
comes from the ``random.Random`` given.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from retinue.llm.model import minimal_result
from retinue.protocol.tools import COORDINATOR_TOOLS
from retinue.testing.chaos_args import Seen, arguments_for

__all__ = [
    "DEFAULT_WEIGHTS",
    "FAULT_KINDS",
    "FINAL_KINDS",
    "KINDS",
    "SURROGATE",
    "SURROGATE_KINDS",
    "TOOL_KINDS",
    "Answer",
    "build",
]

FINAL_KINDS = ("text", "lone_surrogate")
"""Answers that end a turn (no tool call)."""
TOOL_KINDS = (
    "tool_call",
    "parallel_calls",
    "malformed_json",
    "unknown_tool",
    "huge_arguments",
    "missing_id",
    "duplicate_ids",
    "surrogate_name",
    "surrogate_id",
    "surrogate_arguments",
)
"""Answers with tool calls (need tools offered)."""
SURROGATE_KINDS = ("lone_surrogate", "surrogate_name", "surrogate_id", "surrogate_arguments")
"""Answers with half an emoji (a lone surrogate) in their text, a tool's name, a call's id,
or the arguments of a call of a tool approvals may gate (any tool but the coordinator's)."""
FAULT_KINDS = (
    "content_parts",
    "empty_choices",
    "null_choices",
    "rate_limited",
    "server_error",
    "bad_request",
    "timeout",
    "hang",
)
"""Answers a provider fails with (an error, a hang, a response litellm cannot use)."""
KINDS = (*FINAL_KINDS, *TOOL_KINDS, *FAULT_KINDS, "slow")
"""Every kind of answer; ``slow`` is an ordinary answer delivered late."""

DEFAULT_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {
        "text": 14.0,
        "lone_surrogate": 2.0,
        "tool_call": 40.0,
        "parallel_calls": 8.0,
        "malformed_json": 3.0,
        "unknown_tool": 2.0,
        "huge_arguments": 2.0,
        "missing_id": 3.0,
        "duplicate_ids": 2.0,
        "surrogate_name": 1.5,
        "surrogate_id": 1.5,
        "surrogate_arguments": 2.0,
        "content_parts": 1.0,
        "empty_choices": 0.5,
        "null_choices": 1.0,
        "rate_limited": 4.0,
        "server_error": 3.0,
        "bad_request": 0.5,
        "timeout": 1.5,
        "hang": 1.0,
        "slow": 4.0,
    }
)
"""Relative weights: valid tool calls dominate, so turns get somewhere; faults are ~15%."""

UNKNOWN_TOOLS = ("delete_repository", "python", "browser.search", "READ_FILE", "read_file ", "")
MALFORMED = ('{"path": "a', "not json at all", "[]", "null", '{"path": }', '{"a": 1}{"b": 2}', "")
SERVER_STATUSES = (500, 502, 503, 504, 529)
RETRY_AFTER = ("0", "0.05", "0.3", "1", "-1", "soon", "Wed, 21 Oct 2015 07:28:00 GMT", None)
HUGE_BYTES = (70_000, 140_000, 300_000)
SURROGATE = "\ud83d"
"""Half of 😀 (U+1F600): a lone surrogate, which has no UTF-8 form."""


@dataclass(frozen=True)
class Answer:
    """One answer of the chaos model, before litellm sees it.

    ``message``: the assistant message (``content``, ``tool_calls``); else
    ``choices``: the raw choices sent instead (``[]``, None, a message with
    content parts); else ``status``: the HTTP status the call fails with
    (``retry_after`` its header, ``"timeout"`` for a client timeout). ``delay_s``
    passes before it arrives; ``hang`` means it never arrives by itself.
    """

    kind: str
    message: Mapping[str, Any] | None = None
    choices: Any = None
    status: int | str | None = None
    retry_after: str | None = None
    delay_s: float = 0.0
    hang: bool = False


TOOL_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {"spawn_subagent": 4.0, "spawn_subagents": 4.0, "wait_agent": 2.0}
)
"""How much likelier than another tool a valid call is to use these (trees get built)."""


def _pick(rng: random.Random, tools: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """One of the offered tools, spawns and waits favoured."""
    weights = [TOOL_WEIGHTS.get(str((t.get("function") or {}).get("name")), 1.0) for t in tools]
    return rng.choices(list(tools), weights)[0]


def _call(rng: random.Random, tool: Mapping[str, Any], seen: Seen, tag: str) -> dict[str, Any]:
    name = str((tool.get("function") or {}).get("name", ""))
    return {
        "id": f"call_{tag}_{rng.randrange(16**6):06x}",
        "type": "function",
        "function": {"name": name, "arguments": arguments_for(tool, rng, seen, tag)},
    }


def _calls(message_calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": message_calls}


def _structured(rng: random.Random, text: str) -> str:
    """A structured result for ``text``: valid mostly; sometimes broken or near the bound."""
    body = minimal_result(text)
    roll = rng.random()
    if roll < 0.08:
        del body["claims"]  # breaks the contract: a repair request follows
    elif roll < 0.12:
        body["summary"] = text + " " + "r" * 50_900  # near the 51,200-byte bound
    elif roll < 0.16:
        return "Here is my result: " + json.dumps(body)  # prose around it
    return json.dumps(body, ensure_ascii=False)


def final_text(rng: random.Random, tag: str, structured: bool, surrogate: bool = False) -> str:
    """The text of a final answer (a structured result when the system prompt asks for one)."""
    text = rng.choice(("Done.", "All checked: nothing to fix.", "Résumé: 3 findings 🚩", ""))
    text = f"{text} [{tag}]"
    if surrogate:
        text += f" half an emoji: {SURROGATE}"
    elif rng.random() < 0.03:
        text += " " + "long " * 12_000  # an output past Limits.output_max_bytes
    return _structured(rng, text) if structured else text


def _tool_answer(
    kind: str, rng: random.Random, tools: Sequence[Mapping[str, Any]], seen: Seen, tag: str
) -> Answer:
    """An answer with tool calls, of ``kind`` (one of :data:`TOOL_KINDS`)."""
    one = _call(rng, _pick(rng, tools), seen, tag)
    if kind == "parallel_calls":
        calls = [
            _call(rng, _pick(rng, tools), seen, f"{tag}p{i}") for i in range(rng.randint(2, 4))
        ]
        return Answer(kind, _calls(calls))
    if kind == "malformed_json":
        one["function"]["arguments"] = rng.choice(MALFORMED)
    elif kind == "unknown_tool":
        one["function"]["name"] = rng.choice(UNKNOWN_TOOLS)
    elif kind == "huge_arguments":
        args = json.loads(one["function"]["arguments"]) or {}
        keys = [k for k, v in args.items() if isinstance(v, str)] or ["padding"]
        args[rng.choice(keys)] = "h" * rng.choice(HUGE_BYTES)
        one["function"]["arguments"] = json.dumps(args)
    elif kind == "missing_id":
        del one["id"]
    elif kind == "duplicate_ids":
        twin = _call(rng, _pick(rng, tools), seen, f"{tag}d")
        twin["id"] = one["id"]
        return Answer(kind, _calls([one, twin]))
    elif kind in SURROGATE_KINDS:
        return Answer(kind, _calls(_half_emoji(kind, rng, tools, seen, tag)))
    return Answer(kind, _calls([one]))


def _half_emoji(
    kind: str, rng: random.Random, tools: Sequence[Mapping[str, Any]], seen: Seen, tag: str
) -> list[dict[str, Any]]:
    """Tool calls with half an emoji in a tool's name, a call's id, or a call's arguments.

    ``surrogate_name``: an offered tool's name with it inside. ``surrogate_id``:
    a call's id ending in it, and sometimes a second call whose id is that
    one with the surrogate's escape written out (``\\ud83d``: the same text
    once escaped). ``surrogate_arguments``: a valid call of an offered tool that
    approvals may gate (not a coordinator tool, when one is offered), a string
    argument (or a new ``note``) ending in it, the JSON text holding it raw as a
    provider's decoded JSON does.
    """
    if kind == "surrogate_name":
        one = _call(rng, _pick(rng, tools), seen, tag)
        name = one["function"]["name"]
        cut = rng.randint(0, len(name))
        one["function"]["name"] = name[:cut] + SURROGATE + name[cut:]
        return [one]
    if kind == "surrogate_id":
        one = _call(rng, _pick(rng, tools), seen, tag)
        one["id"] += SURROGATE
        if rng.random() >= 0.3:
            return [one]
        twin = _call(rng, _pick(rng, tools), seen, f"{tag}e")
        twin["id"] = one["id"].replace(SURROGATE, "\\ud83d")
        return [one, twin]
    gateable = [t for t in tools if _name(t) not in COORDINATOR_TOOLS] or list(tools)
    one = _call(rng, rng.choice(gateable), seen, tag)
    args = json.loads(one["function"]["arguments"]) or {}
    keys = [k for k, v in args.items() if isinstance(v, str)] or ["note"]
    key = rng.choice(keys)
    args[key] = f"{args.get(key, '')} half an emoji {SURROGATE}"
    one["function"]["arguments"] = json.dumps(args, ensure_ascii=False)
    return [one]


def _name(tool: Mapping[str, Any]) -> str:
    return str((tool.get("function") or {}).get("name", ""))


def _fault(kind: str, rng: random.Random, tag: str) -> Answer:
    """An answer of one of :data:`FAULT_KINDS`."""
    if kind == "content_parts":
        parts = [{"type": "text", "text": f"in parts [{tag}]"}]
        message = {"role": "assistant", "content": parts}
        return Answer(kind, choices=[{"index": 0, "finish_reason": "stop", "message": message}])
    if kind == "empty_choices":
        return Answer(kind, choices=[])
    if kind == "null_choices":
        return Answer(kind, choices=None)
    if kind == "rate_limited":
        return Answer(kind, status=429, retry_after=rng.choice(RETRY_AFTER))
    if kind == "server_error":
        return Answer(kind, status=rng.choice(SERVER_STATUSES))
    if kind == "bad_request":
        return Answer(kind, status=400)
    if kind == "timeout":
        return Answer(kind, status="timeout")
    late = {"role": "assistant", "content": f"too late [{tag}]"}
    return Answer(kind, late, hang=True)  # "hang": an answer that comes after any deadline


def build(
    kind: str,
    rng: random.Random,
    *,
    tools: Sequence[Mapping[str, Any]],
    seen: Seen,
    tag: str,
    structured: bool,
) -> Answer:
    """Return one answer of ``kind`` to a request offering ``tools``.

    A tool kind with no tools offered answers with text instead.

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS` (``slow`` is chosen by the caller).
    """
    if kind in TOOL_KINDS and tools:
        return _tool_answer(kind, rng, tools, seen, tag)
    if kind in FAULT_KINDS:
        return _fault(kind, rng, tag)
    if kind in (*FINAL_KINDS, *TOOL_KINDS):
        surrogate = kind == "lone_surrogate"
        text = final_text(rng, tag, structured, surrogate)
        return Answer(
            kind if kind in FINAL_KINDS else "text", {"role": "assistant", "content": text}
        )
    raise ValueError(f"unknown chaos answer kind {kind!r}; the kinds: {', '.join(KINDS)}")
