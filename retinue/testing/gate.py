"""Runners for tests of agent systems: one that answers at once, one that waits to be let go.

:func:`echo` settles at once with ``done:<task>``. A :class:`Gate` is a sync
runner whose turns block until the test releases them (all, or one task's),
so a test decides exactly when each turn settles, with no sleeps: the
building block of every race a test stages.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from retinue.actors.turns import Turn, runner_finished

__all__ = ["DEFAULT_TIMEOUT_S", "Gate", "echo"]

DEFAULT_TIMEOUT_S = 10.0
"""How long a gate's waits wait before they fail the test (never a timing assertion)."""
CANCEL_POLL_S = 0.02
"""How often a gated turn looks at ``turn.cancelled`` while it blocks."""


def echo(turn: Turn) -> str:
    """A runner that settles at once with ``done:<task>``."""
    return f"done:{turn.task}"


class Gate:
    """A sync runner whose turns block until the test releases them.

    ``release()`` opens the gate for every turn (past and future);
    ``release(task)`` only for turns of that task. With ``honour_cancel`` a
    turn also ends as soon as ``turn.cancelled`` is set (so closing a runtime
    never waits on it); without it the runner ignores cancellation (an
    *abandoned* runner) and returns its late result only when released. A
    released turn returns ``<output>:<task>``.

    Attributes:
        turns: every turn that entered the runner, in order.
        finished: every turn that left it, in order.
    """

    def __init__(self, *, output: str = "released", honour_cancel: bool = True) -> None:
        """Create a closed gate."""
        self.output = output
        self.honour_cancel = honour_cancel
        self._cond = threading.Condition()
        self._open_all = False
        self._open_tasks: set[str] = set()
        self.turns: list[Turn] = []
        self.finished: list[Turn] = []
        self.threads: list[threading.Thread] = []

    def __call__(self, turn: Turn) -> str:
        """Record the turn, block until released (or cancelled), return ``<output>:<task>``."""
        with self._cond:
            self.turns.append(turn)
            self.threads.append(threading.current_thread())
            self._cond.notify_all()
            while not (self._open_all or turn.task in self._open_tasks):
                if self.honour_cancel and turn.cancelled.is_set():
                    break
                self._cond.wait(CANCEL_POLL_S)
        with self._cond:
            self.finished.append(turn)
            self._cond.notify_all()
        return f"{self.output}:{turn.task}"

    def release(self, task: str | None = None) -> None:
        """Let every turn (``task=None``) or every turn of ``task`` return."""
        with self._cond:
            if task is None:
                self._open_all = True
            else:
                self._open_tasks.add(task)
            self._cond.notify_all()

    def wait_started(self, count: int, timeout: float = DEFAULT_TIMEOUT_S) -> list[Turn]:
        """Block until at least ``count`` turns have entered the runner; return them.

        Raises:
            AssertionError: they had not within ``timeout`` seconds.
        """
        return self._wait_for(lambda: len(self.turns) >= count, timeout, f"{count} turns started")

    def wait_finished(self, count: int, timeout: float = DEFAULT_TIMEOUT_S) -> list[Turn]:
        """Block until at least ``count`` turns have left the runner; return them.

        Raises:
            AssertionError: they had not within ``timeout`` seconds.
        """
        self._wait_for(lambda: len(self.finished) >= count, timeout, f"{count} turns finished")
        return list(self.finished)

    def _wait_for(self, check: Callable[[], bool], timeout: float, what: str) -> list[Turn]:
        with self._cond:
            if not self._cond.wait_for(check, timeout):
                raise AssertionError(f"timed out waiting for {what}; started: {self.tasks()}")
            return list(self.turns)

    def tasks(self) -> list[str]:
        """Return the tasks of the turns that entered the runner, in order."""
        with self._cond:
            return [t.task for t in self.turns]

    def turn_of(self, agent_id: str, generation: int | None = None) -> Turn:
        """Return the (latest, or given generation's) turn of an agent that entered the runner.

        Raises:
            AssertionError: the agent has no turn in this gate.
        """
        with self._cond:
            for turn in reversed(self.turns):
                if turn.agent.id == agent_id and generation in (None, turn.agent.generation):
                    return turn
        raise AssertionError(f"agent {agent_id} has no turn in this gate")

    def join_runner_threads(self, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """Wait until every runner this gate saw has returned and its report was sent.

        Runner threads are pooled: a thread is done with its runner once it has
        ended or is back in the pool between jobs.

        Raises:
            AssertionError: a runner was still running after ``timeout`` seconds.
        """
        with self._cond:
            threads = list(self.threads)
        deadline = time.monotonic() + timeout
        for thread in threads:
            while not runner_finished(thread):
                if time.monotonic() > deadline:
                    raise AssertionError(f"runner thread {thread.name} did not finish its runner")
                time.sleep(0.002)
