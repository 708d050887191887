"""An agent's trace id, and the link to it in a tracing UI (``--trace-url``).

Every agent keeps the W3C ``traceparent`` its turns' spans continue
(``AgentDetail.trace``, None when the runtime traced nothing). Its trace id
(32 hex digits) is shown in the agent's detail, and linked when the view was
started with a trace URL template such as
``http://127.0.0.1:16686/trace/{trace_id}`` (Jaeger) or
``http://grafana.example/explore?...{trace_id}``: ``{trace_id}`` is the only
placeholder, and the template must be an ``http`` or ``https`` address.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from retinue.errors import ArgumentTypeError, InvalidArgument

__all__ = ["PLACEHOLDER", "check_trace_url", "trace_id_of", "trace_link"]

PLACEHOLDER = "{trace_id}"
"""The text of a trace URL template that the trace id replaces."""
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
MAX_TEMPLATE = 2000


def check_trace_url(template: object) -> str | None:
    """Return ``template`` checked (None stays None).

    Raises:
        ArgumentTypeError: not a str.
        InvalidArgument: not an ``http``/``https`` address with a host, no
            ``{trace_id}`` in it, another ``{...}`` placeholder, a space or a
            control character, or longer than 2000 characters.
    """
    if template is None:
        return None
    if not isinstance(template, str):
        raise ArgumentTypeError(f"trace_url must be a str, not {type(template).__name__}")
    text = template.strip()
    hint = "e.g. 'http://127.0.0.1:16686/trace/{trace_id}'"
    if len(text) > MAX_TEMPLATE or any(c.isspace() or ord(c) < 32 for c in text):
        raise InvalidArgument(
            f"trace URL {text[:60]!r} is too long or holds a space or control character ({hint})"
        )
    if PLACEHOLDER not in text:
        raise InvalidArgument(f"trace URL {text[:60]!r} has no {PLACEHOLDER} placeholder ({hint})")
    if "{" in text.replace(PLACEHOLDER, "") or "}" in text.replace(PLACEHOLDER, ""):
        raise InvalidArgument(
            f"trace URL {text[:60]!r}: {PLACEHOLDER} is the only placeholder it may hold"
        )
    try:
        parts = urlsplit(text.replace(PLACEHOLDER, "0" * 32))
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError as exc:
        raise InvalidArgument(f"trace URL {text[:60]!r} is not an address: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(f"trace URL {text[:60]!r} must be an http(s) address ({hint})")
    return text


def trace_id_of(traceparent: str | None) -> str | None:
    """Return the trace id of a W3C ``traceparent`` (None: none, or not one)."""
    if traceparent is None:
        return None
    found = _TRACEPARENT.fullmatch(traceparent.strip().lower())
    if found is None or found.group(1) == "0" * 32:
        return None
    return found.group(1)


def trace_link(template: str | None, trace_id: str | None) -> str | None:
    """Return the template with the trace id in it (None without either)."""
    if template is None or trace_id is None:
        return None
    return template.replace(PLACEHOLDER, trace_id)
