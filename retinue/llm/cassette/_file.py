"""The cassette file: its header and entries, read whole, appended one line at a time.

JSON lines encoded by msgspec. Appends to one file are serialised across the
process (one lock per path); a new or empty file gets the header first; an
existing one must be a cassette of a version this retinue reads, recorded
with the same ``redact`` patterns. A last line cut short by a crash while it
was appended is left out when read; any other damage is a ``CassetteError``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import msgspec

from retinue.errors import CassetteError
from retinue.protocol.messages import Usage

__all__ = [
    "CASSETTE_VERSION",
    "Entry",
    "Header",
    "ModelEntry",
    "ToolEntry",
    "append",
    "read_cassette",
]

CASSETTE_VERSION = 1
"""The cassette format this retinue writes (and the newest it reads)."""


class Header(msgspec.Struct, kw_only=True):
    """The first line of a cassette: its format, version and the ``redact`` patterns it was
    recorded with (a replay scrubs its requests with them too, so their keys match)."""

    format: str = "retinue-cassette"
    version: int = CASSETTE_VERSION
    redact: list[str] = msgspec.field(default_factory=list)


class ModelEntry(msgspec.Struct, kw_only=True, tag="model", tag_field="kind"):
    """One answered model call."""

    agent: str
    index: int
    key: str
    request: dict[str, Any]
    answer: dict[str, Any]
    usage: Usage = msgspec.field(default_factory=Usage)


class ToolEntry(msgspec.Struct, kw_only=True, tag="tool", tag_field="kind"):
    """One answered host tool call."""

    agent: str
    index: int
    key: str
    tool: str
    arguments: str
    result: str
    error: str | None = None


Entry = ModelEntry | ToolEntry
_decode_entry = msgspec.json.Decoder(Entry).decode
_decode_header = msgspec.json.Decoder(Header).decode
_encode = msgspec.json.Encoder().encode

_FILE_LOCKS: dict[str, threading.Lock] = {}
_FILE_LOCKS_GUARD = threading.Lock()


def _file_lock(path: Path) -> threading.Lock:
    """The process-wide lock of appends to ``path``."""
    with _FILE_LOCKS_GUARD:
        return _FILE_LOCKS.setdefault(str(path), threading.Lock())


def append(path: Path, entry: Entry, redact: list[str]) -> None:
    """Append ``entry`` to the cassette at ``path`` (the header first, with ``redact``,
    to a new or empty file).

    Raises:
        CassetteError: the file cannot be written, is not a cassette of this version,
            or was recorded with other ``redact`` patterns.
    """
    try:
        with _file_lock(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("ab") as out:
                if out.tell() == 0:
                    out.write(_encode(Header(redact=redact)) + b"\n")
                else:
                    _check_header(path, redact)
                out.write(_encode(entry) + b"\n")
    except OSError as exc:
        raise CassetteError(
            f"cannot write the cassette {path}: {exc.strerror or exc}", path=str(path)
        ) from None


def _check_header(path: Path, redact: list[str]) -> None:
    """The file starts with a header this retinue reads, recorded with ``redact``.

    Raises:
        CassetteError: it does not.
    """
    with path.open("rb") as source:
        header = _header(path, source.readline())
    if sorted(header.redact) != sorted(redact):
        raise CassetteError(
            f"{path} was recorded with redact {header.redact}, not {redact}: "
            "record to a new file (its keys are computed after redaction)",
            path=str(path),
        )


def _header(path: Path, line: bytes) -> Header:
    try:
        header = _decode_header(line)
    except msgspec.DecodeError:
        header = Header(format="")
    if header.format != "retinue-cassette":
        raise CassetteError(
            f"{path} is not a retinue cassette (its first line is not the header); "
            "give a cassette recorded with --record, or a new file to record",
            path=str(path),
        )
    if header.version > CASSETTE_VERSION:
        raise CassetteError(
            f"{path} is a version {header.version} cassette; this retinue reads version "
            f"{CASSETTE_VERSION} and older: upgrade retinue, or record it again",
            path=str(path),
        )
    return header


def read_cassette(path: Path) -> tuple[Header, list[Entry]]:
    """The header and every entry of the cassette at ``path`` (a last line cut short is
    left out).

    Raises:
        CassetteError: the file is missing, damaged or of a newer version.
    """
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        raise CassetteError(
            f"cannot read the cassette {path}: {exc.strerror or exc}", path=str(path)
        ) from None
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        return Header(), []
    header = _header(path, lines[0])
    entries: list[Entry] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            entries.append(_decode_entry(line))
        except msgspec.DecodeError as exc:
            if number == len(lines):
                break  # cut short by a crash while it was appended
            raise CassetteError(
                f"{path} line {number} is damaged ({exc}); record the cassette again",
                path=str(path),
            ) from None
    return header, entries
