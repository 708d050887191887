"""The restart machine's plans: what each attempt of a task does, and what its task must end as.

A task carries a plan, one letter per attempt: ``F`` fails transiently (a
``RuntimeError``), ``P`` fails permanently (a ``PermanentError``), ``S``
succeeds (``plan:FPS`` fails, then fails for good), ``T`` runs until its
turn's deadline ends it (``TurnTimeout``, transient; only the ``timed``
profile has a deadline). Four profiles
(:func:`~stress.statemachine.restart_inputs.profiles`) run them
under a restart policy of at most :data:`MAX_RESTARTS` restarts answering
``failed`` and ``lost``: ``quick`` restarts after a few milliseconds,
``held`` after a quarter second (so rules land in backoffs), ``stubborn``
restarts permanent failures too (``retry_on="any"``); the others leave them
failed; ``timed`` is ``quick`` with a turn deadline of :data:`TIMED_S` (the
fault rule's, so turn timeouts happen). :func:`judge` says whether a task's
one completion is one its plan allows, given what may have happened to it
(a crash that lost attempts, an interrupt, a close or a clean reopen that
may have ended it, an open without the profiles that recorded a loss the
next open gave up on).
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
    "TIMED",
    "TIMED_PLANS",
    "TIMED_S",
    "Task",
    "judge",
    "policy",
    "run_plan",
]

MAX_RESTARTS = 2
ATTEMPTS = MAX_RESTARTS + 1
KINDS = ("quick", "held", "stubborn")
TIMED = "timed"
TIMED_S = 0.2
"""The ``timed`` profile's ``turn_timeout_s``: a ``T`` attempt ends by it."""
HANG_S = 60.0
"""How long a ``T`` attempt waits for its deadline at most (a hang guard)."""
RETRIES_PERMANENT = frozenset({"stubborn"})
PLANS = st.one_of(
    st.text(alphabet="FPS", min_size=ATTEMPTS, max_size=ATTEMPTS),
    st.just("F" * ATTEMPTS),  # every attempt fails: the policy gives up (drawn often on purpose)
)
TIMED_PLANS = st.text(alphabet="FPST", min_size=ATTEMPTS, max_size=ATTEMPTS)
"""The ``timed`` profile's plans: ``T`` attempts end by the turn's deadline."""


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
    if letter == "T":  # the turn's deadline interrupts it (its late result is discarded)
        turn.cancelled.wait(HANG_S)
        return f"timed out on attempt {turn.attempt}"
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
    deferred: bool = False  # an open without the profiles recorded a loss (a pending attempt)

    def letters(self) -> str:
        """The plan as the policy sees it: a permanent failure is a failure to ``stubborn``,
        a timeout a transient failure."""
        plan = self.plan.replace("T", "F")
        return plan.replace("P", "F") if self.kind in RETRIES_PERMANENT else plan

    def slack(self) -> bool:
        """Whether any attempt may have failed beyond its plan: a ``timed`` attempt the
        deadline caught on a loaded machine fails as a timeout."""
        return self.kind == TIMED

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
    on_time = task.crashed or task.slack() or attempt == task.end()
    if status == "completed":
        return ran == "S" and on_time and kind is None
    if kind == "PermanentError":
        return ran == "P" and on_time
    # A give-up comes on the attempt after the last restart's, or (an open without the
    # profiles recorded the loss as a pending attempt) on that pending attempt.
    last = {ATTEMPTS, ATTEMPTS + 1} if task.deferred else {ATTEMPTS}
    if kind == "CrashLoop":  # max_lost (3) losses in a row: every attempt was lost
        return task.crashed and attempt in last
    limit = f"RestartLimitExceeded: {MAX_RESTARTS} restarts within 3600 s"
    return (
        kind == "RestartLimitExceeded"
        and (done.error or "").startswith(limit)
        and (task.crashed or task.slack() or task.end() == 0)
        and attempt in last
    )
