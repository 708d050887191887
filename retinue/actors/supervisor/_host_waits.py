"""Host waits: the host blocked in ``wait`` on an agent, or in ``messages`` on its inbox.

A host wait receives the agent's oldest completion the host has not
received; the receipt is a mark on the agent's record (plus the generations
given back), so a reopened runtime hands out exactly what the host has not
received. A wait nothing can answer ends at once with ``NothingToWaitFor``.

A host wait may carry a *lease*: the transition that marks the completion
received also stores ``lease -> completion``, so a host that lost the answer
(a dropped reply, a crash) can wait again with the same lease and get the same
completion. The host acknowledges the lease once it has the completion
(:meth:`HostWaits.ack_lease`), or releases it (:meth:`HostWaits.release_lease`),
which gives the completion back like a cancelled ``wait_async``.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from retinue.actors import JDict, JList, Journaled, claim
from retinue.actors.calls import timed_out
from retinue.actors.commands import GiveUpWait, Wait
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World
from retinue.actors.tree import HOST_KEY
from retinue.errors import (
    AgentClosed,
    DedupKeyTooLong,
    InvalidArgument,
    NothingToWaitFor,
    RetinueError,
    UnknownAgent,
    WaitTimeout,
)
from retinue.persistence.placed import BUSY_STATES
from retinue.protocol.checks import check_key
from retinue.protocol.messages import AgentState, Completion, Message
from retinue.protocol.records import AgentRecord

__all__ = [
    "HostWaiter",
    "HostWaits",
    "host_give_back",
    "host_next",
    "host_take",
    "host_waiter",
]

_get = dict.get  # a journaled dict's own get, in C
_pop = dict.pop


def host_next(record: AgentRecord, generations: Iterable[int]) -> int | None:
    """Return the generation a host wait on ``record`` receives next (None: nothing new).

    That is the oldest of the generations the host gave back and those above
    its receipt mark; ``generations`` are the agent's known completions.
    """
    returned = record.host_returned
    fresh = [g for g in generations if g > record.host_received or g in returned]
    return min(fresh) if fresh else None


def host_take(record: AgentRecord, generation: int) -> dict[str, Any]:
    """Return the record changes that mark ``generation`` received by the host."""
    if generation in record.host_returned:
        return {"host_returned": tuple(g for g in record.host_returned if g != generation)}
    return {"host_received": max(record.host_received, generation)}


def host_give_back(record: AgentRecord, generation: int) -> dict[str, Any] | None:
    """Return the record changes that give a received ``generation`` back (None: not received).

    The receipt mark drops while its top generation is given back, so the
    returned list only holds generations below the mark.
    """
    if generation > record.host_received or generation in record.host_returned:
        return None
    returned = set(record.host_returned) | {generation}
    mark = record.host_received
    while mark in returned:
        returned.discard(mark)
        mark -= 1
    return {"host_received": mark, "host_returned": tuple(sorted(returned))}


@dataclass(frozen=True, slots=True)
class HostWaiter:
    """A host blocked in ``wait`` on one agent; answered with a completion.

    ``lease``: the completion it takes is stored under this lease in the same
    transition.
    """

    future: concurrent.futures.Future[Any]
    lease: str | None = None


_WAITER: Any = HostWaiter
_set_future = _WAITER.future.__set__
_set_lease = _WAITER.lease.__set__
_new_waiter = object.__new__


def host_waiter(future: concurrent.futures.Future[Any], lease: str | None = None) -> HostWaiter:
    """Return ``HostWaiter(future, lease)``, built with its slots' own setters (a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``: four times
    the cost, once per ``run`` or ``wait``). The same waiter: equal, pictured alike by
    the journal."""
    waiter = _new_waiter(HostWaiter)
    _set_future(waiter, future)
    _set_lease(waiter, lease)
    return waiter


class HostWaits(Journaled):
    """Every blocked host wait, and how each one is answered."""

    def __init__(self, world: World) -> None:
        """Keep the host's waits on ``world``."""
        j = self._journal = world.journal
        self.world = world
        self.host: dict[str, list[HostWaiter]] = JDict(j)
        self.inbox: list[HostWaiter] = JList(j)  # host waits for messages to /root
        self.idle: list[HostWaiter] = JList(j)  # host waits for the runtime to go quiescent

    # -- waits on agents ----------------------------------------------------------------

    def host_wait(self, tx: Transition, command: Wait) -> Completion | None:
        """Register a host wait for the agent's oldest completion the host has not received.

        A wait whose ``lease`` is stored is answered at once with the
        completion stored under it (returned); otherwise the answer is deferred.

        Raises:
            InvalidArgument, DedupKeyTooLong: a bad lease (see :meth:`_leased`).
            UnknownAgent: no such agent.
            NothingToWaitFor: the agent is idle, the host received every
                completion it keeps and nothing may wake it: the wait could
                only run out its time.
        """
        lease = command.lease
        if lease is not None:
            held = self._leased(lease, command.ref, command.field, command.internal_lease)
            if held is not None:
                return held
        ref = command.ref
        # An agent held in memory named by its id (a spawn's answer), in C; else World.find.
        record = _get(self.world.tree.agents, ref) if type(ref) is str else None
        if record is None:
            record = self.world.find(None, ref, command.field)
        self._register(tx, record, lease)
        return None

    def wait_on(
        self, tx: Transition, agent_id: str, lease: str | None, internal: bool = False
    ) -> Completion | None:
        """Register a host wait on the agent ``agent_id`` (live: a ``Run`` just spawned it).

        As :meth:`host_wait` with the agent already found: a stored ``lease``
        answers at once (returned); otherwise the answer is deferred.
        ``internal``: the lease is the writer's own (see :meth:`_leased`).

        Raises:
            InvalidArgument, DedupKeyTooLong: a bad lease (see :meth:`_leased`).
            NothingToWaitFor: as :meth:`host_wait` (a retried run's agent is idle
                and the host received every completion it keeps).
        """
        if lease is not None:
            held = self._leased(lease, agent_id, "ref", internal)
            if held is not None:
                return held
        self._register(tx, self.world.tree.agents[agent_id], lease)
        return None

    def _register(self, tx: Transition, record: AgentRecord, lease: str | None) -> None:
        """Add a deferred host wait on ``record`` and serve it if a completion is there.

        Raises:
            NothingToWaitFor: see :meth:`nothing_to_wait_for`.
        """
        # A busy agent's current generation has no completion yet; one whose host received
        # every generation below it and gave none back has nothing to hand now (a run's
        # new agent): the wait only waits. (serve_host would find nothing and note the
        # wait for end_idle_host_waits, which leaves a busy agent's waits; neither a run
        # nor a wait makes the agent idle in the command that registers it.)
        maybe_new = not (
            record.state in BUSY_STATES  # (.busy is a property: a call)
            and record.host_received >= record.generation - 1
            and not record.host_returned
        )
        if maybe_new:
            idle = self.nothing_to_wait_for(record)
            if idle is not None:
                raise idle
        waiter = host_waiter(tx.defer(), lease)
        host = self.host
        waiters = _get(host, record.id)
        if waiters is None:  # its first wait (nearly always): a list made holding it, whose
            journal = self._journal  # one journal entry (JDict's set, inline) undoes both
            if journal.active:
                journal.log((dict.pop, (host, record.id, None)))
            dict.__setitem__(host, record.id, JList(journal, (waiter,)))
        else:
            waiters.append(waiter)
        if maybe_new:
            self.serve_host(tx, record.id)

    def _leased(
        self, lease: str, ref: str, field: str, internal: bool = False
    ) -> Completion | None:
        """Return the completion stored under ``lease`` (a retried wait on ``ref``), or None.

        ``dedup_key_max_length`` bounds a caller's lease, not one the writer made
        for a wait of its own (``internal``: the control socket's, which no
        caller can send; see ``Wait.internal_lease``).

        Raises:
            ArgumentTypeError, InvalidArgument: not a usable lease id, one held
                by a wait still blocked, or one stored for another agent.
            DedupKeyTooLong: a caller's lease id is longer than ``dedup_key_max_length``.
        """
        check_key(lease, "lease")
        cap = self.world.limits.dedup_key_max_length
        if len(lease) > cap and not internal:
            raise DedupKeyTooLong(
                f"lease is {len(lease)} characters; dedup_key_max_length is {cap}",
                limit=cap,
                value=len(lease),
            )
        held = self.world.tree.leases.get(lease)
        if held is None:
            if any(w.lease == lease for ws in self.host.values() for w in ws):
                raise InvalidArgument(
                    f"lease {lease[:60]!r} is held by a host wait still blocked; "
                    "give every wait its own lease"
                )
            return None
        if ref not in (held.agent_id, held.path):
            try:
                record = self.world.find(None, ref, field)
            except UnknownAgent:
                record = None
            if record is not None and record.id != held.agent_id:
                raise InvalidArgument(
                    f"lease {lease[:60]!r} holds a completion of {held.path}, "
                    f"not of {record.path}; give every wait its own lease"
                )
        return held

    def next_for_host(self, record: AgentRecord) -> int | None:
        """Return the generation a host wait on ``record`` receives next (None: nothing new).

        :func:`host_next` over the agent's known completions, without asking for them
        (a store read, after a reopen) when the receipt mark settles it: the host
        received every generation below the current one and gave none back, so only
        the current one can be new, and memory holds it if this run made it (a busy
        agent's current generation has none yet). Memory lacking it asks the store.

        Raises:
            StoreCorrupted, StoreError: the store read failed.
        """
        generation = record.generation
        if record.host_received == generation - 1 and not record.host_returned:
            mine = _get(self.world.tree.completions, record.id)
            if mine is not None and generation in mine:
                return generation
            if record.state.busy:
                return None
        return host_next(record, self.world.tree.known(record.id))

    def nothing_to_wait_for(self, record: AgentRecord) -> NothingToWaitFor | None:
        """Return the error for a host wait on ``record`` that nothing can answer, or None.

        Nothing can when the agent is neither queued nor running (nor closed,
        which ends waits with ``AgentClosed``), the host received every
        completion it keeps, and nothing may wake it (:meth:`_may_be_woken`).
        """
        if record.state.busy or record.state is AgentState.CLOSED:
            return None
        if self.next_for_host(record) is not None:
            return None
        if self._may_be_woken(record):
            return None
        return NothingToWaitFor(
            f"{record.path} is {record.state}: no turn is queued or running and the host "
            f"has received every completion it keeps (its last turn is {record.generation}), "
            "so nothing will come; give it a new turn (follow_up, resume) before waiting",
            path=record.path,
        )

    def _may_be_woken(self, record: AgentRecord) -> bool:
        """Return whether an idle agent may still get a turn nobody asked for.

        It may if it wakes on completions, its last turn ended on its own (an
        interrupted agent is never woken), and a wake is held back by its full
        backlog (it comes once the backlog drains) or a live descendant has a
        turn queued or running, whose completion may reach it. A completion
        merely pending does not wake it: a crash's recovery wakes nobody.
        """
        world = self.world
        if not record.state.idle_after_work or not getattr(
            world.profiles.get(record.profile), "wake_on_completion", False
        ):
            return False
        tree = world.tree
        held = tree.undelivered.get(record.id, 0) >= world.limits.pending_completions_per_agent
        if held and tree.pending_for(record.id):
            return True
        stack = list(tree.live_children(record.id))
        while stack:
            child = tree.agents[stack.pop()]
            if child.state.busy:
                return True
            stack.extend(tree.live_children(child.id))
        return False

    def end_idle_host_waits(self, tx: Transition) -> None:
        """End host waits left on agents that went idle with nothing left for the host.

        Run once a command is done (a wake it queued counts as work to come).
        """
        tree = self.world.tree
        idle = tx.idle_hosts
        if not isinstance(idle, set):  # none noted (Transition.idle_host makes the set)
            return
        while idle:
            agent_id = idle.pop()
            record = tree.agents.get(agent_id)
            if record is None or not self.host.get(agent_id):
                continue
            error = self.nothing_to_wait_for(record)
            if error is None:
                continue
            for waiter in self.host.pop(agent_id):
                future = waiter.future
                if claim(self._journal, future):
                    tx.answer(future, error)

    def take_now(self, record: AgentRecord) -> HostWaiter | None:
        """Claim the host wait that receives ``record``'s current generation, whose
        completion the caller makes in this transition (None: no wait takes it now).

        A wait takes it when it is the oldest the host has not received (none
        older is fresh). The caller marks it received in the record's own write
        (:func:`host_take`), stores it under the waiter's lease and answers the
        waiter (:meth:`hand`): what :meth:`serve_host` would do once the
        completion is made, with one record write and, for a completion routed
        to the host, one completion write (delivered as it is stored).
        """
        host = self.host
        waiters = _get(host, record.id)
        if not waiters:
            return None
        generation = record.generation
        received, returned = record.host_received, record.host_returned
        if generation <= received or generation in returned:
            return None
        # The host received every generation below this one and gave none back (a
        # run's, or a waited agent's, every turn): no older completion is new, and
        # this one has none yet (the caller makes it). Else an older one may be.
        if (received < generation - 1 or returned) and host_next(
            record, self.world.tree.known(record.id)
        ) is not None:
            return None  # an older completion goes first (serve_host hands it)
        journal = self._journal
        if len(waiters) == 1:  # the one wait (nearly always): its list goes with it
            if journal.active:  # JDict.pop's entry, inline (host is an unordered JDict)
                journal.log((dict.__setitem__, (host, record.id, waiters)))
            _pop(host, record.id)  # dict.__delitem__'s work (a method: no slot wrapper's tuple)
            waiter = waiters[0]
            return waiter if claim(journal, waiter.future) else None
        while waiters:
            waiter = waiters.pop(0)
            if claim(journal, waiter.future):
                return waiter
        return None  # every wait was cancelled (serve_host drops the empty list)

    def hand(self, tx: Transition, waiter: HostWaiter, completion: Completion) -> None:
        """Answer ``waiter`` (claimed by :meth:`take_now`) with ``completion``, stored
        under its lease if it has one."""
        if waiter.lease is not None:
            self.world.tree.put_lease(waiter.lease, completion)
        tx.answer(waiter.future, completion)

    def serve_host(self, tx: Transition, agent_id: str) -> None:
        """Answer host waits on ``agent_id`` with completions they have not received.

        Waits left on a closed agent end with ``AgentClosed``.
        """
        waiters = self.host.get(agent_id)
        world = self.world
        tree = world.tree
        while waiters:
            record = tree.agents[agent_id]
            generation = self.next_for_host(record)
            if generation is None:
                break
            waiter = waiters.pop(0)
            future = waiter.future
            if not claim(self._journal, future):
                continue
            pending = tree.completion(agent_id, generation)
            assert pending is not None  # a generation next_for_host found
            if not pending.delivered and pending.recipient_id is None:
                pending = world.deliver(tx, pending)
            world.update(record, updated_at=record.updated_at, **host_take(record, generation))
            completion = pending.completion
            if waiter.lease is not None:
                tree.put_lease(waiter.lease, completion)
            tx.answer(future, completion)
        if not waiters:
            self.host.pop(agent_id, None)
            return
        tx.idle_host(agent_id)  # checked once the command is done (a wake may follow)
        if tree.agents[agent_id].state is AgentState.CLOSED:
            closed = AgentClosed(
                f"{tree.agents[agent_id].path} is closed", path=tree.agents[agent_id].path
            )
            for waiter in self.host.pop(agent_id):
                future = waiter.future
                if claim(self._journal, future):
                    tx.answer(future, closed)

    def give_back(self, tx: Transition, events: Iterable[Message | Completion]) -> None:
        """The host lost what it was handed (its wait was cancelled): take ``events`` back.

        A completion becomes the next one a host wait on its agent receives;
        messages are unread again in the host's inbox, in order.
        """
        messages = False
        for event in events:
            if isinstance(event, Completion):
                self._unreceive(tx, event.agent_id, event.generation)
            else:
                self.world.tree.unread_again(event)
                messages = True
        if messages:
            self.serve_inbox(tx)

    def _unreceive(self, tx: Transition, agent_id: str, generation: int) -> None:
        """Undo the host's receipt of one completion; serve a host wait on it."""
        tree = self.world.tree
        record = tree.agents.get(agent_id)
        done = tree.completion(agent_id, generation)
        back = None if record is None else host_give_back(record, generation)
        if record is None or done is None or back is None:
            return  # compacted, or not received: nothing to undo
        if done.delivered and done.recipient_id is None:
            tree.undeliver(done)
        self.world.update(record, updated_at=record.updated_at, **back)
        self.serve_host(tx, agent_id)

    # -- leases ------------------------------------------------------------------------

    def ack_lease(self, lease: Any) -> bool:
        """The host has the completion handed out under ``lease``: forget the lease.

        Returns whether the lease was stored.

        Raises:
            ArgumentTypeError, InvalidArgument: not a usable lease id.
        """
        return self.world.tree.drop_lease(check_key(lease, "lease")) is not None

    def release_lease(self, tx: Transition, lease: Any) -> bool:
        """The host never got what ``lease`` took: give the completion back, forget the lease.

        Returns whether the lease was stored.

        Raises:
            ArgumentTypeError, InvalidArgument: not a usable lease id.
        """
        completion = self.world.tree.drop_lease(check_key(lease, "lease"))
        if completion is None:
            return False
        self._unreceive(tx, completion.agent_id, completion.generation)
        return True

    def give_up_host(self, tx: Transition, command: GiveUpWait) -> None:
        """A host wait ran out of time: end it with ``WaitTimeout`` unless it was answered.

        An inbox wait (``rt.messages``) ends with no messages instead.
        """
        future, seconds = command.future, command.seconds
        for waiter in self.idle:
            if waiter.future is future:
                self.idle.remove(waiter)
                if claim(self._journal, future):
                    tx.answer(
                        future, WaitTimeout(f"the runtime did not go idle within {seconds:g} s")
                    )
                return
        for waiter in self.inbox:
            if waiter.future is future:
                self.inbox.remove(waiter)
                if claim(self._journal, future):
                    tx.answer(future, [])
                return
        for agent_id, waiters in list(self.host.items()):
            mine = [w for w in waiters if w.future is future]
            if mine:
                waiters.remove(mine[0])
                if not waiters:
                    del self.host[agent_id]
                if claim(self._journal, future):
                    record = self.world.tree.agents[agent_id]
                    tx.answer(
                        future, self.nothing_to_wait_for(record) or timed_out(record.path, seconds)
                    )
                return

    def drop_wait(
        self, tx: Transition, future: concurrent.futures.Future[Any], error: RetinueError
    ) -> None:
        """End the host wait answered on ``future`` (any kind) with ``error``, if it is blocked."""
        for waiters in (self.idle, self.inbox, *self.host.values()):
            for waiter in list(waiters):
                if waiter.future is future:
                    waiters.remove(waiter)
                    if claim(self._journal, future):
                        tx.answer(future, error)
        for agent_id in [a for a, waiters in self.host.items() if not waiters]:
            del self.host[agent_id]

    # -- quiescence -------------------------------------------------------------------

    def wait_idle(self, tx: Transition) -> None:
        """Register a host wait for quiescence (answered by :meth:`serve_idle`)."""
        self.idle.append(HostWaiter(tx.defer()))

    def serve_idle(self, tx: Transition, quiet: bool) -> None:
        """Answer every wait for quiescence once ``quiet`` says the runtime is."""
        if not quiet or not self.idle:
            return
        waiters, self.idle = self.idle, JList(self._journal)
        for waiter in waiters:
            if claim(self._journal, waiter.future):
                tx.answer(waiter.future, None)

    # -- the host's inbox ----------------------------------------------------------

    def host_messages(self, tx: Transition) -> None:
        """Answer with the host's unread messages, or wait for the first to arrive."""
        self.inbox.append(HostWaiter(tx.defer()))
        self.serve_inbox(tx)

    def serve_inbox(self, tx: Transition) -> None:
        """Hand every unread message of the host's inbox to the oldest inbox wait."""
        world = self.world
        unread = world.tree.unread(HOST_KEY)
        while unread and self.inbox:
            future = self.inbox.pop(0).future
            if not claim(self._journal, future):
                continue
            taken = [world.take_message(record) for record in unread]
            tx.answer(future, taken)
            return

    # -- every host wait ---------------------------------------------------------------

    def fail_hosts(self, tx: Transition, why: RetinueError) -> None:
        """End every host wait with ``why`` (the runtime closes)."""
        for waiter in [*self.inbox, *self.idle]:
            if claim(self._journal, waiter.future):
                tx.answer(waiter.future, why)
        self.inbox.clear()
        self.idle.clear()
        for waiters in self.host.values():
            for waiter in waiters:
                future = waiter.future
                if claim(self._journal, future):
                    tx.answer(future, why)
        self.host.clear()
