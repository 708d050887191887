"""Reading msgspec's validation errors: which field was wrong, and how.

msgspec says ``Expected `str`, got `int` - at `$.tasks[0].agent``` or
``Object missing required field `message` - at `$.tasks[0]```. Tool
arguments and structured results both name the field to the model, and a
team file's tables (:func:`decode_table`) name the table and key; this is
the one parser of those messages.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from retinue.errors import TeamFileError

__all__ = ["FieldProblem", "decode_table", "field_problem"]

S = TypeVar("S", bound=msgspec.Struct)

_AT_RE = re.compile(r"^(?P<detail>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_NAMED_FIELD_RE = re.compile(r"^Object (missing required|contains unknown) field `([^`]*)`")


@dataclass(frozen=True)
class FieldProblem:
    """One validation error: what msgspec said, and the field it is about.

    ``field`` is the path of the field at fault (``tasks[0].agent``; ``""``
    for the whole value), the missing or unknown field itself included;
    ``kind`` is ``"missing"``, ``"unknown"`` or ``"invalid"``.
    """

    detail: str
    field: str
    kind: str


def field_problem(error: msgspec.ValidationError) -> FieldProblem:
    """Return what ``error`` says is wrong, and where."""
    match = _AT_RE.match(str(error))
    assert match is not None  # the pattern matches any string
    detail = match["detail"]
    field = (match["path"] or "").removeprefix(".")
    named = _NAMED_FIELD_RE.match(detail)
    if named is None:
        return FieldProblem(detail, field, "invalid")
    full = f"{field}.{named[2]}" if field else named[2]
    return FieldProblem(detail, full, "missing" if named[1] == "missing required" else "unknown")


def decode_table(source: str, table: str, raw: object, cls: type[S]) -> S:
    """Decode the table ``[table]`` of team file ``source`` into ``cls``.

    Raises:
        TeamFileError: ``raw`` is not a table, or breaks ``cls``: the message
            names the key (``restart.max_restart``) and says what is wrong;
            for an unknown key, it lists the known ones.
    """
    if not isinstance(raw, dict):
        raise TeamFileError(source, table, "", f"must be a table, not {type(raw).__name__}")
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        problem = field_problem(exc)
    if problem.kind == "unknown":
        known = ", ".join(_struct_at(cls, problem.field.rpartition(".")[0]).__struct_fields__)
        raise TeamFileError(source, table, problem.field, f"unknown key; known keys: {known}")
    key = problem.field.rpartition(".")[0] if problem.kind == "missing" else problem.field
    raise TeamFileError(source, table, key, problem.detail.replace("`", "").replace(" | null", ""))


def _struct_at(cls: type[msgspec.Struct], path: str) -> type[msgspec.Struct]:
    """Return the struct at dotted ``path`` of fields in ``cls`` (``cls`` for ``""``)."""
    for name in filter(None, path.split(".")):
        hint = next((f.type for f in msgspec.structs.fields(cls) if f.name == name), None)
        nested = [
            t
            for t in (hint, *typing.get_args(hint))
            if isinstance(t, type) and issubclass(t, msgspec.Struct)
        ]
        if not nested:
            break
        cls = nested[0]
    return cls
