"""UTF-8-safe truncation and text that is safe to print on a terminal.

:func:`truncate_utf8` keeps the head of a text and :func:`truncate_utf8_tail`
its tail; both bound the UTF-8 encoding of the result by ``max_bytes``, never
split a character, and mark a truncated result with a visible marker that
fits in the limit. When ``max_bytes`` is smaller than the marker, the result
is as much of the marker as fits, cut at a character boundary.

Lone surrogates (which have no UTF-8 encoding) are replaced with U+FFFD before
measuring, so the result always encodes and decodes.

:func:`storable_text` is how text the runtime did not write itself (a model's
answer, a tool's result, a runner's error) is made storable: a lone surrogate
(half an emoji; a provider's JSON may hold ``"\\ud83d"``) becomes its escape,
the six characters ``\\ud83d``, so the information is kept and every encoder
takes the text. The LLM layer applies it once, where the text arrives.
"""

from __future__ import annotations

import re

from retinue.errors import ArgumentTypeError, InvalidArgument

__all__ = [
    "HEAD_TRUNCATION_MARKER",
    "TAIL_TRUNCATION_MARKER",
    "bounded_text",
    "safe_terminal_text",
    "storable_text",
    "truncate_utf8",
    "truncate_utf8_tail",
]

HEAD_TRUNCATION_MARKER = "…[truncated]"
"""Appended by :func:`truncate_utf8` when it cuts the end off."""
TAIL_TRUNCATION_MARKER = "[truncated]…"
"""Prepended by :func:`truncate_utf8_tail` when it cuts the start off."""

_SURROGATES_RE = re.compile("[\ud800-\udfff]")
# C0 controls except tab (\x09) and newline (\x0a), DEL, C1 controls, the
# bidirectional embedding/override/isolate controls, and lone surrogates.
_UNSAFE_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def storable_text(text: str) -> str:
    """Return ``text`` with each lone surrogate escaped as ``\\udXXX`` (the same object when
    it has none).

    A lone surrogate has no UTF-8 form, so no store, JSON encoder or HTTP body
    takes it; its escape keeps the information (a JSON string holding it
    decodes to the same code point). Every other character is kept as it is.

    Raises:
        ArgumentTypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise ArgumentTypeError(f"text must be a str, not {type(text).__name__}")
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _check_args(text: object, limit: object, name: str) -> None:
    """Raise ``ArgumentTypeError`` or ``InvalidArgument`` for a bad ``text`` or limit."""
    if not isinstance(text, str):
        raise ArgumentTypeError(f"text must be a str, not {type(text).__name__}")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ArgumentTypeError(f"{name} must be an int, not {type(limit).__name__}")
    if limit < 0:
        raise InvalidArgument(f"{name} must be at least 0, got {limit}")


def _encode(text: str) -> bytes:
    """Encode ``text`` as UTF-8, replacing lone surrogates with U+FFFD."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES_RE.sub("\ufffd", text).encode("utf-8")


def _head(data: bytes, max_bytes: int) -> bytes:
    """Return the longest prefix of UTF-8 ``data`` within ``max_bytes`` that ends on a boundary."""
    if len(data) <= max_bytes:
        return data
    cut = max_bytes
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return data[:cut]


def _tail(data: bytes, max_bytes: int) -> bytes:
    """Return the longest suffix of UTF-8 ``data`` within ``max_bytes`` starting on a boundary."""
    if len(data) <= max_bytes:
        return data
    start = len(data) - max_bytes
    while start < len(data) and (data[start] & 0xC0) == 0x80:
        start += 1
    return data[start:]


_HEAD_MARKER = HEAD_TRUNCATION_MARKER.encode("utf-8")
_TAIL_MARKER = TAIL_TRUNCATION_MARKER.encode("utf-8")


