"""The supervisor's shared core: its state, dispatch, lookups and reply plumbing.

Every request arrives as a typed command (:mod:`retinue.actors.commands`) in
an :class:`~retinue.actors.commands.Envelope` in the supervisor actor's inbox
and is handled on its thread. A handler checks the rules first (a refused call
changes nothing), then mutates the in-memory :class:`~retinue.actors.tree.Tree`,
which gathers the matching writes. The writes go to the store as one
transition; the reply and every side effect (starting a runner, answering a
waiter, publishing events) run only once the store says the transition is
committed. Handlers never block.

The logic is layered by concept: this module (state and plumbing) <-
:mod:`retinue.actors.routing` (messages, completions, waits) <-
:mod:`retinue.actors.supervisor` (spawning, turns, lifecycle).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import pykka

from retinue.actors.commands import Command, Envelope, Host, Sender
from retinue.actors.events import EventBus
from retinue.actors.profile import Profile, Runner
from retinue.actors.tree import Tree
from retinue.actors.turn import Caller, Turn
from retinue.errors import (
    ArgumentTypeError,
    MessageTooLarge,
    NotPermitted,
    RetinueError,
    RuntimeClosed,
    StoreError,
    TurnInterrupted,
    UnknownAgent,
)
from retinue.persistence.store import Store
from retinue.protocol import paths
from retinue.protocol.limits import Limits
from retinue.protocol.messages import (
    AgentInfo,
    AgentState,
    Event,
)
from retinue.protocol.records import AgentRecord

__all__ = [
    "BUSY",
    "DEFERRED",
    "AgentWaiter",
    "HostWaiter",
    "SlotRequest",
    "SupervisorCore",
    "TurnHandle",
    "agent_list",
    "info_of",
    "require_str",
    "resolve_future",
]

log = logging.getLogger("retinue.supervisor")
DEFERRED = object()
BUSY = (AgentState.STARTING, AgentState.RUNNING)


@dataclass
class TurnHandle:
    """The supervisor's grip on a running turn: its generation, context and actor."""

    generation: int
    turn: Turn
    actor: pykka.ActorRef[Any] | None = None


@dataclass
class SlotRequest:
    """A turn back from a wait, queued for a slot; ``take`` claims its event."""

    agent_id: str
    future: concurrent.futures.Future[Any]
    take: Callable[[], Any] | None


@dataclass(frozen=True, slots=True)
class HostWaiter:
    """A host blocked in ``wait`` on one agent; answered with a completion."""

    future: concurrent.futures.Future[Any]


@dataclass(frozen=True, slots=True)
class AgentWaiter:
    """A turn blocked in ``wait`` on its child ``child_id`` (one at a time per turn).

    ``kind`` is ``"completion"`` (only the child's completion) or ``"any"``
    (a message the child sent, or its completion).
    """

    child_id: str
    kind: str
    future: concurrent.futures.Future[Any]


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
        usage=record.usage,
        tree_usage=record.tree_usage if record.parent_id is None else None,
    )


def agent_list(tree: Tree, *, include_closed: bool) -> list[AgentInfo]:
    """Return the tree's agents oldest first; closed ones only with ``include_closed``."""
    records = sorted(tree.agents.values(), key=lambda r: r.created_at)
    return [info_of(r) for r in records if include_closed or r.state is not AgentState.CLOSED]


def resolve_future(future: concurrent.futures.Future[Any], value: Any) -> None:
    """Answer ``future`` with ``value`` (an exception is raised to the waiter), at most once."""
    if future.done():
        return
    try:
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)
    except concurrent.futures.InvalidStateError:
        pass


def require_str(value: Any, what: str) -> str:
    """Return ``value`` if it is a str.

    Raises:
        ArgumentTypeError: it is not.
    """
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


