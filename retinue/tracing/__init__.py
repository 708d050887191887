"""``retinue.tracing``: OpenTelemetry spans of turns, model calls and tool calls (extra: ``otel``).

Follows the OpenTelemetry GenAI semantic conventions of semantic-conventions
v1.41.1 (``docs/gen-ai``, status Development; the last release before the
GenAI conventions moved to their own repository):

- ``invoke_agent {profile}`` (INTERNAL) for each turn: ``gen_ai.operation.name``,
  ``gen_ai.agent.name`` (the profile), ``gen_ai.agent.id``, ``gen_ai.conversation.id``
  (the top-level agent's id), ``gen_ai.provider.name`` and ``gen_ai.request.model``
  for a model agent, ``retinue.agent.path``, ``retinue.turn.generation``,
  ``retinue.turn.reason``, ``retinue.turn.attempt`` and ``retinue.turn.status`` (how
  it settled); a failed turn has status ERROR with its error and ``error.type``;
- ``chat {model}`` (CLIENT) for each model call: provider, request model and the
  request parameters that were set, ``gen_ai.request.stream``, ``server.address``
  and ``server.port``, the response model, id, finish reasons and usage; each
  retry is a ``retry`` span event; a failed call has status ERROR;
- ``execute_tool {tool}`` (INTERNAL) for each tool call: ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``gen_ai.tool.type`` (``extension`` for an MCP server's
  tool, ``function`` otherwise); a failed call has status ERROR.

The trace nests like the tree: a turn's span is the child of the span that
spawned its agent (the parent's ``execute_tool spawn_subagent(s)`` span, a Python
runner's turn, or the host's current span at ``rt.spawn``), whose W3C
``traceparent`` is stored with the agent, so every later turn (a follow-up, a
wake, a resume, a turn restored after a crash) continues that trace, in this
process or the next (an agent spawned outside any span takes its first turn's
span as its trace). The span that caused a later turn is its link: the
caller's at ``follow_up`` or ``resume``, the child's turn whose completion woke
the idle agent.

Content (instructions, the chat, answers, tool arguments and results) is recorded
only with ``capture_content=True`` or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
set to ``true``, ``span_only`` or ``span_and_event``, each value cut at
``Limits.trace_content_max_bytes``. ``OTEL_SDK_DISABLED=true`` turns the spans off.
"""

from __future__ import annotations

from typing import Any

from retinue.errors import ExtraNotInstalled

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import Link, NonRecordingSpan, ProxyTracerProvider, SpanKind
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ExtraNotInstalled("otel", "retinue.tracing", exc.name or "opentelemetry-api") from None

from retinue.actors.events import Watched
from retinue.tracing.names import (
    CONTENT_ENV,
    SCHEMA_URL,
    SEMCONV_VERSION,
    content_from_env,
    otel_provider,
    span_context,
    traceparent,
)
from retinue.tracing.spans import ChatSpan, ToolSpan, TurnSpan

__all__ = [
    "CONTENT_ENV",
    "SEMCONV_VERSION",
    "ChatSpan",
    "ToolSpan",
    "Tracing",
    "TurnSpan",
    "content_from_env",
    "otel_provider",
    "span_context",
    "traceparent",
]


def _unset_provider() -> object | None:
    """OpenTelemetry's global tracer provider while none is set (its proxy, one object);
    None when one is already set (then every span may record, for good: it is set once)."""
    provider = trace.get_tracer_provider()
    return provider if isinstance(provider, ProxyTracerProvider) else None


class Tracing:
    """Spans of one runtime's turns, model calls and tool calls (implements ``Spans``)."""

    def __init__(
        self, provider: Any = None, *, capture_content: bool | None = None, max_content: int
    ) -> None:
        """Trace with ``provider`` (None: the global tracer provider, looked up per span).

        ``capture_content`` None reads :data:`CONTENT_ENV`; ``max_content`` bounds
        each recorded content value, in bytes of UTF-8.
        """
        if provider is None:
            self.tracer = trace.get_tracer("retinue", schema_url=SCHEMA_URL)
        else:
            self.tracer = provider.get_tracer("retinue", schema_url=SCHEMA_URL)
        self.given = provider is not None
        # What the observer asks without calling into this package (Spans):
        self.current_context = otel_context.get_current
        self.global_provider = trace.get_tracer_provider
        self.unset_provider: object | None = None if self.given else _unset_provider()
        self.content = content_from_env() if capture_content is None else capture_content
        self.max_content = max_content

    def recording(self) -> bool:
        """Whether a span started now may record: a provider was given, or the global
        one is set (an SDK configured, before or after the runtime opened).

        While it is False, OpenTelemetry's API answers every span with its
        parent context (an invalid span when there is none), so the observer
        starts no span for a turn with no stored trace context.
        """
        unset = self.unset_provider
        return unset is None or trace.get_tracer_provider() is not unset

    def capture(self) -> str | None:
        """The caller's current span as a W3C ``traceparent`` (None: no span)."""
        return traceparent(trace.get_current_span())

    def turn(self, turn: Watched, model: str | None) -> TurnSpan:
        """Start the ``invoke_agent`` span of ``turn`` (its runner starts now).

        Its parent is the agent's stored trace context (``turn.trace``); with
        none, it starts a trace of its own (never under whatever span the
        runtime's thread has). The span that caused the turn is a link.
        """
        agent = turn.agent
        parent = span_context(getattr(turn, "trace", None))
        if parent is not None:
            ctx = trace.set_span_in_context(NonRecordingSpan(parent))
        else:
            ctx = otel_context.Context()
        cause = span_context(getattr(turn, "cause", None))
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent.profile,
            "gen_ai.agent.id": agent.id,
            "gen_ai.conversation.id": getattr(turn, "root_id", None) or agent.id,
            "retinue.agent.path": agent.path,
            "retinue.turn.generation": agent.generation,
            "retinue.turn.reason": turn.reason,
            "retinue.turn.attempt": agent.attempt,
        }
        if model:
            provider, name = otel_provider(model)
            attributes["gen_ai.provider.name"] = provider
            attributes["gen_ai.request.model"] = name
        span = self.tracer.start_span(
            f"invoke_agent {agent.profile}",
            context=ctx,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=[Link(cause)] if cause is not None else None,
        )
        return TurnSpan(self, span)
