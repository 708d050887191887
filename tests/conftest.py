"""Shared fixtures: runtimes on a real LMDB store in ``tmp_path`` and controllable runners.

Everything here drives real pykka actors and a real store; nothing is mocked.
Runners that must stay busy block on a :class:`Gate` (``threading`` primitives,
never sleeps), so tests decide exactly when each turn may settle.
"""

from __future__ import annotations

import faulthandler
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest

from retinue import (
    AgentInfo,
    Event,
    Limits,
    Profile,
    Runner,
    Runtime,
    Turn,
    TurnSettled,
)
from retinue.testing import Gate

TESTS = Path(__file__).resolve().parent
# A test that hangs is a bug; dump every stack and stop instead of hanging CI.
TEST_WATCHDOG_S = 60.0
# Generous upper bound for "this should happen promptly"; never a timing assertion.
PROMPT_S = 10.0
# How often a gated runner looks at ``turn.cancelled`` while it blocks.
CANCEL_POLL_S = 0.02
# Default wait for tests: short enough that a forgotten timeout cannot hang the suite.
TEST_WAIT_DEFAULT_S = 10.0


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


def wait_settled(
    rt: Runtime, ref: str, generation: int = 1, timeout: float = PROMPT_S
) -> AgentInfo:
    """Block until the agent's turn ``generation`` has settled, without receiving it.

    Woken by the runtime's ``TurnSettled`` event for that turn (no polling).

    Raises:
        AssertionError: it had not settled within ``timeout`` seconds.
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


def _watchdog_output(config: pytest.Config) -> Any:
    """Return where a hang report must go: the real stderr, not pytest's capture."""
    try:  # pytest keeps a copy of the terminal's stderr for its own hang reports
        from _pytest.faulthandler import fault_handler_stderr_fd_key
    except ImportError:  # pragma: no cover - another pytest layout
        return sys.__stderr__
    fd = config.stash.get(fault_handler_stderr_fd_key, None)
    return sys.__stderr__ if fd is None else fd


@pytest.fixture(autouse=True)
def _watchdog(request: pytest.FixtureRequest) -> Iterator[None]:
    """In the runtime and actors tests, abort the run with every thread's stack if one hangs.

    A test that runs long by design (a state machine's search) names its own bound
    with ``@pytest.mark.watchdog(seconds)``.
    """
    # The folders below tests/ only: a checkout's own path may name "runtime" too.
    if not {"runtime", "actors"} & set(request.node.path.resolve().relative_to(TESTS).parts):
        yield
        return
    marker = request.node.get_closest_marker("watchdog")
    seconds = TEST_WATCHDOG_S if marker is None else float(marker.args[0])
    faulthandler.dump_traceback_later(seconds, exit=True, file=_watchdog_output(request.config))
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """The folder of the test's LMDB store (created by ``Runtime.open``)."""
    return tmp_path / "store"


@pytest.fixture
def open_runtime(store_path: Path) -> Iterator[OpenRuntime]:
    """Return ``open(profiles, *, runner=None, path=None, **limits) -> Runtime``.

    Every runtime it opens is closed at teardown (closing twice is harmless).
    Limits default to the package defaults with ``wait_default_s`` shortened.
    """
    opened: list[Runtime] = []

    def _open(
        profiles: Iterable[Profile],
        *,
        runner: Callable[[Turn], str] | None = None,
        path: Path | None = None,
        **limits: Any,
    ) -> Runtime:
        limits.setdefault("wait_default_s", TEST_WAIT_DEFAULT_S)
        rt = Runtime.open(
            store_path if path is None else path,
            profiles=list(profiles),
            runner=runner,
            limits=Limits(**limits),
        )
        opened.append(rt)
        return rt

    yield _open
    for rt in reversed(opened):
        rt.shutdown()


@pytest.fixture
def gate() -> Iterator[Gate]:
    """A fresh gate, released at teardown so no runner outlives the test."""
    g = Gate()
    yield g
    g.release()


@pytest.fixture
def make_gate() -> Iterator[Callable[..., Gate]]:
    """Return a factory of gates; all are released at teardown."""
    gates: list[Gate] = []

    def _make(**kwargs: Any) -> Gate:
        g = Gate(**kwargs)
        gates.append(g)
        return g

    yield _make
    for g in gates:
        g.release()


@pytest.fixture
def script() -> Script:
    """A fresh :class:`Script` runner."""
    return Script()


@pytest.fixture
def events() -> EventLog:
    """A fresh :class:`EventLog` subscriber."""
    return EventLog()
