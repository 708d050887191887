"""How long the runtime's serial stages take: each store commit, each supervisor command.

The store's writer (:attr:`~retinue.persistence.writer.Writer.on_commit`) and
the supervisor (:attr:`~retinue.actors.supervisor.Supervisor.on_command`) each
hold one timer, None while nobody listens: then a commit or a command costs one
attribute check and reads no clock. :class:`Timings` is the runtime's switch
between them and what listens (a :class:`TimingSink`, such as
:class:`retinue.metrics.RetinueCollector`): attaching the first sink sets both
timers, detaching the last clears them. A sink is called on the writer's
thread (commits) and the supervisor's thread (commands), so it must be quick
and thread-safe; one that raises is logged and never stops either thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from retinue.actors.supervisor._supervisor import Supervisor
from retinue.persistence.store import Store

__all__ = ["TimingSink", "Timings"]


class TimingSink(Protocol):
    """What listens to the timings (``RetinueCollector`` has both methods)."""

    def observe_commit(self, seconds: float) -> None:
        """One group commit of the store took ``seconds``."""
        ...

    def observe_command(self, kind: str, seconds: float) -> None:
        """One supervisor command of ``kind`` (its class name, e.g. ``Spawn``) took ``seconds``."""
        ...


class Timings:
    """The timers of one writable runtime's store and supervisor; thread-safe."""

    def __init__(self, store: Store, supervisor: Supervisor) -> None:
        """Switch the timers of ``store``'s writer and of ``supervisor`` (both off now)."""
        self._store = store
        self._supervisor = supervisor
        self._lock = threading.Lock()
        self._sinks: tuple[TimingSink, ...] = ()

    def attach(self, sink: TimingSink) -> Callable[[], None]:
        """Tell ``sink`` every commit's and command's time from now on; return detach.

        Detach is idempotent; once the last sink is detached, nothing is timed.
        """
        with self._lock:
            self._sinks = (*self._sinks, sink)
            self._install()

        def detach() -> None:
            with self._lock:
                if sink in self._sinks:
                    kept = list(self._sinks)
                    kept.remove(sink)
                    self._sinks = tuple(kept)
                    self._install()

        return detach

    def _install(self) -> None:
        """Set the timers for the sinks attached now (lock held): none, one, or a fan-out."""
        sinks = self._sinks
        if not sinks:
            self._store.time_commits(None)
            self._supervisor.on_command = None
        elif len(sinks) == 1:
            self._store.time_commits(sinks[0].observe_commit)
            self._supervisor.on_command = sinks[0].observe_command
        else:

            def commit(seconds: float) -> None:
                for sink in sinks:
                    sink.observe_commit(seconds)

            def command(kind: str, seconds: float) -> None:
                for sink in sinks:
                    sink.observe_command(kind, seconds)

            self._store.time_commits(commit)
            self._supervisor.on_command = command