class SupervisorCore:
    """State and plumbing shared by the supervisor's layers. Supervisor thread only."""

    def __init__(
        self,
        *,
        store: Store,
        tree: Tree,
        profiles: Mapping[str, Profile],
        runners: Mapping[str, Runner],
        limits: Limits,
        bus: EventBus,
        caller: Caller,
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
        self.turns: dict[str, TurnHandle] = {}
        self.reacquire: deque[SlotRequest] = deque()
        self.host_waiters: dict[str, list[HostWaiter]] = {}
        self.agent_waiters: dict[str, AgentWaiter] = {}
        self._effects: list[Callable[[], None]] = []
        self._started: list[pykka.ActorRef[Any]] = []
        self._closing_subtree: set[str] = set()  # close_tree in progress: wake none of them
        self._events: list[Event] = []
        self._reply: concurrent.futures.Future[Any] | None = None
        self.closing = False
        self._drained: set[str] = set()
        self._held_wakes: set[str] = set()
        self.restoring = False  # while true, nothing is woken

    # -- dispatch -----------------------------------------------------------

    def handle(self, envelope: Envelope) -> None:
        """Run one command and submit its transition; answer once it is committed."""
        command = envelope.command
        self._reply = envelope.reply
        self._effects, self._events, self._started = [], [], []
        result: Any
        try:
            if self.closing and not command.after_close:
                raise RuntimeClosed("the runtime is closing")
            result = self.dispatch(command)
            self._wake_drained()
        except RetinueError as exc:
            result = exc
        except Exception as exc:  # a bug must answer the caller, not kill the supervisor
            log.exception("supervisor command %r failed", command)
            result = exc
        effects, events, started = self._effects, self._events, self._started
        reply = envelope.reply
        bus = self.bus

        def on_commit(error: BaseException | None) -> None:
            if error is not None:
                for actor in started:  # their turns were never recorded
                    actor.stop()
                resolve_future(reply, StoreError(f"the store could not commit: {error}"))
                return
            for effect in effects:
                try:
                    effect()
                except Exception:  # one broken effect must not starve the others
                    log.exception("an after-commit effect of %r failed", command)
            if events:
                bus.publish(events)
            if result is not DEFERRED:
                resolve_future(reply, result)

        try:
            self.store.submit(self.tree.take_writes(), on_commit)
        except RetinueError as exc:  # the store failed for good: say so, never hang
            on_commit(exc)

    def _after(self, effect: Callable[[], None]) -> None:
        self._effects.append(effect)

    def _emit(self, event: Event) -> None:
        if self.bus.active:
            self._events.append(event)

    # -- lookups --------------------------------------------------------------

    def _sender(self, sender: Sender) -> AgentRecord | None:
        """Return the sending turn's agent, or None for the host.

        Raises:
            TurnInterrupted: the turn is no longer its agent's running turn.
        """
        if isinstance(sender, Host):
            return None
        record = self.tree.agents.get(sender.agent_id)
        if (
            record is None
            or record.generation != sender.generation
            or record.state is not AgentState.RUNNING
        ):
            raise TurnInterrupted("this turn was interrupted; its calls are refused")
        return record

    def _find(self, sender: AgentRecord | None, ref: Any) -> AgentRecord:
        ref = require_str(ref, "an agent reference")
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
        """Apply ``changes`` to the agent's current record and store it; return it.

        The changes land on the record the tree holds now, never on the copy
        the caller read earlier: a handler that read ``record``, then routed a
        completion (which moved the host's receipt mark) must not write the
        old mark back, or a received completion would be handed out again.
        """
        current = self.tree.agents.get(record.id, record)
        changes.setdefault("updated_at", time.time())
        return self.tree.put_agent(msgspec.structs.replace(current, **changes))

    def _check_size(self, content: str, what: str) -> None:
        size = len(content.encode("utf-8", "surrogatepass"))
        if size > self.limits.message_max_bytes:
            raise MessageTooLarge(
                f"{what} is {size} bytes; message_max_bytes is {self.limits.message_max_bytes}"
            )

    # -- provided by the upper layers ---------------------------------------------

    def dispatch(self, command: Command[Any]) -> Any:
        """Serve one command (see Supervisor)."""
        raise NotImplementedError

    def _pump(self) -> None:
        """Start queued turns while slots are free (see Supervisor)."""
        raise NotImplementedError

    def _wake_drained(self) -> None:
        """Wake agents whose backlog drained (see Routing)."""
        raise NotImplementedError

    def _queue_turn(self, record: AgentRecord, task: str, reason: str) -> AgentRecord:
        """Queue a turn for an agent (see Supervisor)."""
        raise NotImplementedError
