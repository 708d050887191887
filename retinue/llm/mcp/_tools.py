"""MCP tools as toolbox tools: checked schemas, checked arguments, results a model can read.

:func:`prepare` turns one server's tool listing into :class:`McpTool` entries
once per listing: the offered name (``server__tool``), a bounded
description, the server's ``inputSchema`` (a JSON object schema, checked
with ``jsonschema`` and bounded by ``max_schema_bytes``) and its validator.
Its effect class comes from its annotations (``readOnlyHint`` -> read,
``idempotentHint`` -> idempotent, otherwise unsafe: :func:`~retinue.protocol.effects.mcp_effect`).
A tool whose schema is unusable is refused (reported, never offered), and
so is one that may only be called as a task (``execution.taskSupport``
``"required"``): retinue's calls are plain ``tools/call`` requests.
:func:`unclashed` leaves out the granted tools that would be offered under
one name (neither is: the model could not tell them apart).
:func:`tool_def` makes the :class:`~retinue.llm.tools._arguments.ToolDef` a turn
offers; its handler checks the arguments against the schema before the call.
:func:`result_value` turns a ``CallToolResult`` into JSON for the model.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec

from retinue.llm.tools import ToolArgumentError, ToolDef, ToolError
from retinue.protocol.effects import Effect, mcp_effect
from retinue.protocol.text import truncate_utf8
from retinue.protocol.tools import offered_name

__all__ = [
    "MAX_DESCRIPTION_BYTES",
    "MAX_ERROR_BYTES",
    "McpTool",
    "McpToolDef",
    "prepare",
    "result_value",
    "tool_def",
    "unclashed",
]

MAX_DESCRIPTION_BYTES = 2048
"""A tool's description is cut to this many bytes before a model sees it."""
MAX_ERROR_BYTES = 8192
"""An error result's text is cut to this many bytes."""


class _Raw(msgspec.Struct):
    """Placeholder argument struct: MCP tools decode into a plain dict."""


@dataclass(frozen=True)
class McpToolDef(ToolDef):
    """A toolbox tool whose schema is an MCP server's ``inputSchema`` (arguments: a dict)."""

    parameters: Mapping[str, Any] = field(default_factory=dict)
    granted: str = ""
    """``<server>.<tool>``: the name profiles grant it by (:attr:`granted_name`)."""
    kind: ClassVar[str] = "extension"

    def __post_init__(self) -> None:
        """Decode arguments into a dict; the handler checks them against the schema."""
        object.__setattr__(self, "decoder", msgspec.json.Decoder(dict[str, Any]))

    @property
    def granted_name(self) -> str:
        """``<server>.<tool>`` (the offered name when none was given)."""
        return self.granted or self.name

    def schema(self) -> dict[str, Any]:
        """Return the OpenAI ``tools`` entry with the server's schema as its parameters."""
        parameters: dict[str, Any] = json.loads(json.dumps(self.parameters))
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }

    def schema_json(self) -> bytes:
        """Return :meth:`schema` as JSON."""
        return msgspec.json.encode(self.schema())


@dataclass(frozen=True)
class McpTool:
    """One server tool as retinue offers it (``effect``: its class, from its annotations)."""

    server: str
    tool: str
    offered: str
    description: str
    parameters: Mapping[str, Any]
    validator: Any
    effect: Effect = "unsafe"

    @property
    def granted_name(self) -> str:
        """``<server>.<tool>``: the name profiles grant."""
        return f"{self.server}.{self.tool}"


