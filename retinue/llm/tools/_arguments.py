"""Tool definitions: one msgspec struct both decodes a call's JSON and gives the model its schema.

A :class:`ToolDef` is a tool as the toolbox holds it: name, description, the
struct its arguments decode into, and the async handler that runs it.

:func:`function_schema` turns a struct into the OpenAI ``function`` entry
(``$ref``\\ s inlined, titles dropped, ``X | None = None`` shown as an optional
``X``), so what the model is told is exactly what :func:`decode_arguments`
accepts. :func:`decode_arguments` raises :class:`ToolArgumentError` whose
message names the offending field (``tasks[2].agent``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import msgspec

from retinue.protocol.effects import Effect
from retinue.protocol.validation import field_problem

__all__ = ["ToolArgumentError", "ToolDef", "ToolError", "decode_arguments", "function_schema"]

_S = TypeVar("_S", bound=msgspec.Struct)


class ToolError(Exception):
    """A tool refused or failed; its message is what the model sees as ``{"error": ...}``.

    Host tools may raise it too: its message goes to the model as it is, while
    any other exception is shown with its type name.
    """


class ToolArgumentError(ToolError):
    """A tool call's arguments are not valid JSON or do not fit the tool's struct."""


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """Return ``node`` with every ``$ref`` replaced by its definition and titles removed."""
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        return _inline(defs[ref.rsplit("/", 1)[-1]], defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _optional(_inline(prop, defs)) for name, prop in value.items()}
        else:
            out[key] = _inline(value, defs)
    return out


def _optional(prop: Any) -> Any:
    """Show ``X | None = None`` as ``X`` (the field is already optional: not required)."""
    if not isinstance(prop, dict) or prop.get("default", ...) is not None:
        return prop
    options = prop.get("anyOf")
    if not isinstance(options, list):
        return prop
    rest = [o for o in options if o != {"type": "null"}]
    if len(rest) != 1 or len(rest) == len(options):
        return prop
    merged = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
    merged.update(rest[0])
    return merged


def function_schema(name: str, description: str, struct: type[msgspec.Struct]) -> dict[str, Any]:
    """Return the OpenAI tool entry for ``struct``: ``{"type": "function", "function": ...}``.

    The struct's own docstring is not used; ``description`` is the tool's. The
    entry is built once per ``(name, description, struct)`` (a turn's toolbox
    asks for the same few on every turn); each call returns a fresh copy the
    caller may edit.

    Raises:
        TypeError, ValueError: a field's type has no JSON schema.
    """
    entry: dict[str, Any] = msgspec.json.decode(_schema_json(name, description, struct))
    return entry


@functools.lru_cache(maxsize=1024)
def _decoder(struct: type[msgspec.Struct]) -> msgspec.json.Decoder[Any]:
    """The JSON decoder of ``struct`` (a decoder is immutable and thread-safe: shared)."""
    return msgspec.json.Decoder(struct)


@functools.lru_cache(maxsize=1024)
def _schema_json(name: str, description: str, struct: type[msgspec.Struct]) -> bytes:
    """The JSON of :func:`function_schema`'s entry (built from the struct's schema once)."""
    schema, defs = msgspec.json.schema_components([struct])
    parameters = _inline(schema[0], defs)
    parameters.pop("description", None)
    parameters.setdefault("properties", {})
    parameters.setdefault("required", [])
    entry = {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }
    return msgspec.json.encode(entry)


def _explain(error: msgspec.ValidationError) -> str:
    """Turn msgspec's ``detail - at `$.a[0].b``` into ``argument `a[0].b`: detail``."""
    problem = field_problem(error)
    if problem.kind == "missing":
        return f"missing required argument `{problem.field}`"
    if problem.kind == "unknown":
        return f"unknown argument `{problem.field}`"
    if problem.field:
        return f"argument `{problem.field}`: {problem.detail}"
    return problem.detail


def decode_arguments(decoder: msgspec.json.Decoder[_S], tool: str, arguments: str) -> _S:
    """Decode the model's raw JSON ``arguments`` for ``tool`` (empty text means ``{}``).

    Raises:
        ToolArgumentError: not a JSON object, or an argument missing, unknown
            or of the wrong type; the message names the tool and the field. A
            string holding half a character (a lone surrogate's escape) is
            refused too, saying so: no tool is handed text with no UTF-8 form.
    """
    text = arguments.strip() if isinstance(arguments, str) else arguments
    if text == "":
        text = "{}"
    try:
        return decoder.decode(text)
    except msgspec.ValidationError as exc:
        raise ToolArgumentError(f"invalid arguments for {tool}: {_explain(exc)}") from None
    except msgspec.DecodeError as exc:
        if _half_character(text):
            raise ToolArgumentError(
                f"invalid arguments for {tool}: a string holds half a character (a lone "
                "surrogate, shown as its escape \\udXXX); send whole characters"
            ) from None
        raise ToolArgumentError(
            f"invalid arguments for {tool}: not valid JSON ({exc}); send one JSON object"
        ) from None


def _half_character(text: str | bytes) -> bool:
    """Whether JSON ``text`` holds a lone surrogate's escape (``"\\ud83d"``: half an emoji).

    A model's raw lone surrogate is escaped where its answer arrives
    (:mod:`retinue.protocol.arrival`); msgspec refuses that escape as malformed
    JSON, the standard library decodes it: the value then has no UTF-8 form.
    """
    if not isinstance(text, str) or "\\u" not in text:
        return False
    try:
        value = json.loads(text)
    except ValueError:
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@dataclass(frozen=True)
class ToolDef:
    """One tool: its name, description, argument struct and async handler.

    ``handler(args)`` gets the decoded struct and returns something
    ``msgspec.json`` can encode (a dict, a struct, a list, a str ...); it
    signals a refusal by raising :class:`ToolError`. ``hint`` is appended to
    an argument error (say, the agents one may spawn). ``timeout_s`` bounds
    one call (None: no bound of the toolbox's, as for the coordinator tools
    and bash, which has its own): past it the call is cancelled and the
    model gets ``{"error": "tool <name> timed out after N s"}``. ``effect``
    is its effect class (:mod:`retinue.protocol.effects`): what a second run
    of a call found in doubt may do (``unsafe`` unless declared).
    """

    name: str
    description: str
    args: type[msgspec.Struct]
    handler: Callable[[Any], Awaitable[Any]]
    hint: str = ""
    decoder: msgspec.json.Decoder[Any] = field(init=False, repr=False, compare=False)
    timeout_s: float | None = None
    effect: Effect = "unsafe"
    kind: ClassVar[str] = "function"
    """The tool's ``gen_ai.tool.type`` on its spans (an MCP server's tool: ``extension``)."""

    def __post_init__(self) -> None:
        """Take the argument decoder of ``args`` (built once per struct, shared by every turn)."""
        object.__setattr__(self, "decoder", _decoder(self.args))

    @property
    def granted_name(self) -> str:
        """The name profiles grant this tool by (an MCP tool's differs from :attr:`name`)."""
        return self.name

    def schema(self) -> dict[str, Any]:
        """Return this tool's OpenAI ``tools`` entry."""
        return function_schema(self.name, self.description, self.args)

    def schema_json(self) -> bytes:
        """Return :meth:`schema` as JSON (built once per name, description and struct)."""
        return _schema_json(self.name, self.description, self.args)
