"""Helpers shared by the tests: waiting without sleeping, scripted runners, event logs.

Tests import them as ``from support import ...`` (``tests/`` is the base of the
test modules, as ``conftest`` is); the fixtures that build on them stay in
``tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from retinue import (
    AgentInfo,
    Event,
    Limits,
    Profile,
    Runner,
    Runtime,
    Turn,
)
from retinue.testing import wait_settled
from support.turns import control_of, loose_turn

__all__ = [
    "PROMPT_S",
    "READER_TEAM",
    "CommandCounter",
    "CountingLoop",
    "EventFields",
    "EventLog",
    "OpenRuntime",
    "Opening",
    "Script",
    "act",
    "control_of",
    "lead_and_worker",
    "loose_turn",
    "reader_team",
    "tag",
    "wait_settled",
    "wait_until",
]


class CountingLoop(asyncio.SelectorEventLoop):
    """A loop that counts the wake-ups it is given through ``call_soon_threadsafe``."""

    wakes = 0

    def call_soon_threadsafe(  # type: ignore[override]  # counts, then the same call
        self, callback: Any, *args: Any, context: Any = None
    ) -> Any:
        self.wakes += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


# Generous upper bound for "this should happen promptly"; never a timing assertion.
PROMPT_S = 10.0


def wait_until(predicate: Callable[[], Any], timeout: float = PROMPT_S, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; return that value.

    Raises:
        AssertionError: it stayed falsy for ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or predicate}")
        time.sleep(0.002)


class CommandCounter:
    """A timing sink (``rt.set_timing_sink``) that counts the supervisor's commands by kind."""

    def __init__(self) -> None:
        """Start with no command counted."""
        self.lock = threading.Lock()
        self.kinds: Counter[str] = Counter()

    def observe_commit(self, seconds: float) -> None:
        """Ignore a commit's time."""

    def observe_command(self, kind: str, seconds: float) -> None:
        """Count one served command of ``kind``."""
        with self.lock:
            self.kinds[kind] += 1

    def count(self, kind: str) -> int:
        """Return how many commands of ``kind`` were served."""
        with self.lock:
            return self.kinds[kind]

    def counted(self) -> Counter[str]:
        """Return a copy of the counts by kind."""
        with self.lock:
            return Counter(self.kinds)


READER_TEAM = """
name = "reader"

[defaults]
model = "retinue/scripted"
tools = "read"
workspace = "ws"

[agents.reader]
approve = ["read_file"]
"""
"""A team whose scripted reader reads the workspace; each read_file call waits for approval."""


def reader_team(folder: Path) -> Path:
    """Write :data:`READER_TEAM` and its workspace (``ws/notes.txt``: "ship on Tuesday") in
    ``folder``; return the team file's path."""
    (folder / "ws").mkdir()
    (folder / "ws" / "notes.txt").write_text("ship on Tuesday\n")
    team = folder / "team.toml"
    team.write_text(READER_TEAM)
    return team


def act(rt: Runtime, ref: str, task: str) -> AgentInfo:
    """Give an idle agent a follow-up turn with ``task`` and return it once settled."""
    queued = rt.follow_up(ref, task)
    return wait_settled(rt, ref, queued.generation)


class Script:
    """A runner that runs the action registered for the turn's task and records every turn.

    Turns whose task has no action return ``ok:<task>``. Actions receive the
    turn and return the output (or raise, which fails the turn).
    """

    def __init__(self) -> None:
        """Create a script with no actions."""
        self.actions: dict[str, Callable[[Turn], str]] = {}
        self._lock = threading.Lock()
        self.turns: list[Turn] = []

    def on(self, task: str, action: Callable[[Turn], str]) -> None:
        """Run ``action(turn)`` for turns whose task is ``task``."""
        self.actions[task] = action

    def __call__(self, turn: Turn) -> str:
        """Record the turn and run its action."""
        with self._lock:
            self.turns.append(turn)
        action = self.actions.get(turn.task)
        return f"ok:{turn.task}" if action is None else action(turn)

    def turns_of(self, agent_id: str) -> list[Turn]:
        """Return the recorded turns of one agent, in start order."""
        with self._lock:
            return [t for t in self.turns if t.agent.id == agent_id]


class EventLog:
    """A subscriber that keeps every event and lets a test wait for one."""

    def __init__(self) -> None:
        """Create an empty log."""
        self._cond = threading.Condition()
        self.events: list[Event] = []
        self.threads: set[str] = set()

    def __call__(self, event: Event) -> None:
        """Record one event (called on the runtime's dispatcher thread)."""
        with self._cond:
            self.events.append(event)
            self.threads.add(threading.current_thread().name)
            self._cond.notify_all()

    def wait_for(
        self, check: Callable[[list[Event]], bool], timeout: float = PROMPT_S
    ) -> list[Event]:
        """Block until ``check(events)`` is true; return a copy of the events."""
        with self._cond:
            if not self._cond.wait_for(lambda: check(self.events), timeout):
                raise AssertionError(f"timed out waiting for events; got {self.events}")
            return list(self.events)

    def of(self, agent_id: str) -> list[Event]:
        """Return the events of one agent, in delivery order."""
        with self._cond:
            return [e for e in self.events if e.agent_id == agent_id]


class EventFields(TypedDict):
    """The fields every event has: ``SomeEvent(**fields, ...)`` in tests that build events."""

    agent_id: str
    path: str
    at: float


def tag(event: Event) -> str:
    """Return an event's tag (``agent_spawned``, ``turn_queued``, ...)."""
    return str(type(event).__struct_config__.tag)


OpenRuntime = Callable[..., Runtime]


class Opening(TypedDict):
    """Keyword arguments of ``Runtime.open``: ``Runtime.open(path, **opening)``."""

    profiles: list[Profile]
    limits: Limits


def lead_and_worker(lead: Runner, worker: Runner, **limits: Any) -> Opening:
    """A ``lead`` that may spawn ``worker``s, with ``limits`` (keywords of :class:`Limits`)."""
    return {
        "profiles": [
            Profile("lead", subagents=["worker"], runner=lead),
            Profile("worker", runner=worker),
        ],
        "limits": Limits(**limits),
    }
