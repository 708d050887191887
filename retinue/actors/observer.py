"""The hook points where a turn reports its model calls and tool calls as they happen.

One narrow interface, used by the LLM layer: a turn's :class:`TurnWatch`
(``turn.watch``) opens a :class:`ModelCallWatch` per model call (told of each
retry, each piece of streamed text, and the answer's usage) and a
:class:`ToolCallWatch` per tool call (told how it ended). What they are told
becomes live events on the runtime's bus (``ToolCallStarted``,
``ToolCallFinished``, ``ModelCallFinished``, ``ModelDelta``): not store
transitions, so published at once, with no supervisor round trip.

Order: a turn's live events follow its ``turn_started`` (the transition
publishes its events before it starts the runner) and precede its
``turn_settled``: each is published atomically with the turn's cancellation
(:meth:`Turn.while_running`), so once an interrupt has cancelled a turn, its
runner publishes nothing more, and the settle's events come after all it did
publish. With nobody listening, nothing is built.

The :class:`Observer` is the runtime's (one per world); the agent actor asks
it for each turn's watch as the runner starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from retinue.actors.events import EventBus
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

__all__ = ["QUIET", "ModelCallWatch", "Observer", "ToolCallWatch", "TurnWatch", "Watched"]


class Watched(Protocol):
    """What a watch needs of a turn (:class:`~retinue.actors.turn.Turn` has it)."""

    agent: AgentInfo
    limits: Limits

    def while_running(self, action: Callable[[], None]) -> bool:
        """Run ``action`` unless the turn is cancelled, atomically with its cancellation."""
        ...


class TurnWatch:
    """What one turn reports as it runs; the LLM layer's one handle (``turn.watch``)."""

    __slots__ = ("bus", "turn")

    def __init__(self, bus: EventBus | None, turn: Watched | None) -> None:
        """Report ``turn``'s calls on ``bus`` (None for either: report nothing)."""
        self.bus = bus
        self.turn = turn

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
        limit = self.turn.limits.event_preview_bytes if self.turn is not None else 1024
        return bounded_text(text, limit)

    def model_call(self, model: str) -> ModelCallWatch:
        """Open the watch of one model call of ``model`` (it starts now)."""
        return ModelCallWatch(self, model)

    def tool_call(self, call_id: object, tool: object, arguments: object) -> ToolCallWatch:
        """Open the watch of one tool call (it starts now): ``ToolCallStarted``.

        The model's call id, tool name and arguments are taken as they came
        (a malformed call included) and shown as text.
        """
        text = arguments if isinstance(arguments, str) else str(arguments)
        return ToolCallWatch(self, str(call_id), str(tool), text)


QUIET = TurnWatch(None, None)
"""The watch of a turn nobody observes (a turn built outside a runtime)."""


class ModelCallWatch:
    """One model call: its retries, its streamed text, its answer."""

    __slots__ = ("model", "started", "watch")

    def __init__(self, watch: TurnWatch, model: str) -> None:
        """Start timing a call of ``model``."""
        self.watch = watch
        self.model = model
        self.started = time.monotonic()

    def delta(self, text: str) -> None:
        """A piece of the answer's text arrived: ``ModelDelta``."""
        self.watch.publish(
            lambda agent, at: ModelDelta(agent_id=agent.id, path=agent.path, at=at, text=text)
        )

    def retry(self, attempt: int, error: str, delay_s: float) -> None:
        """Attempt ``attempt`` failed with ``error``; the call is retried in ``delay_s``."""

    def finished(self, usage: Usage) -> None:
        """The call was answered with ``usage``: ``ModelCallFinished``."""
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


class ToolCallWatch:
    """One tool call of a turn: ``ToolCallStarted`` now, ``ToolCallFinished`` at its end."""

    __slots__ = ("call_id", "started", "tool", "watch")

    def __init__(self, watch: TurnWatch, call_id: str, tool: str, arguments: str) -> None:
        """Start timing the call and publish that it started."""
        self.watch = watch
        self.call_id = call_id
        self.tool = tool
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

    def finished(self, error: str | None) -> None:
        """The call ended: ok (``error`` None), or with the error the model was given."""
        duration = time.monotonic() - self.started
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


class Observer:
    """The runtime's observer: hands each turn its watch. Thread-safe."""

    def __init__(self, bus: EventBus) -> None:
        """Report on ``bus``."""
        self.bus = bus

    def watch(self, turn: Watched) -> TurnWatch:
        """Return ``turn``'s watch (the agent actor calls this as its runner starts)."""
        return TurnWatch(self.bus, turn)
