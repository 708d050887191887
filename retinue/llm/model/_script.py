"""The offline model's script: a deterministic answer to a chat, given the tools offered.

:func:`script_reply` is pure (no litellm): it reads the OpenAI-shaped
``messages`` and ``tools`` and returns the assistant message the scripted
model answers with. The rules:

- a *lead* (``spawn_subagents`` offered) that has not delegated yet in this
  exchange delegates the task to every profile in the tool's ``agent`` enum,
  in one ``spawn_subagents`` call, each child named after its profile; once
  the results are back it answers with a summary built from its children's
  outputs;
- an agent woken by its children's completions summarises them;
- a *leaf* with read tools lists the workspace (``list_dir``), reads up to five
  files (``read_file``), then answers from their first lines;
- any other leaf answers ``Done: <task>``;
- when the system prompt asks for the structured result contract, every final
  answer is a minimal valid structured result carrying that text as its summary.

Every tool call's id is unique in the chat: ``call_<step>_<index>_<tool>``, the
step counting the assistant messages before it (a real provider's ids are
unique too; a chat with two calls of one id loses one's result).

"This exchange" is everything after the last ``user`` message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from retinue.protocol.results import RESULT_VERSION

__all__ = [
    "MAX_FILES_READ",
    "SCRIPTED_MODEL",
    "SCRIPTED_PROVIDER",
    "count_tokens",
    "minimal_result",
    "reply_deltas",
    "script_reply",
]

SCRIPTED_PROVIDER = "retinue"
"""The litellm custom provider name of the offline model."""
SCRIPTED_MODEL = "retinue/scripted"
"""The offline, deterministic model: no key, no network."""

MAX_FILES_READ = 5
"""Most files a scripted leaf reads."""

Msg = Mapping[str, Any]


def count_tokens(text: str) -> int:
    """Return the scripted model's token count of ``text``: one per 4 characters, at least 1."""
    return max(1, len(text) // 4)


def _text(message: Msg) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _tool_names(tools: Sequence[Msg]) -> set[str]:
    names: set[str] = set()
    for tool in tools:
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def _find_enum(schema: Any, key: str) -> list[str] | None:
    """Return the ``enum`` of the first property named ``key`` anywhere in ``schema``."""
    if isinstance(schema, Mapping):
        props = schema.get("properties")
        if isinstance(props, Mapping) and isinstance(props.get(key), Mapping):
            enum = props[key].get("enum")
            if isinstance(enum, list):
                return [str(e) for e in enum]
        for value in schema.values():
            found = _find_enum(value, key)
            if found is not None:
                return found
    elif isinstance(schema, list):
        for value in schema:
            found = _find_enum(value, key)
            if found is not None:
                return found
    return None


def _spawnable(tools: Sequence[Msg]) -> list[str]:
    for tool in tools:
        function = tool.get("function")
        if isinstance(function, Mapping) and function.get("name") == "spawn_subagents":
            return _find_enum(function.get("parameters"), "agent") or []
    return []


def _call(step: int, index: int, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{step}_{index}_{name}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def _tool_results(exchange: Sequence[Msg]) -> Iterator[tuple[str, str]]:
    """Yield ``(tool name, result text)`` for the tool results of the exchange, in order."""
    names: dict[str, str] = {}
    for message in exchange:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                names[str(call.get("id"))] = str(function.get("name"))
        elif message.get("role") == "tool":
            name = message.get("name") or names.get(str(message.get("tool_call_id")), "")
            yield str(name), _text(message)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _summarise_spawn(task: str, result_text: str) -> str:
    data = _loads(result_text)
    if isinstance(data, Mapping):
        data = data.get("results", [data])
    if not isinstance(data, list):
        return (
            f"Summary for {_one_line(task)}: delegation gave no results ({_one_line(result_text)})"
        )
    lines = [f"Summary of {len(data)} subagent results for: {_one_line(task)}"]
    for index, entry in enumerate(data):
        if not isinstance(entry, Mapping):
            lines.append(f"- [{index}] {_one_line(str(entry))}")
        elif "error" in entry:
            lines.append(f"- [{index}] error: {_one_line(str(entry['error']))}")
        else:
            path = entry.get("path", f"[{index}]")
            status = entry.get("status", "?")
            body = entry.get("output") if entry.get("output") is not None else entry.get("error")
            lines.append(f"- {path} ({status}): {_one_line(str(body))}")
    return "\n".join(lines)


def _entries(listing: Any) -> list[tuple[str, bool]]:
    """Return ``(name, is_dir)`` pairs from a ``list_dir`` result, whatever its exact shape."""
    if isinstance(listing, Mapping):
        for key in ("entries", "items", "files", "result"):
            if key in listing:
                return _entries(listing[key])
        return []
    if isinstance(listing, str):
        return [(line.strip(), line.strip().endswith("/")) for line in listing.splitlines()]
    pairs: list[tuple[str, bool]] = []
    if isinstance(listing, list):
        for item in listing:
            if isinstance(item, str):
                pairs.append((item, item.endswith("/")))
            elif isinstance(item, Mapping) and isinstance(
                item.get("name") or item.get("path"), str
            ):
                name = str(item.get("name") or item.get("path"))
                kind = str(item.get("type") or item.get("kind") or "")
                pairs.append((name, kind.startswith("dir") or bool(item.get("is_dir"))))
    return pairs


def minimal_result(summary: str) -> dict[str, Any]:
    """The smallest valid structured result (completed, every list empty) with ``summary``."""
    return {
        "version": RESULT_VERSION,
        "status": "completed",
        "summary": summary,
        "claims": [],
        "artifacts": [],
        "changes": [],
        "verification": [],
        "limitations": [],
        "unresolved_dependencies": [],
    }


def _final(text: str, structured: bool) -> dict[str, Any]:
    if structured:
        text = json.dumps(minimal_result(text[:4000]), ensure_ascii=False)
    return {"role": "assistant", "content": text}


def script_reply(messages: Sequence[Msg], tools: Sequence[Msg] = ()) -> dict[str, Any]:
    """Return the scripted model's assistant message for ``messages`` with ``tools`` offered.

    The message has either ``tool_calls`` (OpenAI shape) or a text ``content``.
    """
    structured = any(m.get("role") == "system" and RESULT_VERSION in _text(m) for m in messages)
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    task = _text(messages[last_user]) if last_user >= 0 else ""
    exchange = list(messages[last_user + 1 :])
    step = sum(1 for m in messages if m.get("role") == "assistant")
    results = list(_tool_results(exchange))
    names = _tool_names(tools)
    spawned = [text for name, text in results if name == "spawn_subagents"]
    if spawned:
        return _final(_summarise_spawn(task, spawned[-1]), structured)
    if "[subagent:" in task:
        lines = [line for line in task.splitlines() if line.startswith("[subagent:")]
        return _final(f"Summary of {len(lines)} completions:\n" + "\n".join(lines), structured)
    agents = _spawnable(tools)
    if agents and not results:
        # Each child is named after its role, so its path reads /root/review/security.
        batch = [{"agent": agent, "message": task, "task_name": agent} for agent in agents]
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call(step, 0, "spawn_subagents", {"tasks": batch})],
        }
    if "list_dir" in names:
        listed = [text for name, text in results if name == "list_dir"]
        reads = [text for name, text in results if name == "read_file"]
        if not listed:
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call(step, 0, "list_dir", {"path": "."})],
            }
        if not reads and "read_file" in names:
            files = sorted(
                n for n, is_dir in _entries(_loads(listed[-1]) or listed[-1]) if not is_dir
            )
            files = [f for f in files if f][:MAX_FILES_READ]
            if files:
                return {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        _call(step, i, "read_file", {"path": f}) for i, f in enumerate(files)
                    ],
                }
        if reads:
            firsts = []
            for text in reads:
                data = _loads(text)
                content = data.get("content", text) if isinstance(data, Mapping) else text
                firsts.append(_one_line(str(content).strip().split("\n", 1)[0], 80))
            return _final(
                f"Done: {_one_line(task)} (read {len(reads)} files: " + "; ".join(firsts) + ")",
                structured,
            )
        return _final(f"Done: {_one_line(task)} (the workspace has no files to read)", structured)
    return _final(f"Done: {_one_line(task)}", structured)


def reply_deltas(reply: Msg, piece: int = 8) -> list[dict[str, Any]]:
    """Return an assistant message as the deltas of an OpenAI stream.

    The role first, then the text in pieces of ``piece`` characters, then each
    tool call: its index, id and name, then its arguments in pieces (what the
    offline model and :class:`~retinue.testing.OpenAIStub` stream, and what a
    streamed answer is assembled from).
    """
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    content = reply.get("content")
    if isinstance(content, str):
        deltas += [{"content": content[i : i + piece]} for i in range(0, len(content), piece)]
    for index, call in enumerate(reply.get("tool_calls") or []):
        function = call.get("function") or {}
        head = {"index": index, "id": call.get("id"), "type": "function"}
        head["function"] = {"name": function.get("name"), "arguments": ""}
        deltas.append({"tool_calls": [head]})
        arguments = str(function.get("arguments") or "")
        deltas += [
            {"tool_calls": [{"index": index, "function": {"arguments": arguments[i : i + piece]}}]}
            for i in range(0, len(arguments), piece)
        ]
    return deltas
