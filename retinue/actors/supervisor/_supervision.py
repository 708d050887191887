"""Supervision in the supervisor: restart policies, approvals of tool calls, call admission.

:class:`Supervision` composes the three parts (:mod:`~retinue.actors.supervisor._restarts`,
:mod:`~retinue.actors.supervisor._approvals`,
:mod:`~retinue.actors.supervisor._admission`) and serves
their commands (:data:`~retinue.actors.commands.SupervisionCommand`) for the
supervisor's ``match``. The lifecycle calls it where a turn fails (a restart
may answer), ends (its parks and call reservations go) and is interrupted
while a restart is pending; the recovery where a turn was lost in a crash.
"""

from __future__ import annotations

from typing import Any, assert_never

from retinue.actors import Journaled
from retinue.actors.commands import (
    AdmitCall,
    Approve,
    AwaitApproval,
    Deny,
    ExpireApprovals,
    FireRestarts,
    Rearm,
    SupervisionCommand,
)
from retinue.actors.commands import Approvals as ListApprovals
from retinue.actors.supervisor._admission import Admission
from retinue.actors.supervisor._approvals import Approvals
from retinue.actors.supervisor._restarts import Restarts
from retinue.actors.supervisor._routing import Router
from retinue.actors.supervisor._scheduler import TURN_ENDED, Scheduler
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World, sending_turn
from retinue.errors import TurnInterrupted
from retinue.protocol.failures import TurnError
from retinue.protocol.messages import AgentState, CompletionStatus
from retinue.protocol.records import AgentRecord
from retinue.protocol.text import bounded_text

__all__ = ["Supervision"]


class Supervision(Journaled):
    """Restarts, approvals and call admission, over one world. Supervisor thread only."""

    def __init__(self, world: World, scheduler: Scheduler, router: Router) -> None:
        """Compose the parts; turns start on ``scheduler``, completions go through ``router``."""
        self._journal = world.journal
        self.world = world
        self.scheduler = scheduler
        self.router = router
        self.restarts = Restarts(world, scheduler, self.settle_failed)
        self.approvals = Approvals(world, scheduler)
        self.admission = Admission(world)

    def serve(self, tx: Transition, me: AgentRecord | None, command: SupervisionCommand) -> Any:
        """Serve one supervision command; return its answer.

        Raises:
            RetinueError: the command is refused (nothing changed).
        """
        match command:
            case FireRestarts():
                self.restarts.fire_due(tx)
                return None
            case Rearm():
                self.restarts.rearm(tx)
                self.approvals.rearm(tx)
                return None
            case AwaitApproval():
                return self.approvals.park(tx, sending_turn(me), command)
            case ListApprovals():
                below = None
                if command.ref is not None:
                    below = self.world.target(me, command.ref, "list approvals of", command.field)
                elif me is not None:
                    below = me
                return self.approvals.pending(below)
            case Approve():
                self.approvals.answer(tx, command.request_id, approved=True, note=command.note)
                return None
            case Deny():
                self.approvals.answer(tx, command.request_id, approved=False, reason=command.reason)
                return None
            case ExpireApprovals():
                self.approvals.expire(tx)
                return None
            case AdmitCall():
                self.admission.admit(tx, sending_turn(me))
                return None
            case _:
                assert_never(command)

    def settle_failed(self, tx: Transition, record: AgentRecord, error: TurnError) -> None:
        """End ``record``'s task ``failed`` with ``error``: its one completion is routed."""
        record = self.world.update(
            record,
            state=AgentState.FAILED,
            output=None,
            error=bounded_text(error.text, self.world.limits.output_max_bytes),
            error_type=error.type,
            restart_due_at=None,
        )
        self.router.emit_completion(tx, record, CompletionStatus.FAILED)
        self.router.maybe_wake(tx, record.id)

    def turn_ended(self, tx: Transition, agent_id: str, why: TurnInterrupted | None) -> None:
        """A turn ended (settled, interrupted, closed): its parks and reservations go
        (``why``: what their waits fail with; None: ``TurnInterrupted(TURN_ENDED)``, made
        only if there is one)."""
        # Each part is called only when it holds something of the agent's (looked up in C:
        # nearly every turn has neither a park, a request, a reservation nor a wait).
        approvals, admission = self.approvals, self.admission
        if agent_id in approvals.parked or agent_id in approvals.by_agent:
            if why is None:
                why = TurnInterrupted(TURN_ENDED)
            approvals.release(tx, agent_id, why)
        if (
            admission.waiting
            or agent_id in admission.flying
            or agent_id in admission.largest_tokens
            or agent_id in admission.largest_usd
        ):
            admission.release(tx, agent_id, TurnInterrupted(TURN_ENDED) if why is None else why)

    def quiet(self) -> bool:
        """True when nothing will happen by itself: no turn queued or running (a turn parked
        for approval waits for a person), every runner reported back, no restart pending."""
        scheduler = self.scheduler
        parked = self.approvals.parked
        if not parked:  # the common case, O(1): the scheduler's own answer
            return scheduler.quiet() and self.restarts.quiet()
        if scheduler.pending_turn or scheduler.reacquire or not self.restarts.quiet():
            return False
        if len(scheduler.turns) > len(parked) or len(scheduler.unreported) > len(parked):
            return False  # some turn is not parked (checked in O(parked) below otherwise)
        return all(a in parked for a in scheduler.turns) and all(
            a in parked for a, _ in scheduler.unreported
        )
