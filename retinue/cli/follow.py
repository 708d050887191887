"""Following a run: show the trees under some roots until they settle, then report.

:func:`follow` shows the trees under some roots until none of their agents is
busy (or Ctrl-C); :func:`report` prints the roots' answers, a summary and the
failures, and returns the exit code: 0 completed, 1 an agent failed or is left
interrupted, 130 interrupted by the user.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TextIO

import msgspec

from retinue.cli.common import FAILED, INTERRUPTED, OK
from retinue.cli.render import JsonView, View, in_tree, usage_of
from retinue.errors import NothingToWaitFor, RetinueError, UnknownAgent, WaitTimeout
from retinue.protocol.messages import AgentInfo, AgentState, Event, TurnSettled
from retinue.protocol.text import safe_terminal_text

if TYPE_CHECKING:
    from retinue.runtime import Runtime

__all__ = ["Failure", "Outcome", "follow", "receive", "report", "stop_on_signals"]


Failure = tuple[str, int, str, str | None]
"""A failed turn of a run: its agent's path, generation, error and error type."""


@dataclass
class Outcome:
    """How a followed run ended."""

    interrupted: bool
    agents: list[AgentInfo] = field(default_factory=list)
    seconds: float = 0.0
    # Every failed turn seen while following: (path, generation, error, error type), oldest
    # first.
    failures: list[Failure] = field(default_factory=list)

    def failed(self) -> list[Failure]:
        """Every failure of the run: the failed turns seen, and agents left failed."""
        found = list(self.failures)
        seen = {(path, generation) for path, generation, _, _ in found}
        for agent in self.agents:
            if agent.state is AgentState.FAILED and (agent.path, agent.generation) not in seen:
                error = agent.error or "no error recorded"
                found.append((agent.path, agent.generation, error, agent.error_type))
        return found


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """While inside, Ctrl-C (and SIGTERM) set ``stop``; a second Ctrl-C quits at once."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            print(
                "\nretinue: stopped at once; the store keeps every committed step", file=sys.stderr
            )
            os._exit(INTERRUPTED)
        stop.set()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def follow(
    rt: Runtime,
    roots: Sequence[str],
    view: View,
    start: Callable[[], None],
    stop: threading.Event,
    tick: Callable[[list[Event]], None] | None = None,
) -> Outcome:
    """Run ``start`` and show the trees under ``roots`` until none of their agents is busy.

    ``tick(batch)`` runs between draws with the events since the last
    (answering approval requests). Returns early, with ``interrupted=True``,
    once ``stop`` is set (Ctrl-C).
    """
    events: queue.SimpleQueue[Event] = queue.SimpleQueue()
    unsubscribe = rt.subscribe(events.put)
    began = time.monotonic()
    known: dict[str, AgentInfo] = {}

    def snapshot() -> list[AgentInfo]:
        mine = [a for a in rt.agents() if in_tree(a.path, roots)]
        known.update((a.id, a) for a in mine)
        return mine

    seen: set[tuple[str, int]] = set()

    failures: list[Failure] = []
    admission = _Admission(rt, roots, view)

    def show(batch: list[Event]) -> None:
        for event in batch:
            if in_tree(event.path, roots):
                if isinstance(event, TurnSettled):
                    seen.add((event.agent_id, event.generation))
                    if event.status.value == "failed":
                        error = event.error or "no error recorded"
                        failure = (event.path, event.generation, error, event.error_type)
                        failures.append(failure)
                view.event(event, known)

    try:
        if stop.is_set():  # Ctrl-C while the store was opening: start nothing
            return Outcome(True, [], 0.0)
        start()
        agents = snapshot()
        view.update(agents)
        last = time.monotonic()
        while True:
            # At most ten snapshots a second, however fast the events come.
            batch = _drain(events, 0.1)
            pause = last + 0.1 - time.monotonic()
            if pause > 0:
                time.sleep(pause)
                batch += _drain(events, 0.0)
            last = time.monotonic()
            if stop.is_set():  # report the trees as they are now, not as last drawn
                with contextlib.suppress(RetinueError):
                    agents = snapshot()
                return Outcome(True, agents, time.monotonic() - began, failures)
            agents = snapshot()
            show(batch)
            view.update(agents)
            admission.check()
            if tick is not None:
                tick(batch)
            if not any(a.state.busy for a in agents):
                break
        # Events reach subscribers after the commit that the snapshot saw: show
        # the last settles too (bounded, in case a turn settled without an event).
        outcome = Outcome(False, agents, time.monotonic() - began, failures)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(
            a.generation and (a.id, a.generation) not in seen for a in agents
        ):
            show(_drain(events, 0.05))
        return outcome
    finally:
        unsubscribe()


class _Admission:
    """The calls of the followed trees that wait for admission under provider limits, shown
    when they change (read at most every :data:`ADMISSION_EVERY_S`)."""

    def __init__(self, rt: Runtime, roots: Sequence[str], view: View) -> None:
        self.rt, self.roots, self.view = rt, roots, view
        self.shown: tuple[str, ...] = ()
        self.read_at = 0.0

    def check(self) -> None:
        now = time.monotonic()
        if now - self.read_at < ADMISSION_EVERY_S:
            return
        self.read_at = now
        try:
            diagnostics = self.rt.diagnostics
        except RetinueError:
            return
        if not diagnostics.provider_limits:
            return
        waiting = tuple(p for p in diagnostics.admission_waiting if in_tree(p, self.roots))
        if waiting != self.shown:
            self.shown = waiting
            self.view.admission(waiting, diagnostics.provider_limits)


ADMISSION_EVERY_S = 0.5
"""How often ``retinue run`` reads which model calls wait for admission."""


def _drain(events: queue.SimpleQueue[Event], timeout: float) -> list[Event]:
    """Return the queued events, waiting up to ``timeout`` for the first."""
    batch: list[Event] = []
    try:
        batch.append(events.get(timeout=timeout))
        while True:
            batch.append(events.get_nowait())
    except queue.Empty:
        pass
    return batch


def receive(rt: Runtime, roots: Sequence[str]) -> None:
    """Take the host's completions of ``roots`` (they are settled), so none stays pending."""
    for root in roots:
        while True:
            try:
                rt.wait(root, timeout=0)
            except (WaitTimeout, NothingToWaitFor, UnknownAgent):
                break


