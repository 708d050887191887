"""The supervisor: the one actor that owns the tree, enforces the caps and runs the turns.

:class:`Supervisor` adds spawning (every cap checked at spawn time), turn
scheduling (at most ``max_active_turns`` at once, first come first served),
interrupts, closes, reads, restore and shutdown on top of
:class:`~retinue.actors.routing.Routing`; :class:`SupervisorActor` is its pykka
shell, handling one call at a time in arrival order.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import pykka

from retinue.actors.agent import AgentActor
from retinue.actors.commands import (
    Agents,
    Barrier,
    Children,
    Close,
    CloseTree,
    Command,
    Compact,
    Envelope,
    FollowUp,
    Get,
    GiveUpWait,
    Host,
    Interrupt,
    LlmLoad,
    LlmStep,
    Resume,
    Send,
    Settle,
    Shutdown,
    Spawn,
    SpawnMany,
    TurnRef,
    Unreceive,
    Wait,
)
from retinue.actors.compaction import CompactionReport, compact
from retinue.actors.core import (
    BUSY,
    TurnHandle,
    agent_list,
    info_of,
    require_str,
    resolve_future,
)
from retinue.actors.routing import Routing
from retinue.actors.turn import Turn
from retinue.errors import (
    ActiveDescendants,
    AgentBusy,
    AgentClosed,
    AgentLimitExceeded,
    AgentStateError,
    CompletionBacklogFull,
    DepthLimitExceeded,
    DuplicateAgentPath,
    FanoutLimitExceeded,
    NotPermitted,
    RetinueError,
    RuntimeClosed,
    ToolsNotPermitted,
    TurnInterrupted,
    UnknownProfile,
)
from retinue.protocol import paths
from retinue.protocol.messages import (
    AgentClosedEvent,
    AgentInfo,
    AgentSpawned,
    AgentState,
    CompletionStatus,
    Message,
    TurnQueued,
    TurnStarted,
    Usage,
)
from retinue.protocol.records import AgentRecord
from retinue.protocol.tools import ceiling_message, exceeds_ceiling

__all__ = ["Supervisor", "SupervisorActor", "info_of"]


class Supervisor(Routing):
    """Spawning, turns, lifecycle, reads, restore and shutdown."""

    def dispatch(self, command: Command[Any]) -> Any:
        """Serve one command; the result (or ``DEFERRED``) answers its caller.

        Raises:
            RetinueError: the command is refused (nothing changed).
        """
        match command:
            case Spawn():
                return self.op_spawn(command)
            case SpawnMany():
                return self.op_spawn_many(command)
            case Send():
                return self.op_send(command)
            case Wait(sender=Host()):
                return self.op_host_wait(command)
            case Wait():
                return self.op_agent_wait(command)
            case GiveUpWait(sender=Host()):
                return self.op_give_up_host_wait(command)
            case GiveUpWait():
                return self.op_give_up_wait(command)
            case Settle():
                return self.op_settle(command)
            case FollowUp():
                return self.op_follow_up(command)
            case Resume():
                return self.op_resume(command)
            case Interrupt():
                return self.op_interrupt(command)
            case Close():
                return self.op_close(command)
            case CloseTree():
                return self.op_close_tree(command)
            case Get():
                return self.op_get(command)
            case Agents():
                return self.op_agents(command)
            case Children():
                return self.op_children(command)
            case Unreceive():
                return self.op_unreceive_host(command)
            case LlmLoad():
                return self.op_llm_load(command)
            case LlmStep():
                return self.op_llm_step(command)
            case Compact():
                return self.op_compact(command)
            case Barrier():
                return None
            case Shutdown():
                return self.op_shutdown(command)
            case _:
                raise TypeError(f"not a supervisor command: {command!r}")

    # -- spawning ---------------------------------------------------------------

    def _check_spawn(
        self, parent: AgentRecord | None, profile: Any, task: Any, name: Any
    ) -> tuple[str, str, str]:
        profile = require_str(profile, "profile")
        require_str(task, "task")
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
            tools = self.profiles[profile].tools
            extra = exceeds_ceiling(tools, self.profiles[parent.profile].tools)
            if extra:
                raise ToolsNotPermitted(ceiling_message(profile, parent.profile, extra), extra)
        self._check_size(task, "task")
        agent_id = uuid.uuid4().hex
        if name is None:
            name = paths.derive_name(agent_id)
        name = paths.validate_name(require_str(name, "name"))
        parent_path = paths.ROOT if parent is None else parent.path
        path = paths.join(parent_path, name)
        depth = paths.depth(path)
        cap = self.limits.depth_cap
        if depth > cap:
            raise DepthLimitExceeded(f"{path} would be at depth {depth}; depth_cap is {cap}")
        if path in self.tree.live_paths:
            raise DuplicateAgentPath(f"a live agent already holds {path}")
        parent_id = None if parent is None else parent.id
        live = len(self.tree.live_children(parent_id))
        if parent is not None and live >= self.limits.fanout_cap:
            raise FanoutLimitExceeded(
                f"{parent_path} already has {live} live children; "
                f"fanout_cap is {self.limits.fanout_cap}"
            )
        if self.tree.live_count >= self.limits.max_agents:
            raise AgentLimitExceeded(
                f"the runtime already has {self.tree.live_count} live agents; "
                f"max_agents is {self.limits.max_agents}"
            )
        if parent is not None:
            top = self.tree.top_of[parent.id]
            in_tree = self.tree.tree_count.get(top, 0)
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
    ) -> AgentInfo:
        agent_id, name, path = self._check_spawn(parent, profile, task, name)
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

    def op_spawn(self, command: Spawn) -> AgentInfo:
        """Record a new agent and queue its first turn."""
        me = self._sender(command.sender)
        parent = me
        if me is None and command.parent not in (None, paths.ROOT):
            parent = self._find(None, command.parent)
        return self._spawn(parent, command.profile, command.task, command.name)

    def op_spawn_many(self, command: SpawnMany) -> list[AgentInfo | RetinueError]:
        """Spawn a batch of children of the sender in one transition."""
        me = self._sender(command.sender)
        requests = command.requests
        if len(requests) > self.limits.fanout_cap:
            raise FanoutLimitExceeded(
                f"a batch of {len(requests)} exceeds fanout_cap {self.limits.fanout_cap}"
            )
        results: list[AgentInfo | RetinueError] = []
        for request in requests:
            try:
                results.append(self._spawn(me, request.profile, request.task, request.name))
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
        try:
            actor = AgentActor.start(
                self.runners[record.profile], self._settle_teller(), self.limits.output_max_bytes
            )
        except Exception as exc:  # thread ceiling: the turn fails, its inputs stay unread
            error = f"{type(exc).__name__}: cannot start an actor for the turn: {exc}"
            self._finish_turn(record, None, error, pump=False)
            return
        self._started.append(actor)
        now = record.updated_at
        inbox: list[tuple[int, Message]] = []
        for message in tree.unread(agent_id):
            tree.mark_read(message, now)
            inbox.append((message.seq, message.message))
        for pending in tree.pending_for(agent_id):
            self._deliver(pending)
            inbox.append((pending.seq, self._completion_message(pending, record)))
        inbox.sort(key=lambda item: item[0])
        turn = Turn(
            caller=self.caller,
            agent=info_of(record),
            task=task,
            messages=[m for _, m in inbox],
            reason=reason,
            instructions=self.profiles[record.profile].instructions,
            limits=self.limits,
        )
        self.turns[agent_id] = TurnHandle(generation=record.generation, turn=turn, actor=actor)
        self.active.add(agent_id)
        self._emit(
            TurnStarted(agent_id=agent_id, path=record.path, at=now, generation=record.generation)
        )
        self._after(lambda: actor.tell(turn))

    def _settle_teller(self) -> Callable[[str, int, str | None, str | None], None]:
        caller = self.caller

        def settle(agent_id: str, generation: int, output: str | None, error: str | None) -> None:
            # RetinueError: the runtime closed meanwhile and interrupted the turn.
            with contextlib.suppress(RetinueError):
                caller(Settle(TurnRef(agent_id, generation), output, error))

        return settle

    def op_settle(self, command: Settle) -> None:
        """A runner finished; settle its turn unless it was interrupted meanwhile."""
        agent_id, generation = command.sender.agent_id, command.sender.generation
        output, error = command.output, command.error
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

    def _finish_turn(
        self, record: AgentRecord, output: str | None, error: str | None, *, pump: bool = True
    ) -> None:
        self._release(record.id, TurnInterrupted("the turn ended"))
        status = CompletionStatus.COMPLETED if error is None else CompletionStatus.FAILED
        state = AgentState.COMPLETED if error is None else AgentState.FAILED
        record = self._update(record, state=state, output=output, error=error)
        self._emit_completion(record, status)
        if pump:
            self._pump()
        self._maybe_wake(record.id)

    def _release(self, agent_id: str, why: RetinueError) -> None:
        """Drop a turn's slot, handle, waiter and queued slot request."""
        self.turns.pop(agent_id, None)
        self.active.discard(agent_id)
        waiter = self.agent_waiters.pop(agent_id, None)
        if waiter is not None and waiter.future.set_running_or_notify_cancel():
            future = waiter.future
            self._after(lambda: future.set_exception(why))
        if any(r.agent_id == agent_id for r in self.reacquire):
            for request in self.reacquire:
                if request.agent_id == agent_id:  # its event stays pending
                    self._after(lambda f=request.future: resolve_future(f, why))  # type: ignore[misc]
            self.reacquire = deque(r for r in self.reacquire if r.agent_id != agent_id)

    # -- lifecycle ------------------------------------------------------------------

    def op_follow_up(self, command: FollowUp) -> AgentInfo:
        """Queue a follow-up turn for an idle agent."""
        me = self._sender(command.sender)
        record = self._target(me, command.ref, "follow up")
        task = require_str(command.task, "task")
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

    def op_resume(self, command: Resume) -> AgentInfo:
        """Re-run an interrupted agent's task."""
        me = self._sender(command.sender)
        record = self._target(me, command.ref, "resume")
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

    def op_interrupt(self, command: Interrupt) -> AgentInfo:
        """Cancel an agent's queued or running turn (an idle agent is left as it is)."""
        me = self._sender(command.sender)
        record = self._target(me, command.ref, "interrupt")
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
        waiter = None if record.parent_id is None else self.agent_waiters.get(record.parent_id)
        if waiter is not None and waiter.child_id == record.id:
            closed = AgentClosed(f"{record.path} was closed while its parent waited on it")
            self._deliver_to_waiter(waiter_id=record.parent_id or "", take=lambda: closed)
        return record

    def op_close(self, command: Close) -> AgentInfo:
        """Close an agent without live children (interrupting its turn first)."""
        me = self._sender(command.sender)
        return info_of(self._close(self._target(me, command.ref, "close")))

    def op_close_tree(self, command: CloseTree) -> list[AgentInfo]:
        """Close an agent's whole live subtree, children before parents."""
        me = self._sender(command.sender)
        record = self._target(me, command.ref, "close")
        if record.state is AgentState.CLOSED:
            raise AgentClosed(f"{record.path} is already closed")
        order = self.tree.descendants_postorder(record.id)
        self._closing_subtree = set(order)  # a parent about to close is not woken
        try:
            return [info_of(self._close(self.tree.agents[i])) for i in order]
        finally:
            self._closing_subtree = set()

    # -- reads ------------------------------------------------------------------------

    def op_get(self, command: Get) -> AgentInfo:
        """Return one agent."""
        return info_of(self._find(self._sender(command.sender), command.ref))

    def op_agents(self, command: Agents) -> list[AgentInfo]:
        """Return every agent (live ones unless ``include_closed``), oldest first."""
        self._sender(command.sender)
        return agent_list(self.tree, include_closed=command.include_closed)

    def op_children(self, command: Children) -> list[AgentInfo]:
        """Return the sender's live children."""
        me = self._sender(command.sender)
        assert me is not None
        kids = [self.tree.agents[i] for i in self.tree.live_children(me.id)]
        return [info_of(r) for r in sorted(kids, key=lambda r: r.created_at)]

    def op_compact(self, command: Compact) -> CompactionReport:
        """Remove what retention no longer keeps, as one transition."""
        return compact(self.tree, self.limits, time.time())

    # -- LLM state: transcripts and usage ---------------------------------------------------

    def op_llm_load(self, command: LlmLoad) -> tuple[bytes | None, Usage, Usage]:
        """Return the sender's stored transcript, its usage and its tree's usage."""
        me = self._sender(command.sender)
        assert me is not None
        raw = self.store.get("transcripts", me.id.encode())
        top = self.tree.agents[self.tree.top_of[me.id]]
        return raw, me.usage, top.tree_usage

    def op_llm_step(self, command: LlmStep) -> tuple[Usage, Usage]:
        """Add one model step's usage to the sender and its tree; store its transcript."""
        me = self._sender(command.sender)
        usage, transcript = command.usage, command.transcript
        assert me is not None
        if transcript is not None:
            self.tree.writes.append(("transcripts", me.id.encode(), transcript))
        if usage == Usage():
            top = self.tree.agents[self.tree.top_of[me.id]]
            return me.usage, top.tree_usage
        me = self._update(me, usage=me.usage.add(usage), updated_at=me.updated_at)
        top = self.tree.agents[self.tree.top_of[me.id]]
        top = self._update(top, tree_usage=top.tree_usage.add(usage), updated_at=top.updated_at)
        me = self.tree.agents[me.id]
        return me.usage, top.tree_usage

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

    def op_shutdown(self, command: Shutdown) -> list[tuple[str, pykka.ActorRef[Any]]]:
        """Interrupt every queued and running turn; return the actors still running, by agent.

        ``closing`` is set first, so no interrupt frees a slot for another turn
        or wakes a parent on the way out.
        """
        self.closing = True
        actors = [(i, h.actor) for i, h in self.turns.items() if h.actor is not None]
        for agent_id in list(self.queue) + list(self.turns):
            record = self.tree.agents[agent_id]
            if record.state in BUSY:
                self._interrupt(record)
        failure = RuntimeClosed("the runtime closed during the wait")
        for waiters in self.host_waiters.values():
            for waiter in waiters:
                future = waiter.future
                if future.set_running_or_notify_cancel():
                    self._after(lambda f=future: f.set_exception(failure))  # type: ignore[misc]
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
        """Handle an :class:`Envelope` or an ``("attach", core)`` message."""
        if isinstance(message, Envelope):
            assert self.core is not None
            self.core.handle(message)
        elif isinstance(message, tuple) and message[0] == "attach":
            self.core = message[1]
        return None
