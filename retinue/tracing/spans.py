"""The three spans of a turn: ``invoke_agent``, ``chat`` and ``execute_tool``.

Each is made current (:meth:`_Span.enter`) only in the thread or task its
operation runs in, and ended once: a turn's span with how it settled, a model
call's with its answer or error, a tool call's with its error (as status) or,
with content on, its result. A span that does not record (no SDK configured)
is never made current and gets no attributes: it costs its creation only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from retinue.protocol.messages import Usage
from retinue.tracing.content import (
    bounded_json,
    input_messages,
    output_messages,
    system_instructions,
)
from retinue.tracing.names import (
    REQUEST_ATTRIBUTES,
    error_type,
    otel_provider,
    server_attributes,
    traceparent,
)

__all__ = ["ChatSpan", "Recorder", "ToolSpan", "TurnSpan"]


class Recorder(Protocol):
    """What the spans need of their :class:`~retinue.tracing.Tracing`."""

    tracer: Any
    content: bool
    max_content: int


class _Span:
    """A span made current (in one task or thread) while its operation runs."""

    __slots__ = ("recorder", "span")

    def __init__(self, recorder: Recorder, span: Any) -> None:
        self.recorder = recorder
        self.span = span

    def enter(self) -> object | None:
        """Make the span current here; return the token :meth:`leave` takes."""
        if not self.span.is_recording():
            return None  # nothing records: no context to carry
        return otel_context.attach(trace.set_span_in_context(self.span))

    def leave(self, token: object | None) -> None:
        """Undo :meth:`enter`."""
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    def _content(self, name: str, value: Any) -> None:
        """Record content ``value`` under ``name`` (content opt-in only), bounded."""
        recorder = self.recorder
        if recorder.content and self.span.is_recording():
            self.span.set_attribute(name, bounded_json(value, recorder.max_content))


class TurnSpan(_Span):
    """The ``invoke_agent`` span of one turn."""

    __slots__ = ()

    def traceparent(self) -> str | None:
        """The span as a W3C ``traceparent`` (what the agent's later turns continue)."""
        return traceparent(self.span)

    def end(self, status: str, error: str | None) -> None:
        """The turn settled ``status`` (``completed``, ``failed``, ``interrupted``)."""
        span = self.span
        if span.is_recording():
            span.set_attribute("retinue.turn.status", status)
            if status == "failed":
                span.set_attribute("error.type", error_type(error or ""))
                span.set_status(StatusCode.ERROR, error or "failed")
        span.end()

    def model_call(self, model: str, request: Mapping[str, Any]) -> ChatSpan:
        """Start the ``chat`` span of one model call (``request``: litellm's keywords)."""
        provider, name = otel_provider(model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": name,
        }
        for key, attribute in REQUEST_ATTRIBUTES.items():
            value = request.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[attribute] = value
        stop = request.get("stop")
        if stop:
            sequences = [stop] if isinstance(stop, str) else [str(s) for s in stop]
            attributes["gen_ai.request.stop_sequences"] = sequences
        if request.get("stream"):
            attributes["gen_ai.request.stream"] = True
        attributes.update(server_attributes(request.get("api_base")))
        span = self.recorder.tracer.start_span(
            f"chat {name}",
            context=trace.set_span_in_context(self.span),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        chat = ChatSpan(self.recorder, span)
        messages = list(request.get("messages") or [])
        instructions = system_instructions(messages)
        if instructions:
            chat._content("gen_ai.system_instructions", instructions)
        chat._content("gen_ai.input.messages", input_messages(messages))
        return chat

    def tool_call(self, call_id: str, tool: str, kind: str, arguments: str) -> ToolSpan:
        """Start the ``execute_tool`` span of one tool call."""
        span = self.recorder.tracer.start_span(
            f"execute_tool {tool}",
            context=trace.set_span_in_context(self.span),
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": kind,
            },
        )
        call = ToolSpan(self.recorder, span)
        call._content("gen_ai.tool.call.arguments", arguments)
        return call


class ChatSpan(_Span):
    """The ``chat`` span of one model call."""

    __slots__ = ()

    def retry(self, attempt: int, error: str, delay_s: float) -> None:
        """Attempt ``attempt`` failed: a ``retry`` event on the span."""
        self.span.add_event(
            "retry",
            {
                "retinue.retry.attempt": attempt,
                "retinue.retry.delay_s": delay_s,
                "error.message": error,
            },
        )

    def end(self, usage: Usage | None, response: Any, error: BaseException | None) -> None:
        """The call was answered (``usage``, ``response``) or failed with ``error``."""
        span = self.span
        if span.is_recording():
            if error is not None:
                status = getattr(error, "status", None)
                span.set_attribute("error.type", str(status) if status else type(error).__name__)
                span.set_status(StatusCode.ERROR, str(error) or type(error).__name__)
            if usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
            if response is not None:
                self._response(response)
        span.end()

    def _response(self, response: Any) -> None:
        span = self.span
        model = getattr(response, "model", None)
        if isinstance(model, str) and model:
            span.set_attribute("gen_ai.response.model", model)
        ident = getattr(response, "id", None)
        if isinstance(ident, str) and ident:
            span.set_attribute("gen_ai.response.id", ident)
        choices = list(getattr(response, "choices", None) or [])
        reasons = [str(getattr(c, "finish_reason", None) or "") for c in choices]
        if any(reasons):
            span.set_attribute("gen_ai.response.finish_reasons", reasons)
        if choices and self.recorder.content:
            self._content("gen_ai.output.messages", output_messages(choices, reasons))


class ToolSpan(_Span):
    """The ``execute_tool`` span of one tool call."""

    __slots__ = ()

    def end(self, error: str | None, result: str | None) -> None:
        """The call ended: ok (``error`` None) with ``result``, or failed with ``error``."""
        span = self.span
        if span.is_recording():
            if error is not None:
                span.set_attribute("error.type", "cancelled" if error == "cancelled" else "tool")
                span.set_status(StatusCode.ERROR, error)
            elif result is not None:
                self._content("gen_ai.tool.call.result", result)
        span.end()
