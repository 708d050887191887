"""The agent actor: a pykka actor that lives while its agent has a turn to run.

Agents are virtual actors: the store is an agent's home, and an actor is
started only to run one turn, then stops itself. Ten thousand idle agents
hold no thread. The runner runs on this actor's thread, never on the
supervisor's, so one slow runner delays no other agent.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

import pykka

from retinue.actors.profile import Runner
from retinue.actors.turn import Turn
from retinue.protocol.text import truncate_utf8

__all__ = ["AgentActor", "Settle", "run_runner", "running_agent"]

# settle(agent_id, generation, output, error)
Settle = Callable[[str, int, str | None, str | None], None]


_RUNNING: contextvars.ContextVar[str | None] = contextvars.ContextVar("retinue_running_agent")


def running_agent() -> str | None:
    """Return the id of the agent whose runner is calling (None outside a runner)."""
    return _RUNNING.get(None)


def run_runner(runner: Runner, turn: Turn, output_max_bytes: int) -> tuple[str | None, str | None]:
    """Run ``runner(turn)`` and return ``(output, error)``; never raises.

    A raised exception becomes ``"<Type>: <message>"`` (no traceback); a
    non-string result is an error; an output above ``output_max_bytes`` is
    cut with a visible marker. While it runs, :func:`running_agent` names
    the agent (so closing the runtime from a runner never waits for itself).
    """
    token = _RUNNING.set(turn.agent.id)
    try:
        result: Any = runner(turn)
    except BaseException as exc:  # a runner must never take its actor down
        message = str(exc)
        return None, f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    finally:
        _RUNNING.reset(token)
    if not isinstance(result, str):
        return None, f"TypeError: runner returned {type(result).__name__}, expected str"
    output, _ = truncate_utf8(result, output_max_bytes)
    return output, None


class AgentActor(pykka.ThreadingActor):
    """Runs one turn of one agent, reports the outcome, and stops."""

    use_daemon_thread = True

    def __init__(self, runner: Runner, settle: Settle, output_max_bytes: int) -> None:
        """Prepare the actor; the turn arrives as its one message."""
        super().__init__()
        self._runner = runner
        self._settle = settle
        self._output_max_bytes = output_max_bytes

    def on_receive(self, message: Any) -> Any:
        """Run the turn in ``message``, report it to the supervisor, then stop."""
        if isinstance(message, Turn):
            output, error = run_runner(self._runner, message, self._output_max_bytes)
            try:
                self._settle(message.agent.id, message.agent.generation, output, error)
            finally:
                self.stop()
        return None
