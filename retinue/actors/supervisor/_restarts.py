"""Restarts: a restart policy answers a failed (or lost) turn with a new attempt.

A turn the policy restarts makes no completion. Its agent becomes
``restarting`` at once, as the task's next generation, with its ``attempt``,
``last_error`` and ``restart_due_at`` stored (so a crash during the backoff
loses nothing and a reopen fires it when due); after the backoff it runs
again (``turn.reason == "restart"``). A permanent failure is restarted only
under ``retry_on="any"``. When a restart would make more than
``max_restarts`` restarts within ``within_s``, the policy gives up and the
turn settles ``failed`` with ``RestartLimitExceeded``; a task lost while
running ``max_lost`` times in a row settles ``failed`` with ``CrashLoop``:
that one completion goes to the parent. A deliberate interrupt or close
cancels a pending restart; an exhausted budget never restarts.

The policy in force is the agent's profile's when this runtime defines it,
else the one stored with the agent (``AgentRecord.restart``). An open
without the profile (``retinue compact``) decides nothing: a turn it finds
lost under a stored ``"lost"`` policy only becomes a pending restart (its
loss counted, its due time stored), and a pending restart stays pending.
The first open that defines the profile decides, as it recovers
(:meth:`Restarts.decide_pending`): ``max_lost`` and the intensity apply to
the pending restart as if that runtime had made it, so a give-up settles
the task there (its completion is the pending attempt's, which never ran).

Timers are armed on the executor's loop (as the turn timeout's) and send
:class:`~retinue.actors.commands.FireRestarts`; every due restart runs then,
parents first: one whose ancestor has a restart pending here waits for it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import msgspec

from retinue.actors import JDict, Journaled
from retinue.actors.commands import FireRestarts
from retinue.actors.supervisor._scheduler import Scheduler
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World
from retinue.errors import ConfigurationError
from retinue.protocol.failures import CRASH_LOOP, TurnError
from retinue.protocol.messages import AgentState, TurnRestarting
from retinue.protocol.records import AgentRecord
from retinue.protocol.supervision import LOST_ERROR, RESTART_REASON, Restart, never_restarts

__all__ = ["EARLY_S", "Restarts", "SettleFailed"]

EARLY_S = 0.002
"""A restart due this soon runs now (a loop timer may fire a little early)."""

SettleFailed = Callable[[Transition, AgentRecord, TurnError], None]
"""``settle_failed(tx, record, error)``: end ``record``'s task ``failed`` with its completion."""


def _crash_loop(lost: int, policy: Restart) -> TurnError:
    """The give-up error of a task lost ``lost`` times in a row (``max_lost``)."""
    text = (
        f"{CRASH_LOOP}: lost in a crash {lost} times in a row while running "
        f"(Restart.max_lost is {policy.max_lost}); it is not restarted again"
    )
    return TurnError(text, CRASH_LOOP)


def _limit_text(restarts: int, policy: Restart, error: str) -> str:
    """The give-up error's text when ``restarts`` within the window leave no room for one more."""
    return (
        f"RestartLimitExceeded: {restarts} restart{'' if restarts == 1 else 's'} "
        f"within {policy.within_s:g} s; last error: {error}"
    )


