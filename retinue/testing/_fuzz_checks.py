"""What a fuzzing run checks on the live runtime, beside the store and the leaks.

- ``event_not_encodable`` (:class:`EventCheck`): an event the runtime
  published does not encode as JSON (what ``retinue run --json``, the web view
  and every subscriber that sends events on must do): a text that crossed the
  supervisor raw, half an emoji from a model or a tool that was not cleaned
  where it arrived.
- ``agent_wedged`` (:func:`wedged`): an agent still ``running`` (or
  ``starting``) in the same turn across two points at which the runtime said
  it was quiescent: no runner, no queued turn, yet it never settles (a
  command that failed half way).
"""

from __future__ import annotations

import threading
import time

import msgspec

from retinue.errors import WaitTimeout
from retinue.protocol.messages import AgentState, Event
from retinue.runtime import Runtime
from retinue.testing.invariants import Broken

__all__ = ["MAX_EVENT_FINDINGS", "EventCheck", "settled", "wedged"]

MAX_EVENT_FINDINGS = 20
"""Most ``event_not_encodable`` findings one :class:`EventCheck` keeps (the first ones)."""

_ENCODER = msgspec.json.Encoder()
_TURNS = (AgentState.RUNNING, AgentState.STARTING)


class EventCheck:
    """A subscriber that encodes every event as JSON and keeps those that do not encode.

    ``watch(rt)`` subscribes it to a runtime (again after a reopen);
    :meth:`take` returns the findings since the last call.
    """

    def __init__(self) -> None:
        """Start with no finding."""
        self._lock = threading.Lock()
        self._found: list[Broken] = []
        self._seen = 0

    def watch(self, rt: Runtime) -> None:
        """Check every event ``rt`` publishes from now on (until it closes)."""
        rt.subscribe(self)

    def __call__(self, event: Event) -> None:
        """Encode ``event``; keep a finding if it does not encode (called on the dispatcher)."""
        try:
            _ENCODER.encode(event)
        except (UnicodeEncodeError, TypeError, ValueError) as exc:
            detail = f"{type(event).__name__} does not encode as JSON: {exc}"
            with self._lock:
                self._seen += 1
                if self._seen <= MAX_EVENT_FINDINGS:
                    self._found.append(Broken("event_not_encodable", event.path, detail))

    def take(self) -> list[Broken]:
        """Return the findings since the last call (and forget them)."""
        with self._lock:
            found, self._found = self._found, []
        return found


def _turns(rt: Runtime) -> dict[tuple[str, int], str]:
    """The agents with a turn queued or running: (id, generation) -> path."""
    return {(a.id, a.generation): a.path for a in rt.agents() if a.state in _TURNS}


def settled(rt: Runtime, seconds: float) -> bool:
    """Wait up to ``seconds`` for quiescence (in waits ``wait_max_s`` allows); whether it came."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        try:
            rt.wait_idle(max(0.0, min(left, rt.limits.wait_max_s)))
            return True
        except WaitTimeout:
            if left <= rt.limits.wait_max_s:
                return False


def wedged(rt: Runtime, seconds: float) -> list[Broken]:
    """After ``rt`` said it was quiescent: the agents whose turn never ends.

    An agent may start a turn after a quiescent point (a parked approval that
    timed out wakes its parent); so each agent ``running`` or ``starting`` now
    is looked at again after the next quiescent point (waited for up to
    ``seconds``): one still in the same turn there is wedged.
    """
    suspects = _turns(rt)
    if not suspects or not settled(rt, seconds):
        return []  # never quiescent again: the settle's own report says so
    still = _turns(rt)
    return [
        Broken(
            "agent_wedged",
            path,
            f"turn {generation} is still queued or running while the runtime reports "
            "quiescence (no runner, no queued turn)",
        )
        for (agent_id, generation), path in sorted(suspects.items(), key=lambda item: item[1])
        if (agent_id, generation) in still
    ]
