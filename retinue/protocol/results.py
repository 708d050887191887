"""The structured result contract: one JSON object an agent can be asked to answer with.

The object is :class:`StructuredResult` (``version`` ``retinue.result.v2``),
aligned with the seed's contract (pi-subagents 2.0.1): every list field is
present (empty lists included), ``verification`` is a list of checks, every
claim carries its ``evidence``, and ``reason_code`` and ``provenance`` are
optional. The whole input is at most 51,200 bytes of UTF-8; unknown keys are
rejected at every level, every list holds at most 50 items and every string is
at most 8 KiB of UTF-8. The string bound is enforced in
two steps: msgspec rejects a string of more than 8192 *characters* while
decoding (cheap, early), then :func:`parse_result` checks the UTF-8 *byte*
length of every string, which is the rule itself. Artifact ids must fully
match ``^[A-Za-z0-9][A-Za-z0-9._:-]*$``, be at most 256 characters and be
unique within the result. An artifact's ``kind``, ``version``, ``location``
and ``digest`` may not be blank or whitespace-only (the seed's
``parseArtifact``); the optional ones may be left out.

:func:`encode_result` gives the canonical output: compact JSON that leaves
absent optional fields out (so it is never longer than the object a model
sent, whitespace aside), lone surrogates as ``\\uXXXX`` escapes; a result
whose canonical output is over the bound is a contract error, never a cut.

:func:`parse_result` raises :class:`~retinue.errors.ResultContractError` whose
message and ``.field`` name the offending field path, such as
``claims[2].classification``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Annotated, Literal

import msgspec

from retinue.errors import ArgumentTypeError, ResultContractError
from retinue.protocol.validation import field_problem

__all__ = [  # noqa: RUF022 (plain sorted(), as retinue/__init__.py)
    "ARTIFACT_ID_PATTERN",
    "Artifact",
    "Change",
    "Claim",
    "MAX_ARTIFACT_ID_LENGTH",
    "MAX_INPUT_BYTES",
    "MAX_LIST_ITEMS",
    "MAX_STRING_BYTES",
    "RESULT_VERSION",
    "ResultStatus",
    "StructuredResult",
    "Verification",
    "encode_result",
    "parse_result",
    "result_instruction",
]

RESULT_VERSION = "retinue.result.v2"
"""The ``version`` every structured result must carry."""
MAX_STRING_BYTES = 8192
"""Largest string in a structured result, in bytes of UTF-8."""
MAX_LIST_ITEMS = 50
"""Most items in any list of a structured result."""
MAX_INPUT_BYTES = 51_200
"""Largest text :func:`parse_result` accepts, in bytes of UTF-8 (prose and fences included)."""
MAX_ARTIFACT_ID_LENGTH = 256
"""Longest artifact id, in characters."""
ARTIFACT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
"""What an artifact id must fully match (a trailing newline does not)."""

_ARTIFACT_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")

ResultStatus = Literal["completed", "partial", "blocked", "needs-input", "failed"]
"""How the agent's work ended."""

_Str = Annotated[str, msgspec.Meta(max_length=MAX_STRING_BYTES)]
_ArtifactId = Annotated[str, msgspec.Meta(max_length=MAX_ARTIFACT_ID_LENGTH)]
_Strings = Annotated[tuple[_Str, ...], msgspec.Meta(max_length=MAX_LIST_ITEMS)]


_Key = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ARTIFACT_ID_LENGTH)]


class Claim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One statement the agent makes, how it knows it, and the evidence (required, may be empty)."""

    claim: _Str
    classification: Literal["observed", "inferred", "unverified"]
    evidence: _Strings


class Artifact(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Something the agent produced or used, named by a unique ``id``."""

    id: _ArtifactId
    kind: _Str
    version: _Str | None = None
    location: _Str | None = None
    digest: _Str | None = None


