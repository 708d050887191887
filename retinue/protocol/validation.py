"""Reading msgspec's validation errors: which field was wrong, and how.

msgspec says ``Expected `str`, got `int` - at `$.tasks[0].agent``` or
``Object missing required field `message` - at `$.tasks[0]```. Tool
arguments and structured results both name the field to the model; this is
the one parser of those messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec

__all__ = ["FieldProblem", "field_problem"]

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
