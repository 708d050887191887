"""The restart machine's plans: what each attempt of a task does, and what its task must end as.

A task carries a plan, one letter per attempt: ``F`` fails transiently (a
``RuntimeError``), ``P`` fails permanently (a ``PermanentError``), ``S``
succeeds (``plan:FPS`` fails, then fails for good). Three profiles
(:func:`~stress.statemachine.restart_inputs.profiles`) run them
under a restart policy of at most :data:`MAX_RESTARTS` restarts answering
``failed`` and ``lost``: ``quick`` restarts after a few milliseconds,
``held`` after a quarter second (so rules land in backoffs), and ``stubborn``
restarts permanent failures too (``retry_on="any"``); the others leave them
failed. :func:`judge` says whether a task's one completion is one its plan
allows, given what may have happened to it (a crash that lost attempts, an
interrupt, a close or a clean reopen that may have ended it).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from retinue import PermanentError, Restart, Turn
from retinue.protocol.messages import Completion
from stress.statemachine.data import INTERRUPT_ERRORS

__all__ = [
    "ATTEMPTS",
    "KINDS",
    "MAX_RESTARTS",
    "PLANS",
    "Task",
    "judge",
    "policy",
    "run_plan",
]

MAX_RESTARTS = 2
ATTEMPTS = MAX_RESTARTS + 1
KINDS = ("quick", "held", "stubborn")
RETRIES_PERMANENT = frozenset({"stubborn"})
PLANS = st.one_of(
    st.text(alphabet="FPS", min_size=ATTEMPTS, max_size=ATTEMPTS),
    st.just("F" * ATTEMPTS),  # every attempt fails: the policy gives up (drawn often on purpose)
)


def _policy(backoff_s: float, *, retry_on: str = "transient") -> Restart:
    return Restart(
        max_restarts=MAX_RESTARTS,
        within_s=3600,
        backoff_s=backoff_s,
        backoff_max_s=backoff_s * 2,
        jitter=0.5,
        on=("failed", "lost"),
        retry_on=retry_on,  # type: ignore[arg-type]
    )


def policy(kind: str) -> Restart:
    """The restart policy of the profile ``kind``."""
    backoff_s = 0.25 if kind == "held" else 0.005
    return _policy(backoff_s, retry_on="any" if kind in RETRIES_PERMANENT else "transient")


def run_plan(turn: Turn) -> str:
    """Fail or succeed as the task's plan says for this attempt (``plan:FPS`` ...)."""
    plan = turn.task.split(":", 1)[1].split("#", 1)[0]
    letter = plan[min(turn.attempt, len(plan)) - 1]
    if letter == "F":
        raise RuntimeError(f"attempt {turn.attempt} failed as planned")
    if letter == "P":
        raise PermanentError(f"attempt {turn.attempt} failed for good as planned")
    return f"done on attempt {turn.attempt}"


@dataclass
class Task:
    """One task of an agent and what may happen to it."""

    plan: str
    kind: str = "quick"
    crashed: bool = False  # a crash may have lost attempts
    may_interrupt: bool = False  # an interrupt, close or clean reopen may end it

    def letters(self) -> str:
        """The plan as the policy sees it: a permanent failure is a failure to ``stubborn``."""
        return self.plan.replace("P", "F") if self.kind in RETRIES_PERMANENT else self.plan

    def end(self) -> int:
        """The attempt that ends the task when nothing is lost (0: every attempt fails)."""
        for index, letter in enumerate(self.letters(), 1):
            if letter != "F":
                return index
        return 0


def judge(task: Task, done: Completion) -> bool:
    """Whether ``done`` is a completion ``task``'s plan allows."""
    status, attempt, kind = str(done.status), done.attempt, done.error_type
    letters = task.letters()
    if status == "interrupted":
        return task.may_interrupt and done.error in INTERRUPT_ERRORS and kind is None
    ran = letters[attempt - 1] if 1 <= attempt <= len(letters) else ""
    on_time = task.crashed or attempt == task.end()
    if status == "completed":
        return ran == "S" and on_time and kind is None
    if kind == "PermanentError":
        return ran == "P" and on_time
    if kind == "CrashLoop":  # max_lost (3) losses in a row: every attempt was lost
        return task.crashed and attempt == ATTEMPTS
    limit = f"RestartLimitExceeded: {MAX_RESTARTS} restarts within 3600 s"
    return (
        kind == "RestartLimitExceeded"
        and (done.error or "").startswith(limit)
        and (task.crashed or task.end() == 0)
        and attempt == ATTEMPTS
    )
