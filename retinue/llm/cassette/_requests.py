"""A model request as a cassette keys it: canonical, secret-free, hashed, compared field by field.

The canonical request is ``{"model", "messages", "tools", "params"}``: the
litellm model name, the messages sent (system message first), the tool
schemas offered, and the other litellm keywords, without any that carries a
credential or only says how to reach the provider (``api_key``, ``api_base``,
headers, timeouts, retries, per-call prices: see :func:`canonical_request`).
Its key is the SHA-256 of its JSON with sorted keys. Redaction replaces, in
every string of a request, answer or tool result, each match of the given
regular expressions, and every occurrence of a secret (the runner's API key,
the values of ``*_API_KEY`` / ``*_TOKEN`` environment variables), by
:data:`REDACTED`; the key is computed after redaction, so a replayed request,
redacted the same way, finds its entry. A model call's index is read from its
messages (:func:`model_call_index`); :func:`value_at` and :func:`around` show
where a missed request differs.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from retinue.errors import ConfigurationError

__all__ = [
    "REDACTED",
    "Redactor",
    "around",
    "canonical_request",
    "first_difference",
    "model_call_index",
    "request_key",
    "value_at",
]

REDACTED = "[REDACTED]"
"""What a redacted match or secret becomes in a cassette."""

_LEFT_OUT = frozenset(
    {
        "model",
        "messages",
        "tools",
        "api_key",
        "api_base",
        "base_url",
        "api_version",
        "headers",
        "extra_headers",
        "timeout",
        "request_timeout",
        "max_retries",
        "num_retries",
        "input_cost_per_token",
        "output_cost_per_token",
        "metadata",
        "organization",
    }
)
_SECRET_NAME = re.compile(r"key|secret|password|passwd|auth|credential|cookie", re.IGNORECASE)
_SECRET_ENV = re.compile(r"(_API_KEY|_TOKEN|_SECRET|_PASSWORD)$")
_MIN_SECRET = 8
"""A shorter value is not treated as a secret to scrub (it would redact ordinary words)."""


class Redactor:
    """Scrubs secrets and the ``redact`` patterns out of every string of a value."""

    def __init__(self, patterns: Sequence[str] = (), secrets: Sequence[str | None] = ()) -> None:
        """Compile ``patterns``; scrub ``secrets`` and the environment's API keys too.

        Raises:
            ConfigurationError: a pattern is not a string or not a valid regular expression.
        """
        compiled = []
        for pattern in patterns:
            if not isinstance(pattern, str):
                raise ConfigurationError(f"a redact pattern must be a string, not {pattern!r}")
            try:
                compiled.append(re.compile(pattern))
            except re.error as exc:
                raise ConfigurationError(f"redact pattern {pattern!r} is invalid: {exc}") from None
        self.patterns = tuple(compiled)
        found = {s for s in secrets if isinstance(s, str) and len(s) >= _MIN_SECRET}
        found |= {
            value
            for name, value in os.environ.items()
            if _SECRET_ENV.search(name) and len(value) >= _MIN_SECRET
        }
        self.secrets = tuple(sorted(found, key=len, reverse=True))

    def text(self, value: str) -> str:
        """``value`` with every secret and pattern match replaced by :data:`REDACTED`."""
        for secret in self.secrets:
            value = value.replace(secret, REDACTED)
        for pattern in self.patterns:
            value = pattern.sub(REDACTED, value)
        return value

    def value(self, value: Any) -> Any:
        """A copy of ``value`` (JSON-like) with every string scrubbed (:meth:`text`)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {str(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


def canonical_request(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    kwargs: Mapping[str, Any],
    redactor: Redactor,
) -> dict[str, Any]:
    """The request as a cassette keys it: model, messages, tools and the other parameters,
    with no credential and no transport setting, scrubbed by ``redactor``."""
    params = {
        name: value
        for name, value in kwargs.items()
        if name not in _LEFT_OUT and not _SECRET_NAME.search(name)
    }
    request = {
        "model": model,
        "messages": list(messages),
        "tools": list(tools),
        "params": params,
    }
    builtins = msgspec.to_builtins(request, str_keys=True, enc_hook=repr)
    scrubbed: dict[str, Any] = redactor.value(builtins)
    return scrubbed


def request_key(request: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of a canonical request's JSON, keys sorted."""
    return hashlib.sha256(msgspec.json.encode(request, order="sorted")).hexdigest()


def first_difference(recorded: Any, live: Any, at: str = "") -> str | None:
    """The first field (``messages[3].content``, ``params.temperature``...) where ``live``
    differs from ``recorded``; None when they are equal.

    Top-level fields are compared in the order model, messages, tools,
    params; a mapping's keys in sorted order; a list item by item, then by length.
    """
    if type(recorded) is not type(live) and not (_number(recorded) and _number(live)):
        return at or "request"
    if isinstance(recorded, dict):
        order = ["model", "messages", "tools", "params"] if not at else []
        keys = order + sorted((set(recorded) | set(live)) - set(order), key=str)
        for key in keys:
            if key not in recorded and key not in live:
                continue
            where = f"{at}.{key}" if at else str(key)
            if key not in recorded or key not in live:
                return where
            found = first_difference(recorded[key], live[key], where)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list):
        for index, (old, new) in enumerate(zip(recorded, live, strict=False)):
            found = first_difference(old, new, f"{at}[{index}]")
            if found is not None:
                return found
        if len(recorded) != len(live):
            return f"{at}[{min(len(recorded), len(live))}]"
        return None
    return None if recorded == live else (at or "request")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def model_call_index(messages: Sequence[Mapping[str, Any]]) -> int:
    """The index of a model call made with ``messages``: the assistant messages among them
    (the agent's calls answered and kept before this one, whichever process made them)."""
    return sum(1 for m in messages if m.get("role") == "assistant")


def around(was: Any, now: Any) -> tuple[Any, Any]:
    """Two differing texts cut to where they start to differ (other values as they are)."""
    if not (isinstance(was, str) and isinstance(now, str)):
        return was, now
    start = next(
        (i for i, (a, b) in enumerate(zip(was, now, strict=False)) if a != b),
        min(len(was), len(now)),
    )
    if start <= 40:
        return was, now
    cut = start - 40
    return "…" + was[cut:], "…" + now[cut:]


def value_at(request: Any, field: str) -> Any:
    """The value of ``field`` (``messages[3].content``) in ``request`` (None: absent)."""
    value = request
    for part in field.replace("[", ".[").split("."):
        if not part:
            continue
        try:
            value = value[int(part[1:-1])] if part.startswith("[") else value[part]
        except (KeyError, IndexError, TypeError, ValueError):
            return None
    return value
