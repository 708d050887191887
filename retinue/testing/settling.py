"""Wait for one turn to settle without receiving its completion."""

from __future__ import annotations

import threading

from retinue.protocol.messages import AgentInfo, Event, TurnSettled
from retinue.runtime import Runtime

__all__ = ["wait_settled"]


def wait_settled(rt: Runtime, ref: str, generation: int = 1, timeout: float = 10.0) -> AgentInfo:
    """Block until turn ``generation`` of agent ``ref`` has settled; return the agent.

    Unlike ``rt.wait`` it receives nothing: the completion stays pending for its
    recipient (the host or the parent). Woken by the runtime's ``TurnSettled``
    event for that turn, so it never polls.

    Raises:
        AgentNotFound: no agent ``ref``.
        AssertionError: the turn had not settled within ``timeout`` seconds (a test's failure).
    """
    agent_id = rt.get(ref).id
    settled = threading.Event()

    def on_event(event: Event) -> None:
        if (
            isinstance(event, TurnSettled)
            and event.agent_id == agent_id
            and event.generation == generation
        ):
            settled.set()

    unsubscribe = rt.subscribe(on_event)
    try:
        info = rt.get(agent_id)  # it may have settled before the subscription
        if info.generation == generation and info.state.settled:
            return info
        if not settled.wait(timeout):
            raise AssertionError(f"timed out after {timeout:g}s: {ref} generation {generation}")
        return rt.get(agent_id)
    finally:
        unsubscribe()
