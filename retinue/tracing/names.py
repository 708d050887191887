"""The names the spans use: the conventions' release, providers, request keys, trace contexts.

Pure functions over strings and OpenTelemetry's span contexts: which
``gen_ai.provider.name`` a litellm model string has, which request keyword
sets which ``gen_ai.request.*`` attribute, ``server.*`` of an ``api_base``, a
span's W3C ``traceparent`` and back, and whether the environment asks for
content on spans.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.trace import SpanContext, TraceFlags

__all__ = [
    "CONTENT_ENV",
    "REQUEST_ATTRIBUTES",
    "SCHEMA_URL",
    "SEMCONV_VERSION",
    "content_from_env",
    "error_type",
    "otel_provider",
    "server_attributes",
    "span_context",
    "traceparent",
]

SEMCONV_VERSION = "1.41.1"
"""The OpenTelemetry semantic conventions release whose GenAI names the spans follow."""
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The environment variable OpenTelemetry's GenAI instrumentations read to record content."""
_CONTENT_ON = frozenset({"true", "1", "yes", "span_only", "span_and_event"})

# litellm's provider names -> the conventions' gen_ai.provider.name well-known values.
_PROVIDERS = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "anthropic": "anthropic",
    "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "bedrock": "aws.bedrock",
    "cohere": "cohere",
    "cohere_chat": "cohere",
    "deepseek": "deepseek",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "vertex_ai_beta": "gcp.vertex_ai",
    "groq": "groq",
    "watsonx": "ibm.watsonx.ai",
    "mistral": "mistral_ai",
    "perplexity": "perplexity",
    "xai": "x_ai",
}
REQUEST_ATTRIBUTES = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "seed": "gen_ai.request.seed",
    "n": "gen_ai.request.choice.count",
}
"""litellm request keywords -> the ``gen_ai.request.*`` attribute each sets (when given)."""


def content_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for content on spans (:data:`CONTENT_ENV` is ``true``,
    ``span_only`` or ``span_and_event``, any case)."""
    value = (os.environ if environ is None else environ).get(CONTENT_ENV, "")
    return value.strip().lower() in _CONTENT_ON


def otel_provider(model: str) -> tuple[str, str]:
    """Return ``(gen_ai.provider.name, gen_ai.request.model)`` of a litellm model string.

    ``openai/gpt-4o-mini`` -> ``("openai", "gpt-4o-mini")``; a provider the
    conventions do not list keeps litellm's name (``retinue/scripted`` ->
    ``("retinue", "scripted")``); a model with no provider prefix is read as
    litellm reads it, an ``openai`` one.
    """
    provider, sep, name = model.partition("/")
    if not sep:
        return "openai", model
    return _PROVIDERS.get(provider, provider), name


def server_attributes(api_base: object) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of an ``api_base`` URL ({} when none is set)."""
    if not isinstance(api_base, str) or not api_base:
        return {}
    try:
        parts = urlsplit(api_base)
        port = parts.port
    except ValueError:
        return {}
    if not parts.hostname:
        return {}
    default = 443 if parts.scheme == "https" else 80
    return {"server.address": parts.hostname, "server.port": port or default}


def error_type(error: str) -> str:
    """The low-cardinality class of a stored error (``"ModelCallFailed: ..."`` ->
    ``ModelCallFailed``; ``_OTHER`` when it names none)."""
    head, sep, _ = error.partition(":")
    return head if sep and head.isidentifier() else "_OTHER"


def traceparent(span: Any) -> str | None:
    """The W3C ``traceparent`` of ``span``'s context (None if it has no valid one)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def span_context(value: str | None) -> SpanContext | None:
    """The remote span context a stored ``traceparent`` names (None if it is not one)."""
    if not value:
        return None
    parts = value.split("-")
    if len(parts) != 4 or parts[0] != "00":
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    ctx = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 0xFF))
    return ctx if ctx.is_valid else None
