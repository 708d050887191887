"""What the runtime's events tell the web view beyond the store: tool calls, model calls, turns.

Served in-process (``retinue run --web``), the view subscribes to the
runtime's events. :class:`Activity` keeps the tool calls in progress per agent
and a bounded history of spans (turns, model calls, tool calls) for the
timeline. It matches events on their tag (``turn_started``,
``tool_call_finished``...) and reads their fields with ``getattr``, so event
kinds it does not know, or fields a newer runtime adds, are ignored. The
history keeps the newest ``capacity`` spans; how many older ones went is
counted in :attr:`Activity.dropped` and shown, never hidden.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Activity", "Span", "event_tag"]


def event_tag(event: Any) -> str:
    """Return an event's tag (``turn_settled``...), or its class name if it has none."""
    config = getattr(type(event), "__struct_config__", None)
    tag = getattr(config, "tag", None)
    return tag if isinstance(tag, str) else type(event).__name__


@dataclass(frozen=True)
class Span:
    """One thing that took time: a turn, a model call or a tool call of one agent."""

    kind: str  # "turn", "model" or "tool"
    agent_id: str
    label: str  # the generation, the model or the tool
    start: float
    end: float
    ok: bool
    detail: str = ""

    def payload(self) -> dict[str, Any]:
        """Return the span as JSON-ready data."""
        return {
            "kind": self.kind,
            "agent": self.agent_id,
            "label": self.label,
            "start": self.start,
            "end": self.end,
            "ok": self.ok,
            "detail": self.detail,
        }


# Event kinds that follow no store change (the others wake the poller).
_NOT_STORE = frozenset(
    {"tool_call_started", "tool_call_finished", "model_delta", "events_dropped", "runner_abandoned"}
)


def _number(event: Any, name: str) -> float:
    value = getattr(event, name, 0.0)
    return float(value) if isinstance(value, int | float) else 0.0


class Activity:
    """Tool calls in progress and recent spans, from events; thread-safe."""

    def __init__(self, capacity: int) -> None:
        """Keep at most ``capacity`` spans (and as many open turns and tool calls)."""
        self.capacity = capacity
        self.spans: deque[Span] = deque()
        self.dropped = 0
        self.seen_tool_events = False
        self.seq = 0  # spans ever recorded
        self._lock = threading.Lock()
        self._turns: dict[tuple[str, int], float] = {}
        self._tools: dict[str, dict[str, tuple[str, float]]] = {}

    def handle(self, event: Any) -> bool:
        """Take one event into account; return True if it may mean the store changed."""
        tag = event_tag(event)
        agent = str(getattr(event, "agent_id", ""))
        at = _number(event, "at")
        with self._lock:
            if tag == "turn_started":
                self._open_turn((agent, int(_number(event, "generation"))), at)
            elif tag == "turn_settled":
                self._settle(event, agent, at)
            elif tag == "tool_call_started":
                self.seen_tool_events = True
                calls = self._tools.setdefault(agent, {})
                if len(calls) < self.capacity:
                    tool = str(getattr(event, "tool", "?"))
                    calls[str(getattr(event, "call_id", ""))] = (tool, at)
            elif tag == "tool_call_finished":
                self._tool_finished(event, agent, at)
            elif tag == "model_call_finished":
                tokens = int(_number(event, "prompt_tokens") + _number(event, "completion_tokens"))
                model = str(getattr(event, "model", "?"))
                start = at - _number(event, "duration_s")
                self._add(Span("model", agent, model, start, at, True, f"{tokens} tokens"))
            elif tag == "agent_closed":
                self._tools.pop(agent, None)
        return tag not in _NOT_STORE

    def _settle(self, event: Any, agent: str, at: float) -> None:
        generation = int(_number(event, "generation"))
        start = self._turns.pop((agent, generation), None)
        self._tools.pop(agent, None)
        if start is not None:
            status = str(getattr(event, "status", ""))
            span = Span("turn", agent, f"g{generation}", start, at, status == "completed", status)
            self._add(span)

    def _tool_finished(self, event: Any, agent: str, at: float) -> None:
        self.seen_tool_events = True
        calls = self._tools.get(agent, {})
        calls.pop(str(getattr(event, "call_id", "")), None)
        if not calls:
            self._tools.pop(agent, None)
        error = getattr(event, "error", None)
        ok = bool(getattr(event, "ok", error is None))
        tool = str(getattr(event, "tool", "?"))
        start = at - _number(event, "duration_s")
        self._add(Span("tool", agent, tool, start, at, ok, str(error or "")))

    def _open_turn(self, key: tuple[str, int], at: float) -> None:
        if len(self._turns) >= self.capacity:  # bounded: the oldest open turn goes, counted
            self._turns.pop(next(iter(self._turns)))
            self.dropped += 1
        self._turns[key] = at

    def _add(self, span: Span) -> None:
        self.spans.append(span)
        self.seq += 1
        if len(self.spans) > self.capacity:
            self.spans.popleft()
            self.dropped += 1

    def tools(self) -> dict[str, str]:
        """Return the tool calls in progress: agent id -> ``"read_file, grep"``."""
        with self._lock:
            return {
                agent: ", ".join(sorted({tool for tool, _ in calls.values()}))
                for agent, calls in self._tools.items()
                if calls
            }

    def open_turns(self, agents: Iterable[str]) -> dict[str, float]:
        """Return when the running turn of each of ``agents`` started, where an event said so."""
        wanted = set(agents)
        with self._lock:
            return {agent: at for (agent, _), at in self._turns.items() if agent in wanted}

    def spans_of(self, agents: Iterable[str], limit: int) -> list[Span]:
        """Return the newest ``limit`` spans of ``agents``, oldest first."""
        wanted = set(agents)
        with self._lock:
            found = [s for s in reversed(self.spans) if s.agent_id in wanted]
        return found[:limit][::-1]

    def since(self, seq: int, limit: int) -> tuple[list[Span], int]:
        """Return the spans recorded after ``seq`` (the newest ``limit`` at most), and the seq."""
        with self._lock:
            fresh = min(self.seq - seq, len(self.spans), limit)
            spans = list(self.spans)[len(self.spans) - fresh :] if fresh > 0 else []
            return spans, self.seq
