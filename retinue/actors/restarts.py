"""Restarts: a profile's restart policy answers a failed (or lost) turn with a new attempt.

A turn the policy restarts makes no completion. Its agent becomes
``restarting`` at once, as the task's next generation, with its ``attempt``,
``last_error`` and ``restart_due_at`` stored (so a crash during the backoff
loses nothing and a reopen fires it when due); after the backoff it runs
again (``turn.reason == "restart"``). When a restart would make more than
``max_restarts`` restarts within ``within_s``, the policy gives up and the
turn settles ``failed`` with ``RestartLimitExceeded``: that one completion
goes to the parent. A deliberate interrupt or close cancels a pending
restart; an exhausted budget never restarts.

Timers are armed on the executor's loop (as the turn timeout's) and send
:class:`~retinue.actors.commands.FireRestarts`; every due restart runs then,
parents first: one whose ancestor has a restart pending waits for it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from retinue.actors.commands import FireRestarts
from retinue.actors.core import World
from retinue.actors.journal import JDict, Journaled
from retinue.actors.scheduler import Scheduler
from retinue.actors.transition import Transition
from retinue.protocol.messages import AgentState, TurnRestarting
from retinue.protocol.records import AgentRecord
from retinue.protocol.supervision import LOST_ERROR, RESTART_REASON, Restart, never_restarts

__all__ = ["EARLY_S", "Restarts", "SettleFailed"]

EARLY_S = 0.002
"""A restart due this soon runs now (a loop timer may fire a little early)."""

SettleFailed = Callable[[Transition, AgentRecord, str], None]
"""``settle_failed(tx, record, error)``: end ``record``'s task ``failed`` with its completion."""


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
        self.due: dict[str, float] = JDict(world.journal)  # agent id -> when its restart runs
        self.rng = random.Random()

    def policy(self, record: AgentRecord, on: str) -> Restart | None:
        """The restart policy of ``record``'s profile if it answers ``on`` (failed, lost)."""
        profile = self.world.profiles.get(record.profile)
        policy = None if profile is None else profile.restart
        return policy if policy is not None and on in policy.on else None

    # -- decisions ---------------------------------------------------------------------

    def after_failure(self, tx: Transition, record: AgentRecord, error: str) -> str | None:
        """A turn failed with ``error``: restart it (return None) or return the error to settle.

        The error is ``RestartLimitExceeded: ...`` when the policy gives up.
        """
        policy = self.policy(record, "failed")
        if policy is None or never_restarts(error):
            return error
        return self._restart(tx, record, error, policy)

    def lost(self, tx: Transition, record: AgentRecord) -> bool:
        """A turn was lost in a crash: restart it, or give up; False if no policy answers it.

        It waits attempt 1's backoff, whatever attempt was lost (the crash says
        nothing about the task), and counts as the task's next attempt. Called
        by the recovery, before the supervisor serves (nothing is woken).
        """
        policy = self.policy(record, "lost")
        if policy is None:
            return False
        error = self._restart(tx, record, LOST_ERROR, policy, backoff_of=1)
        if error is not None:
            self._settle_failed(tx, record, error)
        return True

    def _restart(
        self,
        tx: Transition,
        record: AgentRecord,
        error: str,
        policy: Restart,
        *,
        backoff_of: int | None = None,
    ) -> str | None:
        """Schedule the task's next attempt, or return the give-up error (intensity).

        It waits the backoff of restart ``backoff_of`` (default: the restart
        this one is, ``record.attempt``).
        """
        now = time.time()
        recent = tuple(t for t in record.restarts if t > now - policy.within_s)
        if len(recent) + 1 > policy.max_restarts:
            return (
                f"RestartLimitExceeded: {len(recent)} restart{'' if len(recent) == 1 else 's'} "
                f"within {policy.within_s:g} s; "
                f"last error: {error}"
            )
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
            updated_at=now,
        )
        self.due[record.id] = due
        tx.emit(
            TurnRestarting(
                agent_id=record.id,
                path=record.path,
                at=now,
                generation=record.generation,
                attempt=record.attempt,
                delay_s=delay,
                error=error,
            )
        )
        self.arm(tx, delay)
        return None

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
        """Index the pending restarts the store holds and arm their timers (at start-up)."""
        now = time.time()
        for record in self.world.tree.agents.values():
            if record.state is AgentState.RESTARTING:
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
        tree = self.world.tree
        parent_id = record.parent_id
        while parent_id is not None:
            parent = tree.agents[parent_id]
            if parent.state is AgentState.RESTARTING:
                return True
            parent_id = parent.parent_id
        return False

    def _run(self, tx: Transition, record: AgentRecord) -> None:
        """Start the pending attempt (it queues as ``starting`` if no slot is free)."""
        world = self.world
        if record.profile not in world.runners:
            self._settle_failed(
                tx,
                record,
                f"UnknownProfile: {record.path} has profile {record.profile!r}, which this "
                "runtime does not define; its pending restart cannot run",
            )
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