class Change(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One change the agent made: what it touched and a summary."""

    path: _Str
    summary: _Str


class Verification(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One check the agent ran (or did not run) on its work, and its outcome."""

    status: Literal["passed", "failed", "not-run"]
    summary: _Str
    command: _Str | None = None
    evidence: _Strings | None = None


class StructuredResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The whole structured result; build one with :func:`parse_result` to get it validated.

    Every list field is required (send ``[]`` when there is nothing to say);
    ``reason_code`` (a short machine-readable reason, e.g. for ``blocked``) and
    ``provenance`` (string facts about where the result came from, such as
    ``{"agent": "/root/review", "model": "..."}``, at most 50 keys) are optional.
    """

    version: Literal["retinue.result.v2"]
    status: ResultStatus
    summary: _Str
    claims: Annotated[tuple[Claim, ...], msgspec.Meta(max_length=MAX_LIST_ITEMS)]
    artifacts: Annotated[tuple[Artifact, ...], msgspec.Meta(max_length=MAX_LIST_ITEMS)]
    changes: Annotated[tuple[Change, ...], msgspec.Meta(max_length=MAX_LIST_ITEMS)]
    verification: Annotated[tuple[Verification, ...], msgspec.Meta(max_length=MAX_LIST_ITEMS)]
    limitations: _Strings
    unresolved_dependencies: _Strings
    reason_code: _Str | None = None
    provenance: Annotated[dict[_Key, _Str], msgspec.Meta(max_length=MAX_LIST_ITEMS)] | None = None


_DECODER = msgspec.json.Decoder(StructuredResult)
_ENCODER = msgspec.json.Encoder()
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_ARTIFACT_TEXT_FIELDS = ("kind", "version", "location", "digest")

# A fenced block: an opening ``` line with an optional info string, then
# everything up to the next line that is only ```.
_FENCE_RE = re.compile(
    r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)^[ \t]*```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)

_REDO = "; answer again with one JSON object that follows the result contract"


def _fail(detail: str, field: str) -> ResultContractError:
    """Build the error for ``detail`` at ``field`` (``""`` for the whole result)."""
    where = f" at {field}" if field else ""
    return ResultContractError(f"invalid structured result{where}: {detail}{_REDO}", field)


def _from_validation_error(error: msgspec.ValidationError) -> ResultContractError:
    """Turn msgspec's ``... - at `$.claims[2].x``` into a field path and a message."""
    problem = field_problem(error)
    return _fail(problem.detail, problem.field)


def _extract_json(text: str) -> str:
    """Return the JSON text: the whole (stripped) text, or the one fenced json block."""
    stripped = text.strip()
    if stripped.startswith("{"):
        return stripped
    blocks = [(m[1].lower(), m[2]) for m in _FENCE_RE.finditer(text)]
    tagged = [body for lang, body in blocks if lang == "json"]
    if len(tagged) > 1:
        raise _fail(f"found {len(tagged)} ```json blocks, expected exactly one", "")
    if len(tagged) == 1:
        return tagged[0]
    untagged = [body for lang, body in blocks if lang == ""]
    if len(untagged) == 1:
        return untagged[0]
    raise _fail("no JSON object found; send the object alone or in one ```json block", "")


def _strings(result: StructuredResult) -> Iterator[tuple[str, str]]:
    """Yield ``(field path, string)`` for every string in ``result``, in document order."""
    stack: list[tuple[str, object]] = [("", result)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            yield path, value
        elif isinstance(value, msgspec.Struct):
            names = value.__struct_fields__
            for name in reversed(names):
                stack.append((f"{path}.{name}" if path else name, getattr(value, name)))
        elif isinstance(value, tuple):
            for index in range(len(value) - 1, -1, -1):
                stack.append((f"{path}[{index}]", value[index]))
        elif isinstance(value, dict):
            for key in reversed(list(value)):
                stack.append((f"{path}.{key}", value[key]))


def _utf8_size(text: str) -> int:
    """Return the UTF-8 size of ``text`` (lone surrogates counted as 3 bytes)."""
    return len(text.encode("utf-8", "surrogatepass"))


def _check(result: StructuredResult) -> None:
    """Apply the rules msgspec cannot express: byte lengths, id pattern, id uniqueness."""
    for field, value in _strings(result):
        size = _utf8_size(value)
        if size > MAX_STRING_BYTES:
            raise _fail(
                f"string is {size} bytes of UTF-8, over the {MAX_STRING_BYTES}-byte limit",
                field,
            )
    first_use: dict[str, int] = {}
    for index, artifact in enumerate(result.artifacts):
        for name in _ARTIFACT_TEXT_FIELDS:
            value = getattr(artifact, name)
            if value is not None and not value.strip():
                raise _fail(
                    f"artifact {name} is blank; give a value or leave the field out"
                    if name != "kind"
                    else "artifact kind is blank; say what the artifact is (e.g. 'file')",
                    f"artifacts[{index}].{name}",
                )
        field = f"artifacts[{index}].id"
        if _ARTIFACT_ID_RE.fullmatch(artifact.id) is None:
            raise _fail(
                f"artifact id {artifact.id!r} must match {ARTIFACT_ID_PATTERN}",
                field,
            )
        if artifact.id in first_use:
            raise _fail(
                f"duplicate artifact id {artifact.id!r}, "
                f"already used at artifacts[{first_use[artifact.id]}].id",
                field,
            )
        first_use[artifact.id] = index


def parse_result(text: str) -> StructuredResult:
    """Parse and validate a structured result from a model's answer.

    ``text`` is the JSON object alone (surrounding whitespace allowed) or a
    reply containing one fenced block tagged ``json`` (or, when there is no
    tagged block, exactly one untagged fenced block); the whole text is at
    most :data:`MAX_INPUT_BYTES` bytes of UTF-8. A lone surrogate in a
    string (half an emoji) is kept as the visible text ``\\udXXX``.

    Raises:
        ArgumentTypeError: ``text`` is not a ``str``.
        ResultContractError: the text is over :data:`MAX_INPUT_BYTES`, no JSON
            object was found, the JSON is malformed, or the object breaks the
            contract. The message and ``.field``
            name the offending field path (``claims[2].classification``);
            ``.field`` is ``""`` when the problem is the whole result.
    """
    if not isinstance(text, str):
        raise ArgumentTypeError(f"text must be a str, not {type(text).__name__}")
    # More characters than the bound means more bytes too: no need to encode a huge text.
    size = len(text) if len(text) > MAX_INPUT_BYTES else _utf8_size(text)
    if size > MAX_INPUT_BYTES:
        raise _fail(
            f"the answer is over the {MAX_INPUT_BYTES}-byte limit of a structured result "
            f"(at least {size} bytes of UTF-8); shorten it",
            "",
        )
    payload = _extract_json(text)
    if _SURROGATE_RE.search(payload):
        # Half an emoji (providers send them) has no UTF-8: keep it as visible
        # text, escaped the way runner outputs are (retinue.protocol.text).
        payload = _SURROGATE_RE.sub(lambda m: f"\\\\u{ord(m[0]):04x}", payload)
    try:
        result = _DECODER.decode(payload)
    except msgspec.ValidationError as exc:
        raise _from_validation_error(exc) from None
    except msgspec.DecodeError as exc:
        raise _fail(f"not valid JSON ({exc})", "") from None
    _check(result)
    return result


def encode_result(result: StructuredResult, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """Return ``result``'s canonical JSON text, checked to fit in ``max_bytes`` of UTF-8.

    Canonical: compact, fields in contract order, absent optional fields
    (``None``) left out, so a result :func:`parse_result` accepted is never
    longer than the object the model sent (whitespace aside). Lone surrogates,
    which UTF-8 cannot hold, are written as ``\\uXXXX`` escapes: the text is
    storable as it is and decodes to the same result. ``max_bytes`` is the
    bound the output is kept within (a turn's ``Limits.output_max_bytes``).

    Raises:
        ResultContractError: the canonical output is over ``max_bytes`` (a
            result that cannot be kept whole is refused, never cut).
    """
    try:
        text = _ENCODER.encode(result).decode("utf-8")
    except UnicodeEncodeError:
        loose = json.dumps(msgspec.to_builtins(result), ensure_ascii=False, separators=(",", ":"))
        text = _SURROGATE_RE.sub(lambda m: f"\\u{ord(m[0]):04x}", loose)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise _fail(
            f"the result is {size} bytes as canonical JSON, over the output bound of "
            f"{max_bytes} bytes (Limits.output_max_bytes); shorten it",
            "",
        )
    return text


_EXAMPLE = """{
  "version": "retinue.result.v2",
  "status": "completed",
  "summary": "Checked the login handler; expired tokens are rejected.",
  "claims": [],
  "artifacts": [],
  "changes": [],
  "verification": [],
  "limitations": [],
  "unresolved_dependencies": []
}"""


def result_instruction() -> str:
    """Return the prompt text that asks a model to answer with a structured result.

    The text describes every field and ends with a minimum valid result (every
    required field present, the lists empty) in a fenced ``json`` block, so
    ``parse_result(result_instruction())`` succeeds.
    """
    return f"""\
Answer with one JSON object, alone or inside one ```json fenced block. Fields:
- "version": always "{RESULT_VERSION}".
- "status": one of "completed", "partial", "blocked", "needs-input", "failed".
- "summary": what you did and found, in a few sentences.
- "claims": list of {{"claim", "classification", "evidence"}}; classification \
is "observed" (you saw it), "inferred" (you reasoned it) or "unverified"; evidence is a \
list of strings (required; [] when you have none).
- "artifacts": list of {{"id", "kind", "version"?, "location"?, "digest"?}}; \
ids are unique, at most {MAX_ARTIFACT_ID_LENGTH} characters and match \
{ARTIFACT_ID_PATTERN}.
- "changes": list of {{"path", "summary"}}.
- "verification": list of checks {{"status", "summary", "command"?, "evidence"?}}; \
status is "passed", "failed" or "not-run"; evidence is a list of strings.
- "limitations", "unresolved_dependencies": lists of strings.
- "reason_code" (optional): a short machine-readable reason, e.g. for "blocked".
- "provenance" (optional): an object of strings saying where the result came from.
Rules: every field above without "(optional)" or "?" must be present, with [] for an \
empty list; no other keys; every string at most {MAX_STRING_BYTES} bytes; every list at \
most {MAX_LIST_ITEMS} items; the whole answer at most {MAX_INPUT_BYTES} bytes. \
Minimum valid result:
```json
{_EXAMPLE}
```
"""
