"""Boundary checks for caller-supplied arguments: text, keys and seconds.

Everything a caller hands the runtime is checked here before it reaches the
tree or the store, so a refused argument changes nothing:

- text that will be stored (tasks, message content, deduplication and
  idempotency keys, profile names) must be a ``str`` whose every character
  has a UTF-8 encoding. A lone surrogate (``"\\ud800"``, common in file names
  decoded with ``surrogateescape``) has none: it is refused with
  :class:`~retinue.errors.InvalidArgument` naming the argument and the
  position, never a raw ``UnicodeEncodeError`` half-way through a transition;
- tasks and message content must not be blank;
- seconds (timeouts) must be finite, non-negative numbers.

Error messages quote at most :data:`PREVIEW_CHARS` characters of a bad value
(:func:`preview`), so a 10 MB argument is never echoed back whole.
Text the runtime did not get from a caller it can refuse (a runner's
exception message) is escaped instead: see
:func:`retinue.protocol.text.bounded_text`.
"""

from __future__ import annotations

import math

from retinue.errors import ArgumentTypeError, InvalidArgument

__all__ = [
    "PREVIEW_CHARS",
    "check_key",
    "check_seconds",
    "check_text",
    "preview",
]

PREVIEW_CHARS = 60
"""Most characters of a bad value that an error message quotes."""


def preview(value: object, max_chars: int = PREVIEW_CHARS) -> str:
    """Return a short, printable quotation of ``value`` for an error message.

    A string longer than ``max_chars`` is cut and its length added
    (``'xxxx…' (10485760 characters)``); ``repr`` escapes control characters
    and lone surrogates, so the result is always printable and encodable.
    Other values are quoted by type and a cut ``repr``.
    """
    if isinstance(value, str):
        if len(value) <= max_chars:
            return repr(value)
        return f"{value[:max_chars]!r}… ({len(value)} characters)"
    text = repr(value)
    if len(text) > max_chars:
        text = text[:max_chars] + "…"
    return f"{type(value).__name__} {text}"


def _require_str(value: object, field: str) -> str:
    """Return ``value`` if it is a ``str``; raise ``ArgumentTypeError`` naming ``field``."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{field} must be a str, not {type(value).__name__}")
    return value


def _check_encodable(text: str, field: str) -> None:
    """Raise ``InvalidArgument`` if ``text`` holds a character UTF-8 cannot encode."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        raise InvalidArgument(
            f"{field} contains a lone surrogate {bad!r} at index {exc.start}, which has no "
            "UTF-8 encoding and cannot be stored; decode the original bytes with "
            "errors='replace' (or 'backslashreplace') first"
        ) from None


def check_text(value: object, field: str, *, allow_blank: bool = False) -> str:
    """Return ``value`` if it is text the runtime can store; refuse it otherwise.

    Raises:
        ArgumentTypeError: ``value`` is not a ``str``.
        InvalidArgument: it contains a lone surrogate (the message names
            ``field`` and the index), or it is empty or only whitespace
            (unless ``allow_blank``).
    """
    text = _require_str(value, field)
    _check_encodable(text, field)
    if not allow_blank and not text.strip():
        what = "empty" if not text else "only whitespace"
        raise InvalidArgument(f"{field} must not be blank (it is {what})")
    return text


def check_key(value: object, field: str) -> str:
    """Return ``value`` if it is a usable deduplication or idempotency key.

    The length bound (``dedup_key_max_length``) is the caller's to check, as
    it raises :class:`~retinue.errors.DedupKeyTooLong` with the limit.

    Raises:
        ArgumentTypeError: ``value`` is not a ``str``.
        InvalidArgument: it is empty or contains a lone surrogate.
    """
    key = _require_str(value, field)
    if not key:
        raise InvalidArgument(f"{field} must not be empty; pass None for no key")
    _check_encodable(key, field)
    return key


def check_seconds(value: object, field: str = "timeout") -> float:
    """Return ``value`` as a float if it is a finite, non-negative number of seconds.

    Raises:
        ArgumentTypeError: ``value`` is not an ``int`` or ``float`` (``bool`` is refused).
        InvalidArgument: it is NaN, infinite or negative.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArgumentTypeError(f"{field} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if math.isnan(seconds):
        raise InvalidArgument(f"{field} must be a number of seconds, not NaN")
    if math.isinf(seconds):
        raise InvalidArgument(
            f"{field} must be finite, not {value!r}; pass None for the default wait"
        )
    if seconds < 0:
        raise InvalidArgument(f"{field} must not be negative, got {value!r}")
    return seconds