def truncate_utf8(text: str, max_bytes: int) -> tuple[str, bool]:
    """Keep the start of ``text`` so that its UTF-8 encoding fits in ``max_bytes``.

    Returns ``(result, truncated)``. A text that fits is returned as it is
    (lone surrogates replaced) with ``False``; otherwise the result is a
    prefix followed by ``…[truncated]``, within ``max_bytes`` in total, and
    ``True``. No character is ever split.

    Raises:
        ArgumentTypeError: ``text`` is not a ``str`` or ``max_bytes`` is not an ``int``.
        InvalidArgument: ``max_bytes`` is negative.
    """
    if type(text) is str and type(max_bytes) is int and len(text) <= max_bytes and text.isascii():
        return text, False  # one byte per character: it fits as it is (no surrogate in it)
    _check_args(text, max_bytes, "max_bytes")
    data = _encode(text)
    if len(data) <= max_bytes:
        return data.decode("utf-8"), False
    budget = max_bytes - len(_HEAD_MARKER)
    if budget < 0:
        return _head(_HEAD_MARKER, max_bytes).decode("utf-8"), True
    return (_head(data, budget) + _HEAD_MARKER).decode("utf-8"), True


def truncate_utf8_tail(text: str, max_bytes: int) -> tuple[str, bool]:
    """Keep the end of ``text`` so that its UTF-8 encoding fits in ``max_bytes``.

    Returns ``(result, truncated)``. A text that fits is returned as it is
    (lone surrogates replaced) with ``False``; otherwise the result is
    ``[truncated]…`` followed by a suffix, within ``max_bytes`` in total,
    and ``True``. No character is ever split.

    Raises:
        ArgumentTypeError: ``text`` is not a ``str`` or ``max_bytes`` is not an ``int``.
        InvalidArgument: ``max_bytes`` is negative.
    """
    _check_args(text, max_bytes, "max_bytes")
    data = _encode(text)
    if len(data) <= max_bytes:
        return data.decode("utf-8"), False
    budget = max_bytes - len(_TAIL_MARKER)
    if budget < 0:
        return _head(_TAIL_MARKER, max_bytes).decode("utf-8"), True
    return (_TAIL_MARKER + _tail(data, budget)).decode("utf-8"), True


def bounded_text(text: str, max_bytes: int) -> str:
    """Return ``text`` made storable and cut to ``max_bytes`` of UTF-8.

    For text the runtime keeps but did not get from a caller it could refuse
    (a runner's error, a turn's output): lone surrogates are escaped as
    ``\\udXXX`` (:func:`storable_text`: the information is kept, unlike
    U+FFFD), then the head is kept with ``…[truncated]`` if it is too long
    (see :func:`truncate_utf8`).

    Raises:
        ArgumentTypeError: ``text`` is not a ``str`` or ``max_bytes`` is not an ``int``.
        InvalidArgument: ``max_bytes`` is negative.
    """
    # ASCII within the bound is storable and kept whole as it is: returned with no call
    # (nearly every output and error). Anything else takes the checks and the cut.
    if type(text) is str and type(max_bytes) is int and len(text) <= max_bytes and text.isascii():
        return text
    _check_args(text, max_bytes, "max_bytes")
    return truncate_utf8(storable_text(text), max_bytes)[0]


def safe_terminal_text(text: str, max_chars: int) -> str:
    """Return ``text`` made safe to print, cut to at most ``max_chars`` characters.

    Carriage returns are removed; every other control character except
    newline and tab (C0, DEL and C1) becomes ``?``, as do the bidirectional
    override and isolate controls (U+202A-U+202E, U+2066-U+2069) and lone
    surrogates. The cut happens after this cleaning.

    Raises:
        ArgumentTypeError: ``text`` is not a ``str`` or ``max_chars`` is not an ``int``.
        InvalidArgument: ``max_chars`` is negative.
    """
    _check_args(text, max_chars, "max_chars")
    cleaned = _UNSAFE_RE.sub("?", text.replace("\r", ""))
    return cleaned[:max_chars]
