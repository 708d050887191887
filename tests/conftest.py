"""Shared fixtures: runtimes on a real LMDB store in ``tmp_path`` and controllable runners.

Everything here drives real pykka actors and a real store; nothing is mocked.
Runners that must stay busy block on a :class:`Gate` (``threading`` primitives,
never sleeps), so tests decide exactly when each turn may settle. The helpers
tests import (``wait_until``, ``wait_settled``, ``Script``, ``EventLog``, ...)
live in ``tests/support``.
"""

from __future__ import annotations

import faulthandler
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import EventLog, OpenRuntime, Script

from retinue import Limits, Profile, Runtime, Turn
from retinue.testing import Gate

TESTS = Path(__file__).resolve().parent
# A test that hangs is a bug; dump every stack and stop instead of hanging CI.
TEST_WATCHDOG_S = 60.0
# How often a gated runner looks at ``turn.cancelled`` while it blocks.
CANCEL_POLL_S = 0.02
# Default wait for tests: short enough that a forgotten timeout cannot hang the suite.
TEST_WAIT_DEFAULT_S = 10.0


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