class Restarts(Journaled):
    """Pending restarts, their timers, and the policy's decisions. Supervisor thread only."""

    _config = frozenset({"world", "rng"})

    def __init__(self, world: World, scheduler: Scheduler, settle_failed: SettleFailed) -> None:
        """Restart in ``world``; turns start on ``scheduler``; a task that cannot go on
        ends through ``settle_failed``."""
        self._journal = world.journal
        self.world = world
        self.scheduler = scheduler
        self._settle_failed = settle_failed
        # Agent id -> when its pending restart runs here.
        self.due: dict[str, float] = JDict(world.journal)
        self.rng = random.Random()

    def in_force(self, record: AgentRecord) -> Restart | None:
        """The restart policy of ``record``: its profile's if this runtime defines the
        profile, else the one stored with it (None: none, or a stored one that is not valid)."""
        profile = self.world.profiles.get(record.profile)
        if profile is not None:
            return profile.restart
        if record.restart is None:
            return None
        try:
            return record.restart.policy()
        except ConfigurationError:  # a damaged record: as if it had none
            return None

    def policy(self, record: AgentRecord, on: str) -> Restart | None:
        """The policy in force for ``record`` if it answers ``on`` (failed, lost)."""
        policy = self.in_force(record)
        return policy if policy is not None and on in policy.on else None

    def _runs_here(self, record: AgentRecord) -> bool:
        """Whether this runtime can run ``record``'s turns (it defines its profile)."""
        return record.profile in self.world.runners

    # -- decisions ---------------------------------------------------------------------

    def after_failure(
        self, tx: Transition, record: AgentRecord, error: TurnError, *, span: str | None = None
    ) -> TurnError | None:
        """A turn failed with ``error``: restart it (return None) or return the error to settle.

        A permanent failure stays failed unless the policy's ``retry_on`` is
        ``"any"``. The error is ``RestartLimitExceeded: ...`` when the policy gives up.
        ``span``: the failed turn's (kept with its generation, as it restarts).
        """
        policy = self.policy(record, "failed")
        if policy is None or never_restarts(error.text):
            return error
        if error.permanent and policy.retry_on != "any":
            return error
        return self._restart(tx, record, policy, error.text, error.type, span=span)

    def lost(self, tx: Transition, record: AgentRecord) -> bool:
        """A turn was lost in a crash: restart it, or give up; False if no policy answers it.

        It waits attempt 1's backoff, whatever attempt was lost (the crash says
        nothing about the task), and counts as the task's next attempt. A turn
        lost while running counts toward ``max_lost``: at that many losses in a
        row the task settles ``failed`` with ``CrashLoop``. Called by the
        recovery, before the supervisor serves (nothing is woken).
        """
        policy = self.policy(record, "lost")
        if policy is None:
            return False
        lost = record.lost + (1 if record.state is AgentState.RUNNING else 0)
        if not self._runs_here(record):  # record the loss; the profile's open decides
            self._schedule(tx, record, policy, LOST_ERROR, None, backoff_of=1, lost=lost)
            return True
        if lost >= policy.max_lost:
            self._settle_failed(tx, self.world.update(record, lost=lost), _crash_loop(lost, policy))
            return True
        error = self._restart(tx, record, policy, LOST_ERROR, None, backoff_of=1, lost=lost)
        if error is not None:
            self._settle_failed(tx, record, error)
        return True

    def decide_pending(self, tx: Transition, record: AgentRecord) -> bool:
        """Apply ``max_lost`` and the intensity to ``record``'s pending restart (at recovery).

        An open without the agent's profile records a loss as a pending
        restart and decides nothing; this runtime, which defines the profile,
        decides as if it had made that restart: a task lost ``max_lost``
        times in a row settles ``failed`` with ``CrashLoop``, one whose
        restart made more than ``max_restarts`` within ``within_s`` with
        ``RestartLimitExceeded``. A restart this runtime's policy allowed
        when it made it passes again. Returns whether the task was settled.
        """
        if record.state is not AgentState.RESTARTING or not self._runs_here(record):
            return False
        policy = self.in_force(record)
        if policy is None:
            return False
        if record.lost >= policy.max_lost:
            self._settle_failed(tx, record, _crash_loop(record.lost, policy))
            return True
        if record.restarts:
            made = record.restarts[-1]
            before = [t for t in record.restarts[:-1] if t > made - policy.within_s]
            if len(before) + 1 > policy.max_restarts:
                text = _limit_text(len(before), policy, record.last_error or LOST_ERROR)
                self._settle_failed(tx, record, TurnError(text, "RestartLimitExceeded"))
                return True
        return False

    def _restart(
        self,
        tx: Transition,
        record: AgentRecord,
        policy: Restart,
        error: str,
        error_type: str | None,
        *,
        backoff_of: int | None = None,
        lost: int = 0,
        span: str | None = None,
    ) -> TurnError | None:
        """Schedule the task's next attempt, or return the give-up error (intensity).

        It waits the backoff of restart ``backoff_of`` (default: the restart
        this one is, ``record.attempt``); ``lost`` is the task's losses in a
        row so far. A restart this runtime cannot run (it lacks the profile)
        stays pending in the store, with no timer. The attempt that ends is
        kept as a settled generation (failed; interrupted for one lost in a
        crash), with its turn's ``span``.
        """
        now = time.time()
        recent = [t for t in record.restarts if t > now - policy.within_s]
        if len(recent) + 1 > policy.max_restarts:
            return TurnError(_limit_text(len(recent), policy, error), "RestartLimitExceeded")
        self._schedule(
            tx, record, policy, error, error_type, backoff_of=backoff_of, lost=lost, span=span
        )
        return None

    def _schedule(
        self,
        tx: Transition,
        record: AgentRecord,
        policy: Restart,
        error: str,
        error_type: str | None,
        *,
        backoff_of: int | None,
        lost: int,
        span: str | None = None,
    ) -> None:
        """Make ``record``'s task's next attempt a pending restart (no give-up checked here).

        A restart this runtime cannot run (it lacks the profile) stays pending
        in the store, with no timer. The attempt that ends is kept as a
        settled generation (failed; interrupted for one lost in a crash), with
        its turn's ``span``.
        """
        now = time.time()
        recent = tuple(t for t in record.restarts if t > now - policy.within_s)
        ended = msgspec.structs.replace(
            record,
            state=AgentState.INTERRUPTED if error == LOST_ERROR else AgentState.FAILED,
            output=None,
            error=error,
            error_type=error_type,
            updated_at=now,
        )
        world = self.world
        world.history.settled(tx, ended, span=span, at=now, committed=world.restoring)
        delay = policy.delay(record.attempt if backoff_of is None else backoff_of, self.rng)
        due = now + delay
        record = self.world.update(
            record,
            state=AgentState.RESTARTING,
            generation=record.generation + 1,
            attempt=record.attempt + 1,
            last_error=error,
            restart_due_at=due,
            restarts=(*recent, now),
            output=None,
            error=None,
            error_type=None,
            updated_at=now,
            restart=self.world.policies.get(record.profile, record.restart),
            lost=lost,
        )
        tx.emit(
            TurnRestarting(
                agent_id=record.id,
                path=record.path,
                at=now,
                generation=record.generation,
                attempt=record.attempt,
                delay_s=delay,
                error=error,
                error_type=error_type,
            )
        )
        if self._runs_here(record):
            self.due[record.id] = due
            self.arm(tx, delay)

    # -- timers and firing -------------------------------------------------------------

    def arm(self, tx: Transition, delay: float) -> None:
        """After the commit, arm a timer that sends ``FireRestarts`` in ``delay`` seconds."""
        engine, loop = self.world.engine, self.world.executor.loop

        def fire() -> None:  # closed meanwhile: the command is refused, nothing runs
            engine.tell(FireRestarts())

        def arm() -> None:
            loop.call_later(max(0.0, delay), fire)

        tx.after(arm)

    def rearm(self, tx: Transition) -> None:
        """Index the pending restarts the store holds and arm their timers (at start-up).

        Those this runtime cannot run (it lacks their profile) stay pending, unindexed.
        """
        now = time.time()
        tree = self.world.tree
        for record in [tree.agents[agent_id] for agent_id in tree.busy]:
            if record.state is AgentState.RESTARTING and self._runs_here(record):
                due = record.restart_due_at if record.restart_due_at is not None else now
                self.due[record.id] = due
                self.arm(tx, due - now)

    def fire_due(self, tx: Transition) -> None:
        """Run every restart that is due, parents first (one below a pending restart waits)."""
        tree = self.world.tree
        now = time.time()
        for agent_id in sorted(self.due, key=self._order):
            record = tree.agents.get(agent_id)
            if record is None or record.state is not AgentState.RESTARTING:
                self.due.pop(agent_id, None)
                continue
            if self.due[agent_id] > now + EARLY_S or self._ancestor_restarting(record):
                continue
            del self.due[agent_id]
            self._run(tx, record)

    def _order(self, agent_id: str) -> tuple[int, float]:
        record = self.world.tree.agents.get(agent_id)
        return (0, 0.0) if record is None else (record.depth, record.created_at)

    def _ancestor_restarting(self, record: AgentRecord) -> bool:
        """Whether an ancestor's restart is pending here (one that cannot run here is not)."""
        tree = self.world.tree
        parent_id = record.parent_id
        while parent_id is not None:
            parent = tree.agents[parent_id]
            if parent.state is AgentState.RESTARTING and parent_id in self.due:
                return True
            parent_id = parent.parent_id
        return False

    def _run(self, tx: Transition, record: AgentRecord) -> None:
        """Start the pending attempt (it queues as ``starting`` if no slot is free)."""
        world = self.world
        if not self._runs_here(record):  # stays pending for a runtime with its profile
            return
        now = time.time()
        starts = self.scheduler.would_start(record.profile)
        record = world.update(
            record,
            state=AgentState.RUNNING if starts else AgentState.STARTING,
            restart_due_at=None,
            started_at=now if starts else record.started_at,
            updated_at=now,
        )
        self.scheduler.enqueue(tx, record, record.task, RESTART_REASON, start=starts)

    def cancel(self, tx: Transition, agent_id: str) -> None:
        """Forget ``agent_id``'s pending restart (interrupted or closed).

        A restart that waited below it may run now: a timer is armed for it.
        """
        if self.due.pop(agent_id, None) is not None and self.due:
            self.arm(tx, 0.0)

    def quiet(self) -> bool:
        """True when no restart is pending."""
        return not self.due
