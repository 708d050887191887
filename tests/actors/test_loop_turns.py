"""An async runner's turn, started on the runtime's loop with no actor (``LoopTurns``).

The turn is handed to the loop after its start is committed and its task made
there: these tests hold the loop (a runner that blocks its thread) so that a
turn's start waits on it, then cancel, roll back, fail or close around it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import lmdb
import pytest
from support import PROMPT_S, EventLog, OpenRuntime, wait_until

from retinue import (
    AgentState,
    CompletionStatus,
    InternalError,
    Profile,
    Runtime,
    StoreError,
    Turn,
    TurnSettled,
)
from retinue.testing.faults import disarm, inject_fault


class LoopBlocker:
    """An async runner that blocks the runtime's loop thread until released (on purpose:
    every turn whose start is handed to the loop meanwhile waits behind it)."""

    def __init__(self) -> None:
        """Create a held blocker."""
        self.started = threading.Event()
        self._release = threading.Event()

    async def __call__(self, turn: Turn) -> str:
        """Block the loop's thread until :meth:`release`; return ``unblocked``."""
        self.started.set()
        self._release.wait(PROMPT_S)
        return "unblocked"

    def release(self) -> None:
        """Let the loop run again."""
        self._release.set()


class Recorder:
    """An async runner that records each task it runs and returns it."""

    def __init__(self) -> None:
        """Create one that has run nothing."""
        self.ran: list[str] = []
        self.seen: list[list[str]] = []

    async def __call__(self, turn: Turn) -> str:
        """Record the task (and the messages the turn holds) and return the task."""
        self.ran.append(turn.task)
        self.seen.append([m.content for m in turn.messages])
        return turn.task


def loop_passes(rt: Runtime, passes: int = 3) -> None:
    """Return once the runtime's loop has run ``passes`` rounds of callbacks: whatever was
    handed to it before (a turn's start, the first step of its task) has run by then."""
    loop = rt._system.executor.loop  # type: ignore[union-attr]  # below the API on purpose
    for _ in range(passes):
        ran = threading.Event()
        assert loop.call_soon(ran.set)
        assert ran.wait(PROMPT_S)


@pytest.fixture
def blocker() -> Any:
    """A fresh :class:`LoopBlocker`, released at teardown."""
    held = LoopBlocker()
    yield held
    held.release()


def test_a_turn_cancelled_before_its_task_starts_never_runs_and_reports_itself_gone(
    open_runtime: OpenRuntime, blocker: LoopBlocker
) -> None:
    recorder = Recorder()
    rt = open_runtime([Profile("block", runner=blocker), Profile("w", runner=recorder)])
    a = rt.spawn("w", "first", name="a")
    assert rt.wait(a.id, timeout=PROMPT_S).output == "first"
    rt.send(a.id, "IMPORTANT")  # to a waiting agent: its next turn's input
    rt.spawn("block", "hold")
    assert blocker.started.wait(PROMPT_S)
    # Its start is committed and handed to the held loop: the turn waits there.
    assert rt.follow_up(a.id, "second").state is AgentState.RUNNING
    assert rt.interrupt(a.id).state is AgentState.INTERRUPTED
    blocker.release()
    done = rt.wait(a.id, timeout=PROMPT_S)
    assert (done.status, done.generation) == (CompletionStatus.INTERRUPTED, 2)
    # Idle only once every runner reported back: the cancelled turn said it is gone.
    rt.wait_idle(PROMPT_S)
    assert recorder.ran == ["first"]
    # Its input went back: the next turn receives it.
    rt.follow_up(a.id, "third")
    assert rt.wait(a.id, timeout=PROMPT_S).output == "third"
    assert recorder.ran == ["first", "third"]
    assert recorder.seen[-1] == ["IMPORTANT"]


@pytest.mark.parametrize("command", ["Spawn", "Run"])
def test_a_start_rolled_back_at_any_change_never_starts_its_async_turn(
    open_runtime: OpenRuntime, command: str
) -> None:
    # A run spawns its agent, starts its turn, then registers its wait on it: a fault
    # after the turn's start rolls back a command that has started it already.
    recorder = Recorder()
    rt = open_runtime([Profile("w", runner=recorder)])
    for at in range(1, 200):
        inject_fault(rt, command, at=at)
        try:
            if command == "Spawn":
                done = rt.wait(rt.spawn("w", f"t{at}").id, timeout=PROMPT_S)
            else:
                done = rt.run("w", f"t{at}", timeout=PROMPT_S)
        except InternalError:
            continue  # rolled back: its effects (the turn's start) were dropped
        assert disarm(rt), f"the {command} succeeded though a fault was armed"
        break
    else:
        raise AssertionError(f"the {command} never succeeded")
    assert done.output == f"t{at}"
    loop_passes(rt)
    assert recorder.ran == [f"t{at}"]  # only the committed command's turn ran
    rt.wait_idle(PROMPT_S)


def test_a_failed_commit_never_starts_its_async_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    rt = Runtime.open(tmp_path / "s", profiles=[Profile("w", runner=recorder)])
    try:
        store: Any = rt._store  # below the API: no public call makes the disk fail

        def broken(writes: object, **kwargs: object) -> None:
            raise lmdb.DiskError("injected: no space left on device")

        monkeypatch.setattr(store._writer, "_commit", broken)
        with pytest.raises(StoreError, match="injected"):
            rt.spawn("w", "lost")
        loop_passes(rt)
        assert recorder.ran == []
    finally:
        monkeypatch.undo()
        rt.shutdown()
    assert recorder.ran == []


def test_closing_with_an_async_turn_not_started_yet_never_runs_it(
    store_path: Path, blocker: LoopBlocker
) -> None:
    before = set(threading.enumerate())
    recorder = Recorder()
    rt = Runtime.open(
        store_path, profiles=[Profile("block", runner=blocker), Profile("w", runner=recorder)]
    )
    log = EventLog()
    rt.subscribe(log)
    rt.spawn("block", "hold")
    assert blocker.started.wait(PROMPT_S)
    waiting = rt.spawn("w", "never")  # its start waits behind the held loop
    closing = threading.Thread(target=rt.shutdown)
    closing.start()
    wait_until(
        lambda: any(isinstance(e, TurnSettled) and e.agent_id == waiting.id for e in log.events),
        what="the close to interrupt the waiting turn",
    )
    blocker.release()
    closing.join(PROMPT_S)
    assert not closing.is_alive()
    assert recorder.ran == []
    leftover = [t for t in threading.enumerate() if t not in before]
    for thread in leftover:
        thread.join(PROMPT_S / len(leftover))
    assert [t.name for t in leftover if t.is_alive()] == []
    with Runtime.open(store_path, profiles=[Profile("w", runner=recorder)]) as again:
        assert again.get(waiting.id).state is AgentState.INTERRUPTED
