"""Tool-call arguments for the chaos model: valid for the offered schema, hostile in meaning.

:func:`arguments_for` builds one call's arguments from the tool's JSON schema
(as offered in the request's ``tools``): every required property, some of the
optional ones, each value of its schema's type, enum, pattern and bounds, so
the call decodes. The values are drawn to hurt: paths the model has seen in
earlier results next to ``..``, absolute paths, FIFOs, symlink loops and
missing files; grep patterns that backtrack catastrophically; bash commands
that redirect their output, sleep, read a FIFO or start background work;
agent references that exist, are closed, or never existed. :class:`Seen`
collects what earlier tool results showed (paths, agent names and paths).

Pure: no litellm, no I/O; every choice comes from the ``random.Random`` given.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Seen", "arguments_for", "seen_in"]

MAX_SEEN = 64
"""Most paths (and agents) :class:`Seen` keeps of each kind."""

HOSTILE_PATHS = (
    ".",
    "",
    "..",
    "../outside.txt",
    "/etc/passwd",
    "~/secret",
    "missing/nothing.txt",
    "a\\..\\..\\x",
    "C:/Windows",
    "./././.",
    "x" * 300,
    "chaos_fifo",
    "chaos_loop",
    "chaos_out",
    "chaos_outdir/canary.txt",
    "chaos_dir/a",
)
"""Paths no workspace tool may follow out of its folder (or that do not exist)."""

GREP_PATTERNS = ("def ", "TODO|FIXME", "(a+)+$", "(x+x+)+y", "[", "^", "é|ü", ".*", "\\bsecret\\b")
FIND_PATTERNS = ("*", "*.py", "*.md", "**/*", "*/*", "[", "*loop*", "*fifo*", "")
BASH_COMMANDS = (
    "ls -la",
    "cat *.md | head -n 5",
    "echo chaos > chaos_out.txt 2>&1",
    "sleep 30 > /dev/null 2>&1",
    "exec > /dev/null; sleep 30",
    "sleep 30 &",
    "yes | head -c 200000",
    "printf '\\xff\\xfe\\xfd'",
    "cat chaos_fifo",
    "false",
    "kill -9 $$",
    "ulimit -a",
)
REF_NAMES = ("nobody", "/root", "..", "/root/nobody/else", "0123456789abcdef", "", " ")

_NAME_CHARS = string.ascii_lowercase + string.digits + "_"


@dataclass
class Seen:
    """What earlier tool results showed: workspace paths and agents (names and paths)."""

    paths: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)

    def add_path(self, path: str) -> None:
        """Remember a workspace path (at most :data:`MAX_SEEN`)."""
        if path not in self.paths and len(self.paths) < MAX_SEEN:
            self.paths.append(path)

    def add_agent(self, ref: str) -> None:
        """Remember an agent name or path (at most :data:`MAX_SEEN`)."""
        if ref not in self.agents and len(self.agents) < MAX_SEEN:
            self.agents.append(ref)


def _join(folder: str, name: str) -> str:
    return name if folder in ("", ".") else f"{folder.rstrip('/')}/{name}"


def _collect(data: Any, seen: Seen, depth: int = 0) -> None:
    """Walk one decoded tool result and note the paths and agents it names."""
    if depth > 6:
        return
    if isinstance(data, list):
        for item in data[:200]:
            _collect(item, seen, depth + 1)
        return
    if not isinstance(data, Mapping):
        return
    path = data.get("path")
    if isinstance(path, str):
        (seen.add_agent if path.startswith("/root") else seen.add_path)(path)
    for entry in data.get("entries") or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            seen.add_path(_join(str(path or "."), entry["name"]))
    for found in data.get("paths") or ():
        if isinstance(found, str):
            seen.add_path(found.rstrip("/"))
    name = data.get("name")
    if isinstance(name, str) and isinstance(data.get("agent"), str):
        seen.add_agent(name)
    for key in ("results", "agents", "matches", "skipped", "closed"):
        if key in data:
            _collect(data[key], seen, depth + 1)


def seen_in(messages: Sequence[Mapping[str, Any]]) -> Seen:
    """Return what the tool results of ``messages`` showed (paths, agents), in order."""
    seen = Seen()
    for message in messages:
        if message.get("role") != "tool" or not isinstance(message.get("content"), str):
            continue
        try:
            data = json.loads(message["content"])
        except ValueError:
            continue
        _collect(data, seen)
    return seen


def _name(rng: random.Random, pattern: str | None, max_length: int | None) -> str:
    """A string for a ``pattern``-restricted property (names: ``[a-z0-9_]+``)."""
    size = rng.randint(1, min(12, max_length or 12))
    if pattern and re.fullmatch(r"\^?\[a-z0-9_\]\+\$?", pattern):
        return "".join(rng.choice(_NAME_CHARS) for _ in range(size))
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(size))


def _text(rng: random.Random, tag: str) -> str:
    """A short free text, sometimes in other scripts, always naming ``tag`` (unique per call)."""
    pieces = (
        "check the module",
        "vérifie ça",
        "проверь",
        "検査して",
        "look 👀 closer",
        "edge cases",
    )
    return f"chaos {tag}: {rng.choice(pieces)}"


def _hinted(tool: str, prop: str, rng: random.Random, seen: Seen, tag: str) -> Any:
    """A hostile value for a property whose name says what it is; ``...`` if none applies."""
    if prop == "path":
        return rng.choice([*seen.paths, *seen.paths, *HOSTILE_PATHS])
    if prop == "pattern":
        return rng.choice(GREP_PATTERNS if tool == "grep" else FIND_PATTERNS)
    if prop == "command":
        return rng.choice(BASH_COMMANDS)
    if prop == "timeout_s":
        return round(rng.uniform(0.2, 2.0), 2)
    if prop == "timeout_ms":
        return rng.choice((0, 10, 200, 1000, 2000))
    if prop in ("to", "agent") and tool not in ("spawn_subagent", "spawn_task"):
        return rng.choice([*seen.agents, *seen.agents, *REF_NAMES])
    if prop in ("message", "content", "new_text"):
        return _text(rng, tag)
    if prop == "old_text":
        return rng.choice(("def ", "import", "chaos", "\n", "x" * 40))
    if prop == "max_results":
        return rng.randint(1, 50)
    return ...


def _string(schema: Mapping[str, Any], rng: random.Random, tag: str) -> str:
    min_length = int(schema.get("minLength", 0) or 0)
    max_length = schema.get("maxLength")
    pattern = schema.get("pattern")
    value = _name(rng, str(pattern), max_length) if pattern else _text(rng, tag)
    if len(value) < min_length:
        value += "x" * (min_length - len(value))
    if isinstance(max_length, int) and len(value) > max_length:
        value = value[:max_length]
    return value


def _number(schema: Mapping[str, Any], rng: random.Random, integer: bool) -> int | float:
    low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
    high = schema.get("maximum", schema.get("exclusiveMaximum", low + 100))
    if "exclusiveMinimum" in schema:
        low = low + (1 if integer else 0.01)
    if "exclusiveMaximum" in schema:
        high = high - (1 if integer else 0.01)
    high = max(low, min(high, low + 100))
    if integer:
        return rng.randint(int(low), int(high))
    return round(rng.uniform(float(low), float(high)), 3)


def value_for(
    schema: Any, rng: random.Random, seen: Seen, *, tool: str, prop: str, tag: str, depth: int = 0
) -> Any:
    """A value valid for ``schema`` (of property ``prop`` of ``tool``), hostile where it can be."""
    if not isinstance(schema, Mapping) or depth > 5:
        return None
    if schema.get("enum"):
        return rng.choice(list(schema["enum"]))
    if "const" in schema:
        return schema["const"]
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(options, list) and options:
        chosen = rng.choice([o for o in options if o != {"type": "null"}] or options)
        return value_for(chosen, rng, seen, tool=tool, prop=prop, tag=tag, depth=depth + 1)
    hinted = _hinted(tool, prop, rng, seen, tag)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    fits = kind in ("integer", "number", None) or (kind == "string" and isinstance(hinted, str))
    if hinted is not ... and fits:
        return hinted
    if kind == "object" or "properties" in schema:
        return _object(schema, rng, seen, tool=tool, tag=tag, depth=depth)
    if kind == "array":
        items = schema.get("items", {})
        low = int(schema.get("minItems", 0) or 0)
        high = max(low, min(int(schema.get("maxItems", low + 3) or 0), low + 3))
        return [
            value_for(items, rng, seen, tool=tool, prop=prop, tag=f"{tag}.{i}", depth=depth + 1)
            for i in range(rng.randint(low, high))
        ]
    if kind == "string":
        return _string(schema, rng, tag)
    if kind in ("integer", "number"):
        return _number(schema, rng, kind == "integer")
    if kind == "boolean":
        return rng.random() < 0.5
    return None


def _object(
    schema: Mapping[str, Any], rng: random.Random, seen: Seen, *, tool: str, tag: str, depth: int
) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    inner = "spawn_task" if tool == "spawn_subagents" else tool
    out: dict[str, Any] = {}
    for name, prop in properties.items():
        # A wait without a timeout waits for wait_default_s: runs would idle for it.
        if name in required or name == "timeout_ms" or rng.random() < 0.4:
            out[name] = value_for(prop, rng, seen, tool=inner, prop=name, tag=tag, depth=depth + 1)
    return out


def arguments_for(tool: Mapping[str, Any], rng: random.Random, seen: Seen, tag: str) -> str:
    """Return the JSON arguments of one valid-looking call of ``tool`` (an OpenAI tools entry).

    ``tag`` makes free texts unique (a task a child is given names its parent's stream).
    """
    function = tool.get("function") or {}
    name = str(function.get("name", ""))
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    value = value_for(parameters, rng, seen, tool=name, prop="", tag=tag)
    return json.dumps(value if isinstance(value, dict) else {}, ensure_ascii=False)