def report(outcome: Outcome, roots: Sequence[str], store: Path, view: View, out: TextIO) -> int:
    """Print how the run ended and return the exit code.

    0 only when every root completed and no agent of the trees failed or was
    interrupted; 130 when the run was interrupted; 1 otherwise.
    """
    agents = outcome.agents
    failed = [a for a in agents if a.state is AgentState.FAILED]
    interrupted = [a for a in agents if a.state is AgentState.INTERRUPTED or a.state.has_turn]
    waiting = [a for a in agents if a.state.busy and not a.state.has_turn]
    top = [a for a in agents if a.path in roots]
    tokens = sum(usage_of(a)[0] for a in agents)
    cost = sum(usage_of(a)[1] for a in agents)
    if outcome.interrupted:
        code = INTERRUPTED
    elif failed or interrupted or waiting or any(a.state is not AgentState.COMPLETED for a in top):
        code = FAILED
    else:
        code = OK
    counts: dict[str, int] = {}
    for agent in agents:
        state = "interrupted" if outcome.interrupted and agent.state.has_turn else agent.state.value
        counts[state] = counts.get(state, 0) + 1
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    if isinstance(view, JsonView):
        final = {
            "event": "run_finished",
            "exit_code": code,
            "store": str(store),
            "seconds": round(outcome.seconds, 3),
            "agents": len(agents),
            "states": counts,
            "tokens": tokens,
            "cost_usd": cost,
            "roots": [msgspec.to_builtins(a) for a in top],
            "failed": [
                {"path": path, "generation": generation, "error": error, "error_type": kind}
                for path, generation, error, kind in outcome.failed()
            ],
        }
        out.write(json.dumps(final) + "\n")
        out.flush()
        return code
    print(file=out)
    for agent in top:
        if agent.state is AgentState.COMPLETED and agent.output:
            print(f"answer of {agent.path} ({agent.profile}):", file=out)
            print(safe_terminal_text(agent.output, len(agent.output)), file=out)
            print(file=out)
    noun = "agent" if len(agents) == 1 else "agents"
    line = f"{len(agents)} {noun}: {summary} in {outcome.seconds:.1f}s"
    if tokens:
        line += f"; {tokens:,} tokens, ${cost:.4f}"
    print(line, file=out)
    for path, generation, error, _ in outcome.failed():  # whole: output_max_bytes bounds it
        print(f"failed: {path} g{generation}: {safe_terminal_text(error, len(error))}", file=out)
    if outcome.interrupted:
        print(f"interrupted; every step so far is saved in {store}", file=out)
        print(f"resume with: retinue resume --store {store}", file=out)
    elif interrupted:
        print(
            f"{len(interrupted)} agents are interrupted; resume with: "
            f"retinue resume --store {store}",
            file=out,
        )
    for agent in waiting:  # kept in the store: a restart fires, an approval waits, on resume
        what = "waits for approval" if agent.state is AgentState.AWAITING_APPROVAL else "restarts"
        print(f"{agent.path} {what}; carry on with: retinue resume --store {store}", file=out)
    print(f"store: {store}  (look again: retinue tree --store {store})", file=out)
    return code
