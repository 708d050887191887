"""The supervisor: the one actor that owns the tree, enforces the rules and writes the store.

Every request arrives as a :class:`Call` in the supervisor actor's inbox and is
handled on its thread by :class:`Supervisor`, the logic core. A handler checks
the rules first (a refused call changes nothing), then mutates the in-memory
:class:`~retinue.actors.tree.Tree`, which gathers the matching writes. The
writes go to the store as one transition; the reply and every side effect
(starting a runner, answering a waiter, publishing events) run only once the
store says the transition is committed. Handlers never block.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import pykka

from retinue.actors.agent import AgentActor
from retinue.actors.compaction import CompactionReport, compact
from retinue.actors.events import EventBus
from retinue.actors.profile import Profile, Runner
from retinue.actors.tree import Tree
from retinue.actors.turn import Turn
from retinue.errors import (
    ActiveDescendants,
    AgentBusy,
    AgentClosed,
    AgentLimitExceeded,
    AgentStateError,
    ArgumentTypeError,
    CompletionBacklogFull,
    DedupKeyTooLong,
    DepthLimitExceeded,
    DuplicateAgentPath,
    FanoutLimitExceeded,
    MailboxFull,
    MessageTooLarge,
    NotPermitted,
    RetinueError,
    RuntimeClosed,
    StoreError,
    TurnInterrupted,
    UnknownAgent,
    UnknownProfile,
    WaitTimeout,
)
from retinue.persistence.store import Store
from retinue.protocol import paths
from retinue.protocol.limits import Limits
from retinue.protocol.messages import (
    AgentClosedEvent,
    AgentInfo,
    AgentSpawned,
    AgentState,
    Completion,
    CompletionRouted,
    CompletionStatus,
    Event,
    Message,
    MessageQueued,
    TurnQueued,
    TurnSettled,
    TurnStarted,
)
from retinue.protocol.records import AgentRecord, CompletionRecord, MessageRecord

__all__ = ["Call", "Supervisor", "SupervisorActor", "info_of"]

log = logging.getLogger("retinue.supervisor")
DEFERRED = object()
IDLE = (AgentState.COMPLETED, AgentState.FAILED, AgentState.INTERRUPTED)
BUSY = (AgentState.STARTING, AgentState.RUNNING)
Sender = tuple[str, int] | None  # (agent id, generation) of a turn; None is the host


@dataclass
class Call:
    """One request to the supervisor; ``reply`` is answered after the commit."""

    method: str
    args: tuple[Any, ...]
    reply: concurrent.futures.Future[Any]


@dataclass
class _TurnHandle:
    generation: int
    turn: Turn
    actor: pykka.ActorRef[Any] | None = None


@dataclass
class _SlotRequest:
    """A turn back from a wait, queued for a slot; ``take`` claims its event."""

    agent_id: str
    future: concurrent.futures.Future[Any]
    take: Callable[[], Any] | None


def info_of(record: AgentRecord) -> AgentInfo:
    """Return the public snapshot of a stored agent."""
    return AgentInfo(
        id=record.id,
        name=record.name,
        path=record.path,
        profile=record.profile,
        parent_path=record.parent_path,
        depth=record.depth,
        state=record.state,
        generation=record.generation,
        task=record.task,
        output=record.output,
        error=record.error,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


def _resolve(future: concurrent.futures.Future[Any], value: Any) -> None:
    if future.done():
        return
    try:
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)
    except concurrent.futures.InvalidStateError:
        pass


def _require_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


class Supervisor:
    """The logic core: rules, scheduling, routing. Runs only on the supervisor thread."""

    def __init__(
        self,
        *,
        store: Store,
        tree: Tree,
        profiles: Mapping[str, Profile],
        runners: Mapping[str, Runner],
        limits: Limits,
        bus: EventBus,
        caller: Callable[..., concurrent.futures.Future[Any]],
    ) -> None:
        """Wire the core to its store, tree, profiles and event bus."""
        self.store = store
        self.tree = tree
        self.profiles = profiles
        self.runners = runners
        self.limits = limits
        self.bus = bus
        self.caller = caller
        self.active: set[str] = set()
        self.queue: deque[str] = deque()
        self.pending_turn: dict[str, tuple[str, str]] = {}  # id -> (task, reason)
        self.turns: dict[str, _TurnHandle] = {}
        self.reacquire: deque[_SlotRequest] = deque()
        self.host_waiters: dict[str, list[concurrent.futures.Future[Any]]] = {}
        self.agent_waiters: dict[str, tuple[str, str, concurrent.futures.Future[Any]]] = {}
        self._effects: list[Callable[[], None]] = []
        self._events: list[Event] = []
        self._reply: concurrent.futures.Future[Any] | None = None
        self.closing = False
        self._drained: set[str] = set()
        self._held_wakes: set[str] = set()
        self.restoring = False  # while true, nothing is woken

    # -- dispatch -----------------------------------------------------------

    def handle(self, call: Call) -> None:
        """Run one call and submit its transition; answer once it is committed."""
        self._reply = call.reply
        self._effects, self._events = [], []
        result: Any
        try:
            result = getattr(self, "op_" + call.method)(*call.args)
            self._wake_drained()
        except RetinueError as exc:
            result = exc
        except Exception as exc:  # a bug must answer the caller, not kill the supervisor
            log.exception("supervisor call %s failed", call.method)
            result = exc
        effects, events = self._effects, self._events
        reply = call.reply
        bus = self.bus

        def on_commit(error: BaseException | None) -> None:
            if error is not None:
                _resolve(reply, StoreError(f"the store could not commit: {error}"))
                return
            for effect in effects:
                effect()
            if events:
                bus.publish(events)
            if result is not DEFERRED:
                _resolve(reply, result)

        self.store.submit(self.tree.take_writes(), on_commit)

    def _after(self, effect: Callable[[], None]) -> None:
        self._effects.append(effect)

    def _emit(self, event: Event) -> None:
        if self.bus.active:
            self._events.append(event)

    # -- lookups --------------------------------------------------------------

    def _sender(self, sender: Sender) -> AgentRecord | None:
        if sender is None:
            return None
        agent_id, generation = sender
        record = self.tree.agents.get(agent_id)
        if (
            record is None
            or record.generation != generation
            or record.state is not AgentState.RUNNING
        ):
            raise TurnInterrupted("this turn was interrupted; its calls are refused")
        return record

    def _find(self, sender: AgentRecord | None, ref: Any) -> AgentRecord:
        ref = _require_str(ref, "an agent reference")
        record = self.tree.agents.get(ref)
        if record is not None:
            return record
        base = paths.ROOT if sender is None else sender.path
        path = paths.resolve(base, ref)
        agent_id = self.tree.live_paths.get(path)
        if agent_id is None:
            raise UnknownAgent(f"no live agent at {path}")
        return self.tree.agents[agent_id]

    def _is_descendant(self, record: AgentRecord, ancestor_id: str) -> bool:
        parent_id = record.parent_id
        while parent_id is not None:
            if parent_id == ancestor_id:
                return True
            parent_id = self.tree.agents[parent_id].parent_id
        return False

    def _target(self, sender: AgentRecord | None, ref: Any, action: str) -> AgentRecord:
        record = self._find(sender, ref)
        if sender is not None and not self._is_descendant(record, sender.id):
            raise NotPermitted(f"{sender.path} may only {action} agents in its own subtree")
        return record

    def _update(self, record: AgentRecord, **changes: Any) -> AgentRecord:
        changes.setdefault("updated_at", time.time())
        return self.tree.put_agent(msgspec.structs.replace(record, **changes))

    # -- spawning ---------------------------------------------------------------

    def _check_spawn(
        self, parent: AgentRecord | None, profile: Any, task: Any, name: Any, reserved: set[str]
    ) -> tuple[str, str, str]:
        profile = _require_str(profile, "profile")
        _require_str(task, "task")
        if profile not in self.profiles:
            raise UnknownProfile(f"unknown profile {profile!r}; known: {sorted(self.profiles)}")
        if parent is not None:
            if parent.state is AgentState.CLOSED:
                raise AgentClosed(f"{parent.path} is closed")
            allowed = self.profiles[parent.profile].subagents
            if profile not in allowed:
                raise NotPermitted(
                    f"profile {parent.profile!r} may not spawn {profile!r}; "
                    f"it may spawn: {sorted(allowed)}"
                )
        self._check_size(task, "task")
        agent_id = uuid.uuid4().hex
        if name is None:
            name = paths.derive_name(agent_id)
        name = paths.validate_name(_require_str(name, "name"))
        parent_path = paths.ROOT if parent is None else parent.path
        path = paths.join(parent_path, name)
        depth = paths.depth(path)
        cap = self.limits.depth_cap
        if depth > cap:
            raise DepthLimitExceeded(f"{path} would be at depth {depth}; depth_cap is {cap}")
        if path in self.tree.live_paths or path in reserved:
            raise DuplicateAgentPath(f"a live agent already holds {path}")
        parent_id = None if parent is None else parent.id
        live = len(self.tree.live_children(parent_id)) + len(reserved)
        if parent is not None and live >= self.limits.fanout_cap:
            raise FanoutLimitExceeded(
                f"{parent_path} already has {live} live children; "
                f"fanout_cap is {self.limits.fanout_cap}"
            )
        if self.tree.live_count + len(reserved) >= self.limits.max_agents:
            raise AgentLimitExceeded(
                f"the runtime already has {self.tree.live_count} live agents; "
                f"max_agents is {self.limits.max_agents}"
            )
        if parent is not None:
            top = self.tree.top_of[parent.id]
            in_tree = self.tree.tree_count.get(top, 0) + len(reserved)
            if in_tree >= self.limits.max_tree_agents:
                raise AgentLimitExceeded(
                    f"the tree of {self.tree.agents[top].path} already has {in_tree} live "
                    f"agents; max_tree_agents is {self.limits.max_tree_agents}"
                )
        return agent_id, name, path

    def _spawn(
        self,
        parent: AgentRecord | None,
        profile: str,
        task: str,
        name: str | None,
        reserved: set[str],
    ) -> AgentInfo:
        agent_id, name, path = self._check_spawn(parent, profile, task, name, reserved)
        now = time.time()
        record = AgentRecord(
            id=agent_id,
            name=name,
            path=path,
            profile=profile,
            parent_id=None if parent is None else parent.id,
            parent_path=paths.ROOT if parent is None else parent.path,
            depth=paths.depth(path),
            state=AgentState.STARTING,
            generation=0,
            task=task,
            created_at=now,
            updated_at=now,
        )
        self.tree.put_agent(record)
        self._emit(
            AgentSpawned(
                agent_id=agent_id,
                path=path,
                at=now,
                profile=profile,
                parent_path=record.parent_path,
            )
        )
        return info_of(self._queue_turn(record, task, "spawn"))

    def op_spawn(
        self, sender: Sender, profile: Any, task: Any, name: Any, parent_ref: Any
    ) -> AgentInfo:
        """Record a new agent and queue its first turn."""
        me = self._sender(sender)
        parent = me
        if me is None and parent_ref not in (None, paths.ROOT):
            parent = self._find(None, parent_ref)
        return self._spawn(parent, profile, task, name, set())

    def op_spawn_many(
        self, sender: Sender, requests: list[tuple[Any, Any, Any]]
    ) -> list[AgentInfo | RetinueError]:
        """Spawn a batch of children of the sender in one transition."""
        me = self._sender(sender)
        if len(requests) > self.limits.fanout_cap:
            raise FanoutLimitExceeded(
                f"a batch of {len(requests)} exceeds fanout_cap {self.limits.fanout_cap}"
            )
        results: list[AgentInfo | RetinueError] = []
        for profile, task, name in requests:
            try:
                results.append(self._spawn(me, profile, task, name, set()))
            except RetinueError as exc:
                results.append(exc)
        return results

    # -- turns --------------------------------------------------------------------

    def _queue_turn(self, record: AgentRecord, task: str, reason: str) -> AgentRecord:
        record = self._update(
            record,
            state=AgentState.STARTING,
            generation=record.generation + 1,
            task=task,
            output=None,
            error=None,
        )
        self.pending_turn[record.id] = (task, reason)
        self.queue.append(record.id)
        self._emit(
            TurnQueued(
                agent_id=record.id,
                path=record.path,
                at=record.updated_at,
                generation=record.generation,
            )
        )
        self._pump()
        return self.tree.agents[record.id]

    def _pump(self) -> None:
        cap = self.limits.max_active_turns
        while len(self.active) < cap and not self.closing:
            if self.reacquire:
                self._grant(self.reacquire.popleft())
            elif self.queue:
                agent_id = self.queue.popleft()
                if agent_id in self.pending_turn:
                    self._start_turn(agent_id)
            else:
                return

    def _start_turn(self, agent_id: str) -> None:
        task, reason = self.pending_turn.pop(agent_id)
        tree = self.tree
        record = self._update(tree.agents[agent_id], state=AgentState.RUNNING)
        now = record.updated_at
        inbox: list[tuple[int, Message]] = []
        for message in tree.unread(agent_id):
            tree.mark_read(message, now)
            inbox.append((message.seq, message.message))
        for pending in tree.pending_for(agent_id):
            self._deliver(pending)
            inbox.append((pending.seq, self._completion_message(pending, record)))
        inbox.sort(key=lambda item: item[0])
        profile = self.profiles[record.profile]
        turn = Turn(
            caller=self.caller,
            agent=info_of(record),
            task=task,
            messages=[m for _, m in inbox],
            reason=reason,
            instructions=profile.instructions,
            limits=self.limits,
        )
        handle = _TurnHandle(generation=record.generation, turn=turn)
        self.turns[agent_id] = handle
        self.active.add(agent_id)
        self._emit(
            TurnStarted(agent_id=agent_id, path=record.path, at=now, generation=record.generation)
        )
        settle = self._settle_teller()
        try:
            handle.actor = AgentActor.start(
                self.runners[record.profile], settle, self.limits.output_max_bytes
            )
        except Exception as exc:  # thread ceiling: the turn fails, the runtime goes on
            self._finish_turn(record, None, f"{type(exc).__name__}: cannot start actor: {exc}")
            return
        actor = handle.actor
        self._after(lambda: actor.tell(turn))

    def _settle_teller(self) -> Callable[[str, int, str | None, str | None], None]:
        caller = self.caller

        def settle(agent_id: str, generation: int, output: str | None, error: str | None) -> None:
            # RetinueError: the runtime closed meanwhile and interrupted the turn.
            with contextlib.suppress(RetinueError):
                caller("settle", agent_id, generation, output, error)

        return settle

    def _completion_message(self, pending: CompletionRecord, recipient: AgentRecord) -> Message:
        completion = pending.completion
        return Message(
            id=completion.id,
            kind="completion",
            sender=completion.path,
            sender_id=completion.agent_id,
            recipient=recipient.path,
            recipient_id=recipient.id,
            content=completion.output if completion.output is not None else completion.error or "",
            created_at=completion.created_at,
            completion=completion,
        )

    def op_settle(
        self, agent_id: str, generation: int, output: str | None, error: str | None
    ) -> None:
        """A runner finished; settle its turn unless it was interrupted meanwhile."""
        handle = self.turns.get(agent_id)
        record = self.tree.agents.get(agent_id)
        if (
            handle is None
            or record is None
            or handle.generation != generation
            or record.state is not AgentState.RUNNING
        ):
            return  # a late result of an interrupted turn: discarded
        self._finish_turn(record, output, error)

    def _finish_turn(self, record: AgentRecord, output: str | None, error: str | None) -> None:
        self._release(record.id, TurnInterrupted("the turn ended"))
        status = CompletionStatus.COMPLETED if error is None else CompletionStatus.FAILED
        state = AgentState.COMPLETED if error is None else AgentState.FAILED
        record = self._update(record, state=state, output=output, error=error)
        self._emit_completion(record, status)
        self._pump()
        self._maybe_wake(record.id)

    def _release(self, agent_id: str, why: RetinueError) -> None:
        """Drop a turn's slot, handle, waiter and queued slot request."""
        self.turns.pop(agent_id, None)
        self.active.discard(agent_id)
        waiter = self.agent_waiters.pop(agent_id, None)
        if waiter is not None and waiter[2].set_running_or_notify_cancel():
            waiter[2].set_exception(why)
        if any(r.agent_id == agent_id for r in self.reacquire):
            for request in self.reacquire:
                if request.agent_id == agent_id:
                    _resolve(request.future, why)  # its event stays pending
            self.reacquire = deque(r for r in self.reacquire if r.agent_id != agent_id)

    def _maybe_wake(self, agent_id: str) -> None:
        """Give an idle agent with pending completions its wake turn.

        A wake refused only because the agent's own completions fill its
        backlog is remembered and retried once the backlog drains.
        """
        record = self.tree.agents[agent_id]
        if (
            record.state not in (AgentState.COMPLETED, AgentState.FAILED)
            or not self.tree.pending_for(agent_id)
            or not getattr(self.profiles.get(record.profile), "wake_on_completion", False)
            or self.closing
            or self.restoring
        ):
            return
        if self.tree.undelivered.get(agent_id, 0) >= self.limits.pending_completions_per_agent:
            self._held_wakes.add(agent_id)
            return
        self._held_wakes.discard(agent_id)
        self._queue_turn(record, record.task, "wake")

    # -- completions ----------------------------------------------------------------

    def _emit_completion(self, record: AgentRecord, status: CompletionStatus) -> None:
        tree = self.tree
        if record.generation in tree.completions.get(record.id, {}):
            return  # exactly one completion per turn
        now = time.time()
        completion = Completion(
            id=f"{record.id}:{record.generation}",
            agent_id=record.id,
            path=record.path,
            generation=record.generation,
            status=status,
            output=record.output,
            error=record.error,
            created_at=now,
        )
        recipient = tree.nearest_live_ancestor(record)
        pending = CompletionRecord(
            completion=completion, recipient_id=recipient, seq=tree.next_seq()
        )
        tree.add_completion(pending)
        recipient_path = paths.ROOT if recipient is None else tree.agents[recipient].path
        self._emit(
            TurnSettled(
                agent_id=record.id,
                path=record.path,
                at=now,
                generation=record.generation,
                status=status,
            )
        )
        self._emit(
            CompletionRouted(
                agent_id=record.id,
                path=record.path,
                at=now,
                completion_id=completion.id,
                recipient=recipient_path,
            )
        )
        self._serve_host_waiters(record.id)
        if recipient is not None:
            self._offer(recipient, pending)

    def _offer(self, recipient_id: str, pending: CompletionRecord) -> None:
        """Hand a routed completion to a waiting turn, or wake an idle recipient."""
        waiter = self.agent_waiters.get(recipient_id)
        if waiter is not None and waiter[0] == pending.completion.agent_id:
            recipient = self.tree.agents[recipient_id]
            self._deliver_to_waiter(recipient_id, lambda: self._take_completion(pending, recipient))
            return
        self._maybe_wake(recipient_id)

    def _take_completion(self, pending: CompletionRecord, recipient: AgentRecord) -> Completion:
        self._deliver(pending)
        return pending.completion

    def _reroute(self, pending: CompletionRecord, heir: str | None) -> CompletionRecord:
        """Move a pending completion to a new recipient and publish it."""
        moved = self.tree.reroute(pending, heir)
        completion = moved.completion
        self._emit(
            CompletionRouted(
                agent_id=completion.agent_id,
                path=completion.path,
                at=time.time(),
                completion_id=completion.id,
                recipient=paths.ROOT if heir is None else self.tree.agents[heir].path,
            )
        )
        return moved

    def _deliver(self, pending: CompletionRecord) -> CompletionRecord:
        """Mark a completion received; its agent's backlog shrank, so it may wake."""
        self._drained.add(pending.completion.agent_id)
        return self.tree.mark_delivered(pending)

    def _wake_drained(self) -> None:
        """Wake agents held back by a full backlog once their completions are received."""
        while self._drained:
            agent_id = self._drained.pop()
            if agent_id in self._held_wakes:
                self._maybe_wake(agent_id)

    def _serve_host_waiters(self, agent_id: str) -> None:
        waiters = self.host_waiters.get(agent_id)
        tree = self.tree
        while waiters:
            record = tree.agents[agent_id]
            done = tree.completions.get(agent_id, {})
            later = [g for g in done if g > record.host_received]
            if not later:
                break
            future = waiters.pop(0)
            if not future.set_running_or_notify_cancel():
                continue
            pending = done[min(later)]
            if not pending.delivered and pending.recipient_id is None:
                pending = self._deliver(pending)
            self._update(
                record, host_received=pending.completion.generation, updated_at=record.updated_at
            )
            completion = pending.completion
            self._after(lambda f=future, c=completion: f.set_result(c))  # type: ignore[misc]
        if not waiters:
            self.host_waiters.pop(agent_id, None)
            return
        if tree.agents[agent_id].state is AgentState.CLOSED:
            for future in self.host_waiters.pop(agent_id):
                if future.set_running_or_notify_cancel():
                    future.set_exception(AgentClosed(f"{tree.agents[agent_id].path} is closed"))

    def op_host_wait(self, ref: Any) -> object:
        """Register a host wait for the agent's oldest completion the host has not received."""
        record = self._find(None, ref)
        assert self._reply is not None
        self.host_waiters.setdefault(record.id, []).append(self._reply)
        self._serve_host_waiters(record.id)
        return DEFERRED

    def op_give_up_host_wait(self, future: concurrent.futures.Future[Any], seconds: float) -> None:
        """A host wait ran out of time: end it with ``WaitTimeout`` unless it was answered."""
        for agent_id, waiters in list(self.host_waiters.items()):
            if future in waiters:
                waiters.remove(future)
                if not waiters:
                    del self.host_waiters[agent_id]
                if future.set_running_or_notify_cancel():
                    path = self.tree.agents[agent_id].path
                    future.set_exception(
                        WaitTimeout(f"{path} did not settle within {seconds:g}s; it keeps running")
                    )
                return

    def op_agent_wait(self, sender: Sender, ref: Any, kind: str) -> object:
        """Answer a turn's wait with the next event from its child, or register it."""
        me = self._sender(sender)
        assert me is not None and self._reply is not None
        child = self._find(me, ref)
        if child.parent_id != me.id:
            raise NotPermitted(f"{me.path} may only wait on its own children, not {child.path}")
        take = self._next_event(me, child, kind)
        future = self._reply
        if take is not None:
            self._claim(future, take)
            return DEFERRED
        if child.state is AgentState.CLOSED:
            raise AgentClosed(f"{child.path} is closed")
        self.agent_waiters[me.id] = (child.id, kind, future)
        self.active.discard(me.id)  # a waiting turn gives its slot to others
        self._pump()
        return DEFERRED

    def _next_event(
        self, me: AgentRecord, child: AgentRecord, kind: str
    ) -> Callable[[], Any] | None:
        tree = self.tree
        best: tuple[int, Callable[[], Any]] | None = None
        for pending in tree.pending_for(me.id):
            if pending.completion.agent_id == child.id:
                best = (pending.seq, lambda p=pending: self._take_completion(p, me))
                break
        if kind == "any":
            for message in tree.unread(me.id):
                if message.message.sender_id == child.id:
                    if best is None or message.seq < best[0]:
                        best = (message.seq, lambda m=message: self._take_message(m))
                    break
        return None if best is None else best[1]

    def _take_message(self, record: MessageRecord) -> Message:
        self.tree.mark_read(record, time.time())
        return record.message

    def _claim(self, future: concurrent.futures.Future[Any], take: Callable[[], Any]) -> bool:
        if not future.set_running_or_notify_cancel():
            return False
        value = take()
        self._after(lambda: future.set_result(value))
        return True

    def _deliver_to_waiter(self, waiter_id: str, take: Callable[[], Any]) -> None:
        """Answer a blocked wait; the turn runs on once it has a slot again.

        The event is taken (marked read or delivered) only when the slot is
        granted, so an interrupt in between leaves it for the next turn.
        """
        _, _, future = self.agent_waiters.pop(waiter_id)
        if not future.set_running_or_notify_cancel():
            return
        self._request_slot(_SlotRequest(waiter_id, future, take))

    def _request_slot(self, request: _SlotRequest) -> None:
        if len(self.active) < self.limits.max_active_turns:
            self._grant(request)
        else:
            self.reacquire.append(request)

    def _grant(self, request: _SlotRequest) -> None:
        self.active.add(request.agent_id)
        value = None if request.take is None else request.take()
        future = request.future
        self._after(lambda: _resolve(future, value))

    def op_give_up_wait(
        self, sender: Sender, future: concurrent.futures.Future[Any], seconds: float
    ) -> None:
        """A turn's wait ran out of time: end it with ``WaitTimeout`` once it has a slot.

        If an event was already taken for it, the wait keeps that event instead.
        """
        me = self._sender(sender)
        assert me is not None
        waiter = self.agent_waiters.get(me.id)
        if waiter is None or waiter[2] is not future:
            return  # answered already (or failed by an interrupt)
        del self.agent_waiters[me.id]
        if not future.set_running_or_notify_cancel():
            return
        child = self.tree.agents[waiter[0]]
        timeout = WaitTimeout(f"no event from {child.path} within {seconds:g}s; it keeps running")
        self._request_slot(_SlotRequest(me.id, future, lambda: timeout))

    # -- mailboxes ------------------------------------------------------------------

    def _check_size(self, content: str, what: str) -> None:
        size = len(content.encode("utf-8", "surrogatepass"))
        if size > self.limits.message_max_bytes:
            raise MessageTooLarge(
                f"{what} is {size} bytes; message_max_bytes is {self.limits.message_max_bytes}"
            )

    def op_send(self, sender: Sender, ref: Any, content: Any, dedup_key: Any) -> Message:
        """Queue a message in the recipient's durable mailbox."""
        me = self._sender(sender)
        content = _require_str(content, "content")
        target = self._find(me, ref)
        if me is not None:
            related = (
                target.id == me.parent_id
                or target.parent_id == me.id
                or (target.parent_id == me.parent_id and target.id != me.id)
            )
            if not related:
                raise NotPermitted(
                    f"{me.path} may message only its parent, children and siblings, "
                    f"not {target.path}"
                )
        if target.state is AgentState.CLOSED:
            raise AgentClosed(f"{target.path} is closed")
        self._check_size(content, "the message")
        sender_id = "" if me is None else me.id
        if dedup_key is not None:
            dedup_key = _require_str(dedup_key, "dedup_key")
            cap = self.limits.dedup_key_max_length
            if len(dedup_key) > cap:
                raise DedupKeyTooLong(f"dedup_key has {len(dedup_key)} characters; max is {cap}")
            original = self.tree.dedup.get((sender_id, dedup_key))
            if original is not None:
                return original
        unread = len(self.tree.mailbox.get(target.id, {}))
        if unread >= self.limits.mailbox_capacity:
            raise MailboxFull(
                f"{target.path} has {unread} unread messages; "
                f"mailbox_capacity is {self.limits.mailbox_capacity}"
            )
        now = time.time()
        seq = self.tree.next_seq()
        message = Message(
            id=f"{target.id}:{seq}",
            kind="message",
            sender=paths.ROOT if me is None else me.path,
            sender_id=sender_id,
            recipient=target.path,
            recipient_id=target.id,
            content=content,
            dedup_key=dedup_key,
            created_at=now,
        )
        record = MessageRecord(message=message, seq=seq)
        self.tree.add_message(record)
        self._emit(
            MessageQueued(
                agent_id=target.id,
                path=target.path,
                at=now,
                message_id=message.id,
                sender=message.sender,
            )
        )
        waiter = self.agent_waiters.get(target.id)
        if waiter is not None and waiter[0] == sender_id and waiter[1] == "any":
            self._deliver_to_waiter(target.id, lambda: self._take_message(record))
        return message

    # -- lifecycle ------------------------------------------------------------------

    def op_follow_up(self, sender: Sender, ref: Any, task: Any) -> AgentInfo:
        """Queue a follow-up turn for an idle agent."""
        me = self._sender(sender)
        record = self._target(me, ref, "follow up")
        task = _require_str(task, "task")
        self._check_size(task, "task")
        return info_of(self._follow_up(record, task, "follow_up"))

    def _follow_up(self, record: AgentRecord, task: str, reason: str) -> AgentRecord:
        if record.state is AgentState.CLOSED:
            raise AgentClosed(f"{record.path} is closed")
        if record.state in BUSY:
            raise AgentBusy(f"{record.path} is {record.state}; wait for it or interrupt it")
        if record.profile not in self.profiles:
            raise UnknownProfile(
                f"{record.path} has profile {record.profile!r}, which this runtime does not define"
            )
        backlog = self.tree.undelivered.get(record.id, 0)
        cap = self.limits.pending_completions_per_agent
        if backlog >= cap:
            raise CompletionBacklogFull(
                f"{record.path} has {backlog} completions nobody received yet "
                f"(pending_completions_per_agent is {cap}); wait for them first"
            )
        return self._queue_turn(record, task, reason)

    def op_resume(self, sender: Sender, ref: Any) -> AgentInfo:
        """Re-run an interrupted agent's task."""
        me = self._sender(sender)
        record = self._target(me, ref, "resume")
        if record.state is not AgentState.INTERRUPTED:
            if record.state is AgentState.CLOSED:
                raise AgentClosed(f"{record.path} is closed")
            raise AgentStateError(
                f"{record.path} is {record.state}; only an interrupted agent can be resumed"
            )
        return info_of(self._follow_up(record, record.task, "resume"))

    def _interrupt(self, record: AgentRecord) -> AgentRecord:
        if record.state is AgentState.STARTING:
            self.pending_turn.pop(record.id, None)
            if record.id in self.queue:
                self.queue.remove(record.id)
        elif record.state is AgentState.RUNNING:
            handle = self.turns.get(record.id)
            if handle is not None:
                handle.turn.cancelled.set()
            self._release(record.id, TurnInterrupted(f"{record.path} was interrupted"))
        else:
            return record
        record = self._update(record, state=AgentState.INTERRUPTED, output=None, error=None)
        self._emit_completion(record, CompletionStatus.INTERRUPTED)
        self._pump()
        return record

    def op_interrupt(self, sender: Sender, ref: Any) -> AgentInfo:
        """Cancel an agent's queued or running turn (an idle agent is left as it is)."""
        me = self._sender(sender)
        record = self._target(me, ref, "interrupt")
        if record.state is AgentState.CLOSED:
            raise AgentClosed(f"{record.path} is closed")
        return info_of(self._interrupt(record))

    def _close(self, record: AgentRecord) -> AgentRecord:
        tree = self.tree
        if record.state is AgentState.CLOSED:
            raise AgentClosed(f"{record.path} is already closed")
        live = tree.live_children(record.id)
        if live:
            raise ActiveDescendants(
                f"{record.path} has {len(live)} live children; close them first or use close_tree"
            )
        record = self._interrupt(record)
        now = time.time()
        record = self._update(record, state=AgentState.CLOSED, closed_at=now, updated_at=now)
        self._emit(AgentClosedEvent(agent_id=record.id, path=record.path, at=now))
        heir = tree.nearest_live_ancestor(record)
        for pending in tree.pending_for(record.id):
            moved = self._reroute(pending, heir)
            if heir is None:
                self._serve_host_waiters(moved.completion.agent_id)
            else:
                self._offer(heir, moved)
        self._serve_host_waiters(record.id)
        return record

    def op_close(self, sender: Sender, ref: Any) -> AgentInfo:
        """Close an agent without live children (interrupting its turn first)."""
        me = self._sender(sender)
        return info_of(self._close(self._target(me, ref, "close")))

    def op_close_tree(self, sender: Sender, ref: Any) -> list[AgentInfo]:
        """Close an agent's whole live subtree, children before parents."""
        me = self._sender(sender)
        record = self._target(me, ref, "close")
        if record.state is AgentState.CLOSED:
            raise AgentClosed(f"{record.path} is already closed")
        return [
            info_of(self._close(self.tree.agents[i]))
            for i in self.tree.descendants_postorder(record.id)
        ]

    # -- reads ------------------------------------------------------------------------

    def op_get(self, sender: Sender, ref: Any) -> AgentInfo:
        """Return one agent."""
        return info_of(self._find(self._sender(sender), ref))

    def op_agents(self, include_closed: bool) -> list[AgentInfo]:
        """Return every agent (live ones unless ``include_closed``), oldest first."""
        records = self.tree.agents.values()
        return [
            info_of(r)
            for r in sorted(records, key=lambda r: r.created_at)
            if include_closed or r.state is not AgentState.CLOSED
        ]

    def op_children(self, sender: Sender) -> list[AgentInfo]:
        """Return the sender's live children."""
        me = self._sender(sender)
        assert me is not None
        kids = [self.tree.agents[i] for i in self.tree.live_children(me.id)]
        return [info_of(r) for r in sorted(kids, key=lambda r: r.created_at)]

    def op_barrier(self) -> None:
        """Answer once everything before it is committed."""

    def op_compact(self) -> CompactionReport:
        """Remove what retention no longer keeps, as one transition."""
        return compact(self.tree, self.limits, time.time())

    # -- start and stop ------------------------------------------------------------------

    def recover(self) -> list[AgentRecord]:
        """Turn agents that were queued or running at the crash into ``interrupted``.

        Each gets its ``interrupted`` completion (unless the store already had
        it), and pending completions whose recipient is gone are rerouted.
        Returns the agents it interrupted.
        """
        tree = self.tree
        interrupted: list[AgentRecord] = []
        self.restoring = True
        for record in list(tree.agents.values()):
            if record.state in BUSY:
                record = self._update(record, state=AgentState.INTERRUPTED, output=None, error=None)
                self._emit_completion(record, CompletionStatus.INTERRUPTED)
                interrupted.append(record)
        for key in list(tree.pending):
            if key and not tree.is_live(key):
                for pending in tree.pending_for(key):
                    # The recipient is closed or was not restored: its heir takes it.
                    origin = tree.agents.get(key) or tree.agents[pending.completion.agent_id]
                    self._reroute(pending, tree.nearest_live_ancestor(origin))
        self.restoring = False
        return interrupted

    def op_shutdown(self) -> list[pykka.ActorRef[Any]]:
        """Interrupt every queued and running turn; return the actors still running."""
        actors = [h.actor for h in self.turns.values() if h.actor is not None]
        for agent_id in list(self.queue) + list(self.turns):
            record = self.tree.agents[agent_id]
            if record.state in BUSY:
                self._interrupt(record)
        self.closing = True
        for waiters in self.host_waiters.values():
            for future in waiters:
                if future.set_running_or_notify_cancel():
                    future.set_exception(RuntimeClosed("the runtime closed during the wait"))
        self.host_waiters.clear()
        return actors


class SupervisorActor(pykka.ThreadingActor):
    """The pykka shell around :class:`Supervisor`: one call at a time, in arrival order."""

    use_daemon_thread = True

    def __init__(self) -> None:
        """Create the shell; :meth:`attach` gives it its core before any call."""
        super().__init__()
        self.core: Supervisor | None = None

    def on_receive(self, message: Any) -> Any:
        """Handle a :class:`Call` or an ``("attach", core)`` message."""
        if isinstance(message, Call):
            assert self.core is not None
            self.core.handle(message)
        elif isinstance(message, tuple) and message[0] == "attach":
            self.core = message[1]
        return None
