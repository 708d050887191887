"""The hook points where a turn reports its model calls and tool calls as they happen.

One narrow interface, used by the LLM layer: a turn's :class:`TurnWatch`
(its control's ``watch``) opens a :class:`ModelCallWatch` per model call (told of each
retry, each piece of streamed text, and the answer's usage) and a
:class:`ToolCallWatch` per tool call (told how it ended). What they are told
becomes live events on the runtime's bus (``ToolCallStarted``,
``ToolCallFinished``, ``ModelCallFinished``, ``ModelDelta``): not store
transitions, so published at once, with no supervisor round trip.

Order: a turn's live events follow its ``turn_started`` (the transition
publishes its events before it starts the runner) and precede its
``turn_settled``: each is published atomically with the turn's cancellation
(:meth:`~retinue.actors.turns._control.TurnControl.while_running`, on the
turn's control), so once an interrupt has cancelled a turn, its runner
publishes nothing more, and the settle's events come after all it did
publish. With nobody listening, nothing is built.

Spans: when the runtime traces (:mod:`retinue.tracing`, extra ``otel``), the
same watches carry a :class:`Spans` implementation's span objects (a turn's,
each model call's, each tool call's); the watch makes each current while its
operation runs (:meth:`TurnWatch.current`), so what it starts nests under it.
This module imports nothing of OpenTelemetry.

The :class:`Observer` is the runtime's (one per world); the agent actor asks
it for each turn's watch as the runner starts.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from retinue.actors.events._bus import EventBus
from retinue.protocol.limits import Limits
from retinue.protocol.messages import (
    AgentInfo,
    Event,
    ModelCallFinished,
    ModelDelta,
    ToolCallFinished,
    ToolCallStarted,
    Usage,
)
from retinue.protocol.text import bounded_text

__all__ = [
    "QUIET",
    "ModelCallWatch",
    "Observer",
    "Span",
    "Spans",
    "ToolCallWatch",
    "TurnWatch",
    "Watched",
]


class Watched(Protocol):
    """What a watch needs of a turn (its control,
    :class:`~retinue.actors.turns._control.TurnControl`, has it)."""

    agent: AgentInfo
    limits: Limits
    reason: str

    def while_running(self, action: Callable[[], None]) -> bool:
        """Run ``action`` unless the turn is cancelled, atomically with its cancellation."""
        ...


class Span(Protocol):
    """One span of a :class:`Spans` implementation (a turn's, a model call's, a tool call's)."""

    def enter(self) -> object | None:
        """Make the span current in this thread or task; return what :meth:`leave` takes."""
        ...

    def leave(self, token: object | None) -> None:
        """Undo :meth:`enter`."""
        ...


class Spans(Protocol):
    """Where spans go (:class:`retinue.tracing.Tracing` implements it).

    ``turn(turn, model)`` starts a turn's span and returns it; it has
    ``end(status, error)``, ``traceparent()``, ``model_call(model, request)``
    (a span with ``retry(attempt, error, delay_s)`` and ``end(usage, response,
    error)``) and ``tool_call(call_id, tool, kind, arguments)`` (a span with
    ``end(error, result)``). ``capture()`` is the caller's current span as a W3C
    ``traceparent`` (None: none), stored with what a command starts.
    ``recording()`` says whether a span started now may record (an SDK is
    configured); while it does not, a turn with no stored trace context gets
    no span (it would be an invalid one, with nothing to pass on).

    The observer asks both through three attributes, OpenTelemetry's own
    callables and objects, so that a runtime that traces nothing never calls
    into the tracing package (``python -m stress.hops``): ``current_context()``
    is the caller's context (empty: no span is current, nothing to capture);
    while ``global_provider()`` is ``unset_provider`` (the API's proxy), no
    span may record; ``unset_provider`` None: every span may (a provider was
    given).
    """

    @property
    def current_context(self) -> Callable[[], Mapping[str, object]]:
        """The caller's current context (OpenTelemetry's ``context.get_current``)."""
        ...

    @property
    def global_provider(self) -> Callable[[], object]:
        """The global tracer provider now (OpenTelemetry's ``trace.get_tracer_provider``)."""
        ...

    @property
    def unset_provider(self) -> object | None:
        """The global provider while none is set (no span may record); None: spans always may."""
        ...

    def capture(self) -> str | None:
        """The caller's current span as a W3C ``traceparent``."""
        ...

    def recording(self) -> bool:
        """Whether a span started now may record."""
        ...

    def turn(self, turn: Watched, model: str | None) -> Any:
        """Start ``turn``'s span (its runner starts now)."""
        ...


class TurnWatch:
    """What one turn reports as it runs; the LLM layer's one handle (the turn's control's
    ``watch``).

    The watch holds its turn weakly: the turn holds its watch, and a cycle
    between them would leave every finished turn to the cyclic collector (whose
    passes, with a thousand turns in flight, cost more than the turns' own
    work). Once the turn is gone its watch reports nothing.
    """

    __slots__ = ("_turn", "bus", "span")

    def __init__(self, bus: EventBus | None, turn: Watched | None, span: Any = None) -> None:
        """Report ``turn``'s calls on ``bus`` (None for either: report nothing), and its
        spans under ``span`` (its turn's span; None: no spans)."""
        self.bus = bus
        self._turn = None if turn is None else weakref.ref(turn)
        self.span = span

    @property
    def turn(self) -> Watched | None:
        """The watched turn (None: none, or it is gone)."""
        ref = self._turn
        return None if ref is None else ref()

    @property
    def listening(self) -> bool:
        """Whether anyone takes the live events now (else building them is skipped)."""
        bus = self.bus
        return bus is not None and bus.active

    def publish(self, make: Callable[[AgentInfo, float], Event]) -> None:
        """Publish ``make(agent, now)`` unless nobody listens or the turn was cancelled."""
        bus, turn = self.bus, self.turn
        if bus is None or turn is None or not bus.active:
            return
        agent = turn.agent
        turn.while_running(lambda: bus.publish([make(agent, time.time())]))

    def preview(self, text: str) -> str:
        """``text`` cut at ``Limits.event_preview_bytes`` (a marker says so)."""
        turn = self.turn
        limit = turn.limits.event_preview_bytes if turn is not None else 1024
        return bounded_text(text, limit)

    def model_call(self, model: str, request: Mapping[str, Any] | None = None) -> ModelCallWatch:
        """Open the watch of one model call of ``model`` (it starts now).

        ``request`` is what the model is sent (litellm's keywords), for its span.
        """
        span = None if self.span is None else self.span.model_call(model, request or {})
        return ModelCallWatch(self, model, span)

    def tool_call(
        self, call_id: object, tool: object, arguments: object, kind: str = "function"
    ) -> ToolCallWatch:
        """Open the watch of one tool call (it starts now): ``ToolCallStarted``.

        The model's call id, tool name and arguments are taken as they came
        (a malformed call included) and shown as text. ``kind`` is ``function``,
        or ``extension`` for an MCP server's tool.
        """
        text = arguments if isinstance(arguments, str) else str(arguments)
        call, name = str(call_id), str(tool)
        span = None if self.span is None else self.span.tool_call(call, name, kind, text)
        return ToolCallWatch(self, call, name, text, span)

    def current(self) -> contextlib.AbstractContextManager[None]:
        """Make the turn's span current in this thread or task while inside.

        With no span, a shared no-op context (no generator built per call).
        """
        return _current(self.span)

    def end(self, status: str, error: str | None) -> None:
        """The turn's runner is done: ``completed``, ``failed`` or ``interrupted``."""
        if self.span is not None:
            self.span.end(status, error)

    def traceparent(self) -> str | None:
        """The turn's span as a W3C ``traceparent`` (None: no span)."""
        return None if self.span is None else self.span.traceparent()


_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()
"""What ``current()`` is without a span: reusable, it does nothing."""


def _current(span: Span | None) -> contextlib.AbstractContextManager[None]:
    """Make ``span`` current while inside; with no span, the shared no-op context."""
    return _NO_SPAN if span is None else _entered(span)


@contextlib.contextmanager
def _entered(span: Span) -> Iterator[None]:
    """Make ``span`` current while inside."""
    token = span.enter()
    try:
        yield
    finally:
        span.leave(token)


QUIET = TurnWatch(None, None)
"""The watch of a turn nobody observes (a turn built outside a runtime)."""


class ModelCallWatch:
    """One model call: its retries, its streamed text, its answer."""

    __slots__ = ("model", "span", "started", "watch")

    def __init__(self, watch: TurnWatch, model: str, span: Any = None) -> None:
        """Start timing a call of ``model`` (``span``: its span, if the runtime traces)."""
        self.watch = watch
        self.model = model
        self.span = span
        self.started = time.monotonic()

    def current(self) -> contextlib.AbstractContextManager[None]:
        """Make the call's span current while inside (the model is called inside).

        With no span, a shared no-op context (no generator built per call).
        """
        return _current(self.span)

    def delta(self, text: str) -> None:
        """A piece of the answer's text arrived: ``ModelDelta``."""
        self.watch.publish(
            lambda agent, at: ModelDelta(agent_id=agent.id, path=agent.path, at=at, text=text)
        )

    def retry(self, attempt: int, error: str, delay_s: float) -> None:
        """Attempt ``attempt`` failed with ``error``; the call is retried in ``delay_s``."""
        if self.span is not None:
            self.span.retry(attempt, error, delay_s)

    def finished(self, usage: Usage, response: Any = None) -> None:
        """The call was answered with ``usage`` (``response``: litellm's): ``ModelCallFinished``."""
        if self.span is not None:
            self.span.end(usage, response, None)
        bus = self.watch.bus  # (listening's test, without its property's frame)
        if bus is None or not bus.active:
            return  # no event is built for nobody (nor its duration measured)
        duration = time.monotonic() - self.started
        self.watch.publish(
            lambda agent, at: ModelCallFinished(
                agent_id=agent.id,
                path=agent.path,
                at=at,
                model=self.model,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cost_usd=usage.cost_usd,
                duration_s=duration,
            )
        )

    def failed(self, error: BaseException) -> None:
        """The call failed for good (or was cancelled) with ``error``."""
        if self.span is not None:
            self.span.end(None, None, error)


class ToolCallWatch:
    """One tool call of a turn: ``ToolCallStarted`` now, ``ToolCallFinished`` at its end."""

    __slots__ = ("call_id", "span", "started", "tool", "watch")

    def __init__(
        self, watch: TurnWatch, call_id: str, tool: str, arguments: str, span: Any = None
    ) -> None:
        """Start timing the call and publish that it started."""
        self.watch = watch
        self.call_id = call_id
        self.tool = tool
        self.span = span
        self.started = time.monotonic()
        if watch.listening:
            preview = watch.preview(arguments)
            watch.publish(
                lambda agent, at: ToolCallStarted(
                    agent_id=agent.id,
                    path=agent.path,
                    at=at,
                    call_id=call_id,
                    tool=tool,
                    arguments_preview=preview,
                )
            )

    def current(self) -> contextlib.AbstractContextManager[None]:
        """Make the call's span current while inside (what the tool spawns nests under it).

        With no span, a shared no-op context (no generator built per call).
        """
        return _current(self.span)

    def finished(self, error: str | None, result: str | None = None) -> None:
        """The call ended: ok (``error`` None) with ``result``, or with the error the model
        was given."""
        duration = time.monotonic() - self.started
        if self.span is not None:
            self.span.end(error, result)
        watch = self.watch
        if not watch.listening:
            return
        shown = None if error is None else watch.preview(error)
        watch.publish(
            lambda agent, at: ToolCallFinished(
                agent_id=agent.id,
                path=agent.path,
                at=at,
                call_id=self.call_id,
                tool=self.tool,
                ok=error is None,
                duration_s=duration,
                error=shown,
            )
        )

    def cancelled(self) -> None:
        """The turn was cancelled while the call ran: its span ends, nothing is published."""
        if self.span is not None:
            self.span.end("cancelled", None)


class Observer:
    """The runtime's observer: hands each turn its watch. Thread-safe."""

    def __init__(self, bus: EventBus, spans: Spans | None = None) -> None:
        """Report on ``bus``; trace through ``spans`` (None: no spans)."""
        self.bus = bus
        self.spans = spans

    def watch(self, turn: Watched, model: str | None = None) -> TurnWatch:
        """Return ``turn``'s watch, its span started (the agent actor calls this as its
        runner starts; ``model`` is the runner's model, if it has one)."""
        spans = self.spans
        if spans is None or (getattr(turn, "trace", None) is None and not _may_record(spans)):
            return TurnWatch(self.bus, turn)  # no span could record or pass a context on
        return TurnWatch(self.bus, turn, spans.turn(turn, model))

    def capture(self) -> str | None:
        """The caller's current span as a W3C ``traceparent`` (None: none, or no spans).

        An empty current context (no span is current) answers None at once.
        """
        spans = self.spans
        if spans is None or not spans.current_context():
            return None
        return spans.capture()


def _may_record(spans: Spans) -> bool:
    """Whether a span ``spans`` starts now may record (as ``spans.recording()`` says),
    asked through OpenTelemetry's own callables, not the tracing package's."""
    unset = spans.unset_provider
    return unset is None or spans.global_provider() is not unset
