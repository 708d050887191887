"""What a failed command leaves: nothing of its own, and no agent with nothing to carry it on.

A supervisor command is one transaction. When its handler raises, the
supervisor rolls it back (the journal undoes its changes to memory, its
writes, events and effects are dropped: :meth:`Rescue.roll_back`) and
answers its caller with :class:`~retinue.errors.InternalError`, naming the
command and the cause (:func:`internal_error`).

Rolling back is not always enough. Some commands are the last word on a turn:
a settle (its runner has returned and will not report again), a turn's
timeout, a due restart's firing, an approval's answer or expiry. Undone, they
would leave the agent busy with no runner, no due restart and no pending
answer to carry it on. For those, :meth:`Rescue.rescue` applies a second,
minimal transition: each such turn ends ``failed`` with the InternalError as
its error (its one completion goes to its recipient as any failure's would).
A failed settle's runner counts as returned in that transition, also when
the settle was stale (the last word on no turn), and the transition ends as
every command does (held wakes, idle host waits, waits for quiescence), so
nothing waits for a command that will not come. If even that raises, the
bare minimum is written (the agent ``failed``, its completion routed)
without the parts that failed.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from retinue.actors import snapshot
from retinue.actors.calls import Reply
from retinue.actors.commands import (
    Approve,
    Deny,
    ExpireApprovals,
    ExpireTurn,
    FireRestarts,
    GiveUpWait,
    Host,
    Settle,
    SupervisorCommand,
    TurnRef,
)
from retinue.actors.supervisor._host_waits import HostWaits
from retinue.actors.supervisor._lifecycle import Lifecycle
from retinue.actors.supervisor._restarts import EARLY_S
from retinue.actors.supervisor._scheduler import Scheduler
from retinue.actors.supervisor._supervision import Supervision
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World
from retinue.errors import InternalError
from retinue.protocol.messages import AgentState, CompletionStatus
from retinue.protocol.text import bounded_text

__all__ = ["Rescue", "internal_error"]

log = logging.getLogger("retinue.supervisor")


def internal_error(command: object, exc: BaseException) -> InternalError:
    """Return the error a command that raised ``exc`` is answered with."""
    name = type(command).__name__
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not stop the answer
        message = "(its message could not be read)"
    cause = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    cause = bounded_text(cause, 2000)
    return InternalError(
        f"retinue failed on {name} ({cause}); nothing it did was kept. This is a bug in "
        "retinue: please report it with the log",
        command=name,
        cause=cause,
    )


class Rescue:
    """Rolls failed commands back and ends the turns they would strand. Supervisor thread only."""

    def __init__(
        self,
        world: World,
        scheduler: Scheduler,
        lifecycle: Lifecycle,
        supervision: Supervision,
        hosts: HostWaits,
        parts: tuple[object, ...],
    ) -> None:
        """Act through the parts; ``parts`` are every part whose state a command changes."""
        self.world = world
        self.scheduler = scheduler
        self.lifecycle = lifecycle
        self.supervision = supervision
        self.hosts = hosts
        self.parts = parts
        # What tests read, per fault a test injected (retinue.actors.tree._journal.FaultPlan):
        # the command, whether memory was exactly restored, the turns the rescue failed.
        self.faults: list[tuple[str, bool, tuple[tuple[str, int], ...]]] = []
        self.rescued: tuple[tuple[str, int], ...] = ()  # the turns the last rescue failed

    def picture(self) -> Any:
        """Return a comparable picture of every part's state (see :func:`snapshot`)."""
        return snapshot(self.parts)

    def roll_back(self, tx: Transition) -> None:
        """Undo everything ``tx``'s command did: memory, gathered writes, events, effects."""
        self.world.journal.roll_back()
        self.world.tree.drop_writes()
        tx.discard()

    # -- the second transition ---------------------------------------------------------

    def stranded_by(self, command: SupervisorCommand) -> list[str]:
        """Return the agents whose turn ``command`` was the last word on (now undone)."""
        world = self.world
        match command:
            case (
                Settle(sender=turn) | ExpireTurn(sender=turn) | GiveUpWait(sender=TurnRef() as turn)
            ):
                current = self.scheduler.is_current(turn.agent_id, turn.generation)
                return [turn.agent_id] if current else []
            case FireRestarts():
                now = time.time()
                due = self.supervision.restarts.due
                return [agent_id for agent_id, at in due.items() if at <= now + EARLY_S]
            case Approve() | Deny():
                request_id = command.request_id
                record = (
                    self.supervision.approvals.records.get(request_id)
                    if isinstance(request_id, str)
                    else None
                )
                return [] if record is None else [record.request.agent_id]
            case ExpireApprovals():
                now = time.time()
                return sorted(
                    {
                        r.request.agent_id
                        for r in self.supervision.approvals.records.values()
                        if r.pending
                        and r.request.expires_at is not None
                        and r.request.expires_at <= now
                    }
                )
        del world
        return []

    def rescue(
        self, command: SupervisorCommand, error: InternalError, *, last: bool = True
    ) -> Transition | None:
        """End the turns a failed ``command`` strands, ``failed`` with ``error``, in a second
        transition that also counts a failed settle's runner as returned (None: nothing to
        repair); ``last``: no command waits behind it (waits for quiescence may be answered)."""
        agents = [a for a in self.stranded_by(command) if self._busy(a)]
        tree = self.world.tree
        self.rescued = tuple((a, tree.agents[a].generation) for a in agents)
        host_wait = (
            command.future
            if isinstance(command, GiveUpWait) and isinstance(command.sender, Host)
            else None
        )
        # A settle's runner has returned, stale or not: count it so, or the runtime
        # never becomes quiet (it would wait for a runner that is gone).
        if not agents and host_wait is None and not isinstance(command, Settle):
            return None
        world = self.world
        tx = Transition(Reply(), world.bus, command, record_events=world.bus.active)
        text = f"InternalError: {error}"
        world.journal.begin(None)
        try:
            if isinstance(command, Settle):  # its runner reported back: no runner runs now
                self.scheduler.runner_returned(tx, command.sender)
            for agent_id in agents:
                self.lifecycle.fail_turn(tx, agent_id, text)
            if host_wait is not None:
                self.hosts.drop_wait(tx, host_wait, error)
            self.lifecycle.router.wake_drained(tx)  # the end of every command's transition
            self.hosts.end_idle_host_waits(tx)
            self.hosts.serve_idle(tx, last and self.supervision.quiet())
            tx.writes = world.tree.take_writes()
            world.journal.keep()
        except Exception:
            log.exception("the rescue of a failed %r failed too; writing the minimum", command)
            self.roll_back(tx)
            self._bare_minimum(tx, command, agents, text)
        return tx

    def _busy(self, agent_id: str) -> bool:
        record = self.world.tree.agents.get(agent_id)
        return record is not None and record.state.busy

    def _bare_minimum(
        self, tx: Transition, command: SupervisorCommand, agents: list[str], text: str
    ) -> None:
        """Mark each agent ``failed`` with its completion routed, touching as little as can be."""
        world = self.world
        scheduler = self.scheduler
        if isinstance(command, Settle):
            scheduler.unreported.discard((command.sender.agent_id, command.sender.generation))
        for agent_id in agents:
            try:
                scheduler.turns.pop(agent_id, None)
                scheduler.active.discard(agent_id)
                scheduler.pending_turn.pop(agent_id, None)
                self.supervision.restarts.due.pop(agent_id, None)
                self.supervision.approvals.parked.pop(agent_id, None)
                record = world.update(
                    world.tree.agents[agent_id],
                    state=AgentState.FAILED,
                    output=None,
                    error=bounded_text(text, world.limits.output_max_bytes),
                    error_type="InternalError",
                    restart_due_at=None,
                )
                self.lifecycle.router.emit_completion(tx, record, CompletionStatus.FAILED)
            except Exception:
                log.critical("agent %s could not even be marked failed", agent_id, exc_info=True)
        tx.writes = world.tree.take_writes()
