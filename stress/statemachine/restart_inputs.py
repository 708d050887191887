"""The restart machine's runners and its input rule: what every attempt was handed.

``flaky`` turns fail or succeed as their task's plan says (``plan:FFS``
completes on attempt 3). Each attempt logs the messages it started with as a
:class:`Run`, tagged with its *world* (a crash opens a copy of the store: the
old runtime's later runs are another world's), and names its run in its
output. :func:`check_inputs` holds the machine's messages to the input rule:

- each message is consumed by at most one run whose completion survived, and
  (for a live agent) exactly one, unless it is still unread: an attempt that
  failed, was interrupted, closed under or lost in a crash gave it back;
- within a world, the run after one that failed was handed everything that
  one was (a restarted attempt sees its inputs again, in order, with what
  arrived meanwhile). A run's world matters: after a crash the old runtime may
  still complete runs whose completions the copy never saw.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from retinue import Profile, Turn
from retinue.protocol.messages import Completion
from stress.statemachine.restart_plans import KINDS, TIMED, TIMED_S, policy, run_plan
from stress.statemachine.trace import STATS, fail

__all__ = ["RUNS", "Run", "check_inputs", "profiles"]


@dataclass(frozen=True)
class Run:
    """One attempt as its runner saw it: its world, turn and the messages it was handed."""

    number: int
    world: int
    agent_id: str
    generation: int
    attempt: int
    messages: tuple[str, ...]


class Runs:
    """Every run of the example, in start order; thread-safe."""

    def __init__(self) -> None:
        """Start empty."""
        self.lock = threading.Lock()
        self.runs: list[Run] = []
        self.failed: set[int] = set()  # the runs whose runner raised

    def clear(self) -> None:
        """Forget every run (a new example)."""
        with self.lock:
            self.runs = []
            self.failed = set()

    def fail(self, run: Run) -> None:
        """Note that ``run``'s runner raised (its turn failed, in its world)."""
        with self.lock:
            self.failed.add(run.number)

    def add(self, world: int, turn: Turn) -> Run:
        """Log the attempt ``turn`` of ``world``; return its run."""
        with self.lock:
            run = Run(
                number=len(self.runs),
                world=world,
                agent_id=turn.agent.id,
                generation=turn.agent.generation,
                attempt=turn.attempt,
                messages=tuple(m.id for m in turn.messages),
            )
            self.runs.append(run)
        return run

    def of(self, agent_id: str) -> list[Run]:
        """The runs of one agent, in start order."""
        with self.lock:
            return [r for r in self.runs if r.agent_id == agent_id]

    def of_world(self, world: int) -> list[Run]:
        """The runs of one world, in start order."""
        with self.lock:
            return [r for r in self.runs if r.world == world]


RUNS = Runs()
_RUN = re.compile(r"\(run (\d+)\)$")


def profiles(world: int) -> list[Profile]:
    """The machine's profiles (:data:`~stress.statemachine.restart_plans.KINDS` and ``timed``),
    their runs logged as ``world``'s."""

    def flaky(turn: Turn) -> str:
        """Fail or succeed as the task's plan says for this attempt (``plan:FPS`` ...)."""
        run = RUNS.add(world, turn)
        try:
            ran = run_plan(turn)
        except BaseException:
            RUNS.fail(run)
            raise
        return f"{ran} (run {run.number})"

    return [
        *(
            Profile(kind, runner=flaky, restart=policy(kind), wake_on_completion=False)
            for kind in KINDS
        ),
        Profile(
            TIMED,
            runner=flaky,
            restart=policy(TIMED),
            wake_on_completion=False,
            turn_timeout_s=TIMED_S,
        ),
    ]


def check_inputs(
    agent_id: str, sent: Sequence[str], got: Sequence[Completion], unread: set[str] | None
) -> None:
    """Hold one agent's messages to the input rule (see the module's docstring).

    ``sent``: the ids of the messages the host sent it; ``got``: the
    completions the host received of it; ``unread``: the ids its mailbox holds
    unread now (None: it is closed, its mailbox is not checked).
    """
    runs = RUNS.of(agent_id)
    completed = {int(m.group(1)) for c in got if (m := _RUN.search(c.output or ""))}
    for message in sent:
        takers = [r for r in runs if r.number in completed and message in r.messages]
        if len(takers) > 1:
            fail(f"message {message} was consumed by {len(takers)} completed attempts: {takers}")
        if unread is not None and bool(takers) == (message in unread):
            where = "consumed and unread" if takers else "neither consumed nor unread"
            fail(f"message {message} of {agent_id} is {where} (runs {runs})")
    with RUNS.lock:
        failed = set(RUNS.failed)
    for before, after in itertools.pairwise(sorted(runs, key=lambda r: (r.world, r.generation))):
        if before.world != after.world or before.number not in failed or not before.messages:
            continue
        missing = [m for m in before.messages if m not in after.messages]
        if missing:
            fail(f"{agent_id}: run {before} ended without completing; {after} lacks {missing}")
        STATS["restart:inputs_handed_on"] += 1