def _check_schema(raw: Any, limit: int) -> tuple[dict[str, Any], Any]:
    """Return the schema and its validator, or raise ValueError saying what is wrong."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for
    from referencing import Registry

    if not isinstance(raw, Mapping):
        raise ValueError("its inputSchema is not a JSON object")
    try:
        text = json.dumps(raw, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"its inputSchema is not JSON ({exc})") from None
    size = len(text.encode("utf-8"))
    if size > limit:
        raise ValueError(
            f"its inputSchema is {size} bytes, over max_schema_bytes={limit} "
            "(raise McpServer(max_schema_bytes=...) to offer it)"
        )
    schema: dict[str, Any] = json.loads(text)
    if schema.get("type") != "object":
        raise ValueError('its inputSchema is not of "type": "object"')
    schema.setdefault("properties", {})
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"its inputSchema is not a valid JSON Schema: {exc.message}") from None
    return schema, cls(schema, registry=Registry())


def prepare(
    server: str, tools: Sequence[Any], *, max_schema_bytes: int
) -> tuple[list[McpTool], list[str]]:
    """Return the usable tools of one listing and, for each refused one, why."""
    usable: list[McpTool] = []
    refused: list[str] = []
    for entry in tools:
        name = str(getattr(entry, "name", ""))
        if not name:
            refused.append("a tool without a name")
            continue
        execution = getattr(entry, "execution", None)
        if getattr(execution, "task_support", None) == "required":
            refused.append(
                f'{server}.{name}: its execution.taskSupport is "required" (it can only run as '
                "a task), and retinue calls tools with plain tools/call requests"
            )
            continue
        try:
            schema, validator = _check_schema(
                getattr(entry, "input_schema", None), max_schema_bytes
            )
        except ValueError as exc:
            refused.append(f"{server}.{name}: {exc}")
            continue
        description = str(
            getattr(entry, "description", None) or getattr(entry, "title", None) or ""
        )
        description = truncate_utf8(
            description or f"{name} (MCP server {server})", MAX_DESCRIPTION_BYTES
        )[0]
        offered = offered_name(server, name)
        effect = mcp_effect(getattr(entry, "annotations", None))
        usable.append(McpTool(server, name, offered, description, schema, validator, effect))
    return usable, refused


def unclashed(tools: Sequence[McpTool]) -> tuple[list[McpTool], list[tuple[str, McpTool]]]:
    """Split a turn's granted ``tools`` into those alone under their offered name and, for
    each name that several would take, why none is offered (with the first of them).

    Tools that would be offered under one name (``c.get.x`` and ``c.get_x``)
    are all left out: a model's call of that name could mean either.
    """
    by_offered: dict[str, list[McpTool]] = {}
    for tool in tools:
        by_offered.setdefault(tool.offered, []).append(tool)
    kept = [tool for tool in tools if len(by_offered[tool.offered]) == 1]
    clashes = [
        (
            f"MCP tools {' and '.join(repr(t.granted_name) for t in same)} would all be "
            f"offered to a model as {offered!r} (function names allow no dot), so none of "
            "them is offered; rename one on its server, or grant only one by its exact name",
            same[0],
        )
        for offered, same in by_offered.items()
        if len(same) > 1
    ]
    return kept, clashes


def _argument_error(offered: str, validator: Any, arguments: dict[str, Any]) -> str | None:
    from jsonschema.exceptions import best_match

    try:
        error = best_match(validator.iter_errors(arguments))
    except Exception as exc:  # an unresolvable $ref and the like: the schema's fault
        return f"invalid arguments for {offered}: the tool's schema cannot be checked ({exc})"
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path)
    place = f"argument `{where}`: " if where else ""
    return f"invalid arguments for {offered}: {place}{truncate_utf8(error.message, 300)[0]}"


def tool_def(
    tool: McpTool, call: Callable[[McpTool, dict[str, Any]], Awaitable[Any]]
) -> McpToolDef:
    """Return the toolbox tool for ``tool``; ``call(tool, arguments)`` runs a checked call."""

    async def handler(arguments: dict[str, Any]) -> Any:
        problem = _argument_error(tool.offered, tool.validator, arguments)
        if problem is not None:
            raise ToolArgumentError(problem)
        return await call(tool, arguments)

    return McpToolDef(
        name=tool.offered,
        description=tool.description,
        args=_Raw,
        handler=handler,
        parameters=tool.parameters,
        granted=tool.granted_name,
        effect=tool.effect,
    )


def _size(data: Any) -> int:
    return len(data) * 3 // 4 if isinstance(data, str) else 0


def _block_text(block: Any) -> str:
    """One content block as text: text as it is, everything else summarised."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind in ("image", "audio"):
        mime = getattr(block, "mime_type", None) or "?"
        return f"[{kind} {mime}, {_size(getattr(block, 'data', ''))} bytes, not shown]"
    if kind == "resource_link":
        return f"[resource link {getattr(block, 'uri', '')} {getattr(block, 'name', '')}]".strip()
    if kind == "resource":
        resource = getattr(block, "resource", None)
        uri = getattr(resource, "uri", "")
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f"[resource {uri}]\n{text}"
        mime = getattr(resource, "mime_type", None) or "?"
        return f"[resource {uri} {mime}, {_size(getattr(resource, 'blob', ''))} bytes, not shown]"
    return f"[{kind or 'unknown'} content, not shown]"


def result_value(tool: McpTool, result: Any) -> Any:
    """Return what the model sees of a ``CallToolResult``: ``{"result": ...}``.

    Structured content is returned as JSON (``{"result": x}``, how SDK servers
    wrap a value that is not an object, as ``x``; other blocks summarised
    beside it as ``"attachments"``); else the text blocks joined, images, audio and
    resources summarised. The toolbox bounds the whole.

    Raises:
        ToolError: the result has ``isError`` (the server's text is the message).
    """
    blocks = list(getattr(result, "content", None) or [])
    texts = [_block_text(block) for block in blocks]
    if getattr(result, "is_error", False):
        text = "\n".join(t for t in texts if t) or "the tool reported an error"
        raise ToolError(f"{tool.granted_name}: {truncate_utf8(text, MAX_ERROR_BYTES)[0]}")
    structured = getattr(result, "structured_content", None)
    if isinstance(structured, dict) and list(structured) == ["result"]:
        structured = structured["result"]  # how SDK servers wrap a value that is not an object
    if structured is not None:
        others = [t for block, t in zip(blocks, texts, strict=True) if block.type != "text"]
        value: dict[str, Any] = {"result": structured}
        if others:
            value["attachments"] = others
        return value
    return {"result": "\n".join(texts)}
