"""Approvals: a model's tool call that needs a person's yes waits, durably, for it.

A model turn asks through :class:`~retinue.actors.commands.AwaitApproval`:
each call gets a stored :class:`~retinue.protocol.supervision.ApprovalRecord`,
and the turn parks (``awaiting_approval``) holding no turn slot and no thread
until every one is answered; then it asks for its slot again and carries on
with the answers. The park survives a crash: after a reopen the requests are
still pending, and once they are answered the supervisor starts the turn
again as the same generation (``turn.reason == "approval"``), which carries
on from its stored transcript. ``approve``, ``deny`` and
``Limits.approval_timeout_s`` (a timer on the executor's loop, re-armed on
open) answer requests; an interrupt or close cancels the pending ones. Each
request takes one answer. A park is still its turn: the profile's
``turn_timeout_s`` ends it, counted from when the turn started, after a
reopen too (:mod:`~retinue.actors.supervisor._deadlines`). A runtime that lacks the
agent's profile (``retinue compact``) neither times its requests out nor
carries its turn on: they stay pending (a person may still answer them) until
a runtime with the profile opens.
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass
from typing import Any

import msgspec

from retinue.actors import JDict, Journaled, claim
from retinue.actors.commands import AwaitApproval, ExpireApprovals
from retinue.actors.supervisor._deadlines import arm_deadline
from retinue.actors.supervisor._scheduler import Scheduler, SlotRequest
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World, require_str
from retinue.errors import (
    ApprovalAlreadyAnswered,
    ArgumentTypeError,
    TurnInterrupted,
    UnknownApproval,
)
from retinue.protocol.checks import check_text
from retinue.protocol.ids import new_id
from retinue.protocol.messages import AgentState, ApprovalAnswered, ApprovalRequested
from retinue.protocol.records import AgentRecord
from retinue.protocol.supervision import (
    APPROVAL_REASON,
    TIMED_OUT,
    ApprovalRecord,
    ApprovalRequest,
    ApprovalStatus,
)

__all__ = ["Approvals", "Parked", "pending_requests"]

_encode = msgspec.msgpack.Encoder().encode


@dataclass(frozen=True)
class Parked:
    """A live turn parked for approvals: its reply, generation and requests, in call order."""

    future: concurrent.futures.Future[Any]
    generation: int
    ids: tuple[str, ...]


def pending_requests(
    records: dict[str, ApprovalRecord], agents: dict[str, AgentRecord], below: AgentRecord | None
) -> list[ApprovalRequest]:
    """Return the pending requests (of ``below``'s subtree, or all), oldest first."""
    out: list[ApprovalRequest] = []
    for record in records.values():
        if not record.pending:
            continue
        if below is not None and not _in_subtree(agents, record.request.agent_id, below.id):
            continue
        out.append(record.request)
    return sorted(out, key=lambda r: (r.requested_at, r.id))


def _in_subtree(agents: dict[str, AgentRecord], agent_id: str, root_id: str) -> bool:
    node: str | None = agent_id
    while node is not None:
        if node == root_id:
            return True
        record = agents.get(node)
        node = None if record is None else record.parent_id
    return False


class Approvals(Journaled):
    """Every approval request and the turns parked on them. Supervisor thread only."""

    def __init__(self, world: World, scheduler: Scheduler) -> None:
        """Keep the requests of ``world``; parked turns get their slot from ``scheduler``."""
        j = self._journal = world.journal
        self.world = world
        self.scheduler = scheduler
        self.records: dict[str, ApprovalRecord] = JDict(j)
        # Agent id -> its request ids, oldest first.
        self.by_agent: dict[str, tuple[str, ...]] = JDict(j)
        self.parked: dict[str, Parked] = JDict(j)  # agent id -> its parked live turn

    def load(self, records: list[ApprovalRecord]) -> None:
        """Index the requests a restore found (before the supervisor serves)."""
        for record in sorted(records, key=lambda r: r.request.requested_at):
            self._index(record)

    def _index(self, record: ApprovalRecord) -> None:
        request = record.request
        if request.id not in self.records:
            self.by_agent[request.agent_id] = (*self.by_agent.get(request.agent_id, ()), request.id)
        self.records[request.id] = record

    def _put(self, record: ApprovalRecord) -> None:
        self._index(record)
        self.world.tree.writes.append(("approvals", record.request.id.encode(), _encode(record)))

    # -- a turn asks -------------------------------------------------------------------

    def park(
        self, tx: Transition, me: AgentRecord, command: AwaitApproval
    ) -> list[ApprovalRecord] | None:
        """Record the turn's requests; answer at once if all are answered, else park it.

        Raises:
            ArgumentTypeError: ``calls`` is not a tuple of three strings each.
        """
        calls = _check_calls(command.calls)
        doubt = _check_in_doubt(command.in_doubt)
        ids = tuple(
            self._request(tx, me, *call, reuse=command.resume, key=doubt.get(call[0])).request.id
            for call in calls
        )
        if not any(self.records[i].pending for i in ids):
            return [self.records[i] for i in ids]
        self.world.update(me, state=AgentState.AWAITING_APPROVAL)
        self.parked[me.id] = Parked(tx.defer(), me.generation, ids)
        self.scheduler.yield_slot(tx, me.id)  # a parked turn holds no slot
        return None

    def _request(
        self,
        tx: Transition,
        me: AgentRecord,
        call_id: str,
        tool: str,
        arguments: str,
        *,
        reuse: bool,
        key: str | None = None,
    ) -> ApprovalRecord:
        """The request of one call: with ``reuse``, the latest one this generation made for
        the same call id; otherwise (or with none) a new one (``key``: the idempotency key
        of a call in doubt, which the request says it is)."""
        for known in reversed(self.by_agent.get(me.id, ()) if reuse else ()):
            held = self.records[known]
            if held.request.generation == me.generation and held.request.call_id == call_id:
                return held
        now = time.time()
        timeout = self.world.limits.approval_timeout_s
        request = ApprovalRequest(
            id=new_id(),
            agent_id=me.id,
            path=me.path,
            tool=tool,
            arguments=arguments,
            requested_at=now,
            generation=me.generation,
            call_id=call_id,
            expires_at=None if timeout is None else now + timeout,
            in_doubt=key is not None,
            idempotency_key=key,
        )
        record = ApprovalRecord(request=request)
        self._put(record)
        tx.emit(
            ApprovalRequested(
                agent_id=me.id,
                path=me.path,
                at=now,
                request_id=request.id,
                tool=tool,
                arguments=arguments,
                in_doubt=key is not None,
            )
        )
        if timeout is not None:
            self._arm(tx, timeout)
        return record

    # -- the host answers --------------------------------------------------------------

    def answer(
        self,
        tx: Transition,
        request_id: Any,
        *,
        approved: bool,
        note: Any = None,
        reason: Any = None,
    ) -> None:
        """Approve or deny one pending request; a turn whose requests are all answered goes on.

        Raises:
            ArgumentTypeError: a non-str id, note or reason.
            InvalidArgument: a blank reason, or text that cannot be stored.
            UnknownApproval: no request has that id.
            ApprovalAlreadyAnswered: it was answered (or cancelled) before.
        """
        request_id = require_str(request_id, "request_id")
        if note is not None:
            note = self._text(note, "note")
        if not approved:
            reason = self._text(reason, "reason")
        record = self.records.get(request_id)
        if record is None:
            raise UnknownApproval(
                f"no approval request {request_id[:60]!r}; list them with approvals()"
            )
        if not record.pending:
            raise ApprovalAlreadyAnswered(
                f"approval request {request_id} ({record.request.tool} of "
                f"{record.request.path}) was {record.status} already; it takes one answer"
            )
        self._settle(tx, record, "approved" if approved else "denied", note, reason)
        self._resume_if_answered(tx, record.request.agent_id, record.request.generation)

    def _text(self, value: Any, what: str) -> str:
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{what} must be a str, not {type(value).__name__}")
        text = check_text(value, what)
        self.world.check_size(text, what)
        return text

    def _settle(
        self,
        tx: Transition,
        record: ApprovalRecord,
        status: ApprovalStatus,
        note: str | None,
        reason: str | None,
    ) -> None:
        now = time.time()
        done = msgspec.structs.replace(
            record, status=status, answered_at=now, note=note, reason=reason
        )
        self._put(done)
        request = record.request
        tx.emit(
            ApprovalAnswered(
                agent_id=request.agent_id,
                path=request.path,
                at=now,
                request_id=request.id,
                tool=request.tool,
                approved=status == "approved",
                reason=reason if status != "approved" else None,
            )
        )

    def _resume_if_answered(self, tx: Transition, agent_id: str, generation: int) -> None:
        """Once a turn's requests are all answered: hand them to its parked turn, or (after
        a reopen, with no live turn) start the turn again to carry on."""
        mine = [self.records[i] for i in self.by_agent.get(agent_id, ())]
        if any(r.pending and r.request.generation == generation for r in mine):
            return
        parked = self.parked.get(agent_id)
        if parked is not None and parked.generation == generation:
            del self.parked[agent_id]
            if not claim(self._journal, parked.future):
                return
            answers = [self.records[i] for i in parked.ids]
            world = self.world

            def take(_: Transition) -> list[ApprovalRecord]:
                world.update(world.tree.agents[agent_id], state=AgentState.RUNNING)
                return answers

            self.scheduler.request_slot(tx, SlotRequest(agent_id, parked.future, take))
            return
        record = self.world.tree.agents.get(agent_id)
        if (
            record is not None
            and record.state is AgentState.AWAITING_APPROVAL
            and record.generation == generation
            and agent_id not in self.scheduler.turns
        ):
            self._carry_on(tx, record)

    def _carry_on(self, tx: Transition, record: AgentRecord) -> None:
        """Start the turn of a parked agent again, as the same generation (it lost its runner).

        It keeps the time it first started: its ``turn_timeout_s`` counts from then.
        """
        if record.profile not in self.world.runners:
            return  # stays parked: a runtime with its profile carries it on
        starts = self.scheduler.would_start(record.profile)
        record = self.world.update(
            record, state=AgentState.RUNNING if starts else AgentState.STARTING
        )
        self.scheduler.enqueue(tx, record, record.task, APPROVAL_REASON, start=starts)

    # -- timeouts ------------------------------------------------------------------------

    def _arm(self, tx: Transition, delay: float) -> None:
        engine, loop = self.world.engine, self.world.executor.loop

        def expire() -> None:  # closed meanwhile: refused, nothing happens
            engine.tell(ExpireApprovals())

        def arm() -> None:
            loop.call_later(max(0.0, delay), expire)

        tx.after(arm)

    def _runs_here(self, agent_id: str) -> bool:
        """Whether this runtime defines the profile of ``agent_id`` (it can carry it on)."""
        agent = self.world.tree.agents.get(agent_id)
        return agent is not None and agent.profile in self.world.runners

    def expire(self, tx: Transition) -> None:
        """Deny every pending request past its ``expires_at`` with reason ``timed out``
        (but those of agents whose profile this runtime lacks)."""
        now = time.time()
        for record in list(self.records.values()):
            expires = record.request.expires_at
            if (
                record.pending
                and expires is not None
                and expires <= now
                and self._runs_here(record.request.agent_id)
            ):
                self._settle(tx, record, "denied", None, TIMED_OUT)
                self._resume_if_answered(tx, record.request.agent_id, record.request.generation)

    def rearm(self, tx: Transition) -> None:
        """At start-up: arm the timeouts of pending requests and of the parked turns (what
        is left of their ``turn_timeout_s``); carry on answered parks."""
        now = time.time()
        for record in self.records.values():
            expires = record.request.expires_at
            if record.pending and expires is not None and self._runs_here(record.request.agent_id):
                self._arm(tx, expires - now)
        tree = self.world.tree
        for agent in [tree.agents[agent_id] for agent_id in tree.busy]:
            if agent.state is AgentState.AWAITING_APPROVAL:
                arm_deadline(self.world, tx, agent, from_start=True)
                self._resume_if_answered(tx, agent.id, agent.generation)

    # -- turns that end ------------------------------------------------------------------

    def release(self, tx: Transition, agent_id: str, why: TurnInterrupted) -> None:
        """The turn of ``agent_id`` ended: fail its park and cancel its pending requests."""
        parked = self.parked.pop(agent_id) if agent_id in self.parked else None
        if parked is not None and claim(self._journal, parked.future):
            tx.answer(parked.future, why)
        for request_id in self.by_agent.get(agent_id, ()):
            record = self.records[request_id]
            if record.pending:
                self._settle(tx, record, "cancelled", None, "cancelled: its turn ended")

    def detach(self, agent_id: str) -> None:
        """The runtime closes under a parked turn: the turn stops, its requests stay pending."""
        self.parked.pop(agent_id, None)

    def pending(self, below: AgentRecord | None) -> list[ApprovalRequest]:
        """Return the pending requests (of ``below``'s subtree, or all), oldest first."""
        return pending_requests(self.records, self.world.tree.agents, below)

    def prune(self, horizon: float) -> None:
        """Forget answered requests older than ``horizon`` and those of removed agents."""
        agents = self.world.tree.agents
        for request_id, record in list(self.records.items()):
            agent_id = record.request.agent_id
            old = not record.pending and (record.answered_at or 0.0) < horizon
            if agent_id in agents and not old:
                continue
            del self.records[request_id]
            kept = tuple(i for i in self.by_agent.get(agent_id, ()) if i != request_id)
            if kept:
                self.by_agent[agent_id] = kept
            else:
                self.by_agent.pop(agent_id, None)
            self.world.tree.writes.append(("approvals", request_id.encode(), None))


def _check_calls(calls: Any) -> tuple[tuple[str, str, str], ...]:
    """Return ``calls`` if it is a non-empty tuple of (call id, tool, arguments) strings.

    Raises:
        ArgumentTypeError: it is not.
    """
    if not isinstance(calls, tuple | list) or not calls:
        raise ArgumentTypeError("AwaitApproval.calls must be a non-empty tuple of calls")
    for call in calls:
        if not (
            isinstance(call, tuple | list)
            and len(call) == 3
            and all(isinstance(part, str) for part in call)
        ):
            raise ArgumentTypeError(
                "AwaitApproval.calls holds (call id, tool, JSON arguments) string triples"
            )
    return tuple((c[0], c[1], c[2]) for c in calls)


def _check_in_doubt(pairs: Any) -> dict[str, str]:
    """Return ``AwaitApproval.in_doubt`` as call id -> idempotency key.

    Raises:
        ArgumentTypeError: it is not a tuple of (call id, key) string pairs.
    """
    if not isinstance(pairs, tuple | list) or not all(
        isinstance(pair, tuple | list)
        and len(pair) == 2
        and all(isinstance(part, str) for part in pair)
        for pair in pairs
    ):
        raise ArgumentTypeError("AwaitApproval.in_doubt holds (call id, key) string pairs")
    return {pair[0]: pair[1] for pair in pairs}
