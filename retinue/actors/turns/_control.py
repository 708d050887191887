"""A turn as the runtime holds it: the private side of a runner's :class:`Turn`.

:class:`TurnControl` is what a :class:`~retinue.actors.turns._turn.Turn` is
composed with, and what the supervisor, the executor and the LLM layer hold
(through :func:`~retinue.actors.turns._turn.control_of`): who the turn is (its
agent, task, inputs and sender ref), its cancellation (the supervisor's and
the executor's side: cancel, claim the start, cancel hooks, the runner's
flags), its two faces onto the runtime's
:class:`~retinue.actors.calls._engine.Engine` (a blocking one for sync
runners, refused on the runtime's event loop, and an awaitable one for async
runners), and the coordinator operations with the arguments only a tool layer
passes (``field=``/``name_field=``: the name its errors give a reference).
The runner's :class:`Turn` shows the same operations without them.
"""

from __future__ import annotations

import _thread
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from retinue.actors.calls import Engine, Handover, WaitCommand, resolve_timeout
from retinue.actors.commands import (
    Children,
    Close,
    CloseTree,
    Command,
    Interrupt,
    InterruptTree,
    LlmStarted,
    LlmStep,
    RunMany,
    Send,
    Spawn,
    SpawnRequest,
    TurnRef,
    Wait,
)
from retinue.actors.events import QUIET, TurnWatch
from retinue.actors.turns._receipt import TurnReceipt
from retinue.errors import BlockingCallInAsyncRunner, InvalidArgument, RetinueError
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message

if TYPE_CHECKING:
    from retinue.actors import Journal, Profile
    from retinue.actors.admission import Admission

__all__ = ["BatchRequest", "TurnControl", "turn_ref"]

R = TypeVar("R")
Event = Message | Completion

BatchRequest = tuple[str, str] | tuple[str, str, str | None]
"""One child of ``run_many``: ``(profile, task)``, or ``(profile, task, name)``."""

_EVENT = "its wait's event went back"
_BATCH = "its batch went back"


_CONDITIONS = _thread.allocate_lock()  # makes a cancel flag's one Condition


class _LazyCondition:
    """A cancel flag's ``_cond``: made on its first use, then the flag's own attribute.

    A non-data descriptor (no ``__set__``): once the flag holds its own ``_cond``,
    reads find that and never come here. Not a ``__getattr__`` on the flag, which
    would route every attribute read of every flag (``is_set`` and its ``_flag``, a
    running turn's frequent checks) through the slow ``__getattr__`` hook instead of
    the specializing interpreter's, nor a read of the flag's ``__dict__`` (which would
    turn its inline attributes into a real dict for good).
    """

    def __get__(self, flag: _CancelFlag | None, owner: type | None = None) -> Any:
        """Return ``flag``'s Condition, made under a global lock if it has none."""
        if flag is None:
            return self
        with _CONDITIONS:
            cond = flag._made  # None until made (the class's); set once, under the lock
            if cond is None:
                cond = flag._made = threading.Condition(_thread.RLock())
            flag._cond = cond  # the flag's own from now on: reads skip this descriptor
        return cond


class _CancelFlag(threading.Event):
    """A turn's ``cancelled``: a :class:`threading.Event` that makes its Condition when
    it is first set or waited on.

    Nearly every turn is never cancelled nor waited on, and only reads the flag
    (``is_set``): building ``Event()``'s Condition per turn (a Python ``__init__``,
    about 1.5 us) bought nothing for those. The flag starts unset (the class's
    ``_flag``); the Condition, once made under a global lock (:class:`_LazyCondition`),
    is the instance's own, so every ``set`` and ``wait`` of one flag share it. It holds
    an RLock, as ``Condition()``'s default, not the Lock ``Event()`` passes (whose
    Condition init raises and catches three AttributeErrors). It behaves as an ``Event``.
    """

    _flag = False
    _made: threading.Condition | None = None
    _cond = _LazyCondition()


_new_flag = object.__new__  # a _CancelFlag without Event.__init__ (see _CancelFlag)

# A TurnRef made with its slots' own setters: a frozen dataclass's ``__init__`` sets each
# field through ``object.__setattr__`` (a global lookup and a call per field), a third of
# TurnControl's construction. The ref is the same frozen TurnRef (equal, hashed alike).
_REF: Any = TurnRef
_set_ref_agent = _REF.agent_id.__set__
_set_ref_generation = _REF.generation.__set__


def turn_ref(agent_id: str, generation: int) -> TurnRef:
    """Return ``TurnRef(agent_id, generation)``, built as ``TurnControl`` builds its ref."""
    ref = _new_flag(TurnRef)
    _set_ref_agent(ref, agent_id)
    _set_ref_generation(ref, generation)
    return ref


class TurnControl:
    """One turn's state, its cancellation, its two faces and its operations.

    The runtime's side of a :class:`~retinue.actors.turns._turn.Turn` (see the
    module's docstring); a runner never holds one. The attributes that every turn
    starts with the same value are the class's until a turn sets its own (no
    assignment per turn).
    """

    runner_returned: bool = False  # set by the executor once the runner is done
    runner_started: bool = False  # set by the executor as the runner starts
    loop_thread: int | None = None  # an async turn's event-loop thread
    watch: TurnWatch = QUIET
    trace: str | None = None
    cause: str | None = None
    admission: Admission | None = None  # the provider limits' gate (None: none)
    # A model turn's stored state as it starts (what LlmLoad answers; set by the scheduler)
    # and its last step, committed with its settle (set by the model runner as it ends).
    llm_state: LlmStarted | None = None
    last_step: LlmStep | None = None

    def __init__(
        self,
        engine: Engine,
        agent: AgentInfo,
        task: str,
        messages: Sequence[Message],
        reason: str,
        limits: Limits,
        profile: Profile,
        keeps_receipts: bool = False,
        origin: str | None = None,
    ) -> None:
        """Create the turn's control (the supervisor does this, with positional arguments:
        keywords make the class call build a dict of them first).

        ``keeps_receipts``: what the turn's waits receive stays the turn's
        until it completes (or, for a model runner, its transcript stores it):
        a turn that ends otherwise gives it back. ``origin``: what the task's
        first attempt was for (None: ``reason``).
        """
        self.agent = agent
        self.task = task
        self.messages = list(messages)
        self.reason = reason
        self.origin = reason if origin is None else origin
        self.profile = profile
        self.instructions = profile.instructions
        # Made in C, unset: its Condition is made when first used (see _CancelFlag).
        self.cancelled: threading.Event = _new_flag(_CancelFlag)
        self.limits = limits
        self.engine = engine
        ref = self.ref = _new_flag(TurnRef)  # TurnRef(agent.id, agent.generation), see _REF
        _set_ref_agent(ref, agent.id)
        _set_ref_generation(ref, agent.generation)
        self.handover: Handover[list[Event]] = Handover()
        self.keeps_receipts = keeps_receipts
        self.root_id = agent.id
        self._cancel_lock = _thread.RLock()  # threading.RLock's own (no Python frame)
        self._on_cancel: list[Callable[[], object]] = []

    def __journal_snapshot__(self) -> tuple[bool, object]:
        """The turn as a supervisor command may change it: cancelled, its ledger (not
        ``runner_started``: the runner's thread sets it whenever it starts, a command only
        reads it)."""
        return self.cancelled.is_set(), self.handover.__journal_snapshot__()

    @property
    def attempt(self) -> int:
        """The run of this turn's task: 1 for a first run, n for its (n-1)th restart."""
        return self.agent.attempt

    # -- cancellation (the supervisor's side) ---------------------------------------

    def cancel(self, journal: Journal | None = None) -> bool:
        """Mark the turn cancelled and run its cancel hooks (an async turn's task is cancelled).

        Returns whether its runner had started: one that had not never will
        (:meth:`claim_start` refuses it), so the supervisor gives the turn's
        inputs back in the same transition and nothing it was handed is lost.

        In a supervisor command (``journal`` active) the decision is the
        command's: the turn's cancel lock is held until the command is kept
        (the turn is cancelled then) or rolled back (nothing happened), so
        the runner cannot start, nor see a cancel that is then undone, meanwhile.
        """
        if journal is not None and journal.active:
            journal.hold(self._cancel_lock)
            journal.on_keep(self._signal_cancel)
            return self.runner_started
        return self._cancel_now()

    def _signal_cancel(self) -> None:
        self._cancel_now()

    def _cancel_now(self) -> bool:
        with self._cancel_lock:
            self.cancelled.set()
            started = self.runner_started
            hooks, self._on_cancel = self._on_cancel, []
        for hook in hooks:
            hook()
        return started

    def claim_start(self, on_cancel: Callable[[], object] | None = None) -> bool:
        """Claim the turn for its runner (the executor calls this just before running it).

        Returns False if the turn was cancelled first: the runner must not
        run, its inputs already went back. Atomic with :meth:`cancel`.
        ``on_cancel``: a hook to call when the turn is cancelled from now on,
        as :meth:`on_cancel` would (registered only if the claim succeeds: a
        turn cancelled first is not claimed, so its runner has nothing to stop).
        """
        with self._cancel_lock:
            if self.cancelled.is_set():
                return False
            self.runner_started = True
            if on_cancel is not None:
                self._on_cancel.append(on_cancel)
            return True

    def while_running(self, action: Callable[[], None]) -> bool:
        """Run ``action()`` unless the turn is cancelled; return whether it ran.

        Atomic with :meth:`cancel`: what runs here (a live event published)
        happens before an interrupt's transition, or not at all.
        """
        with self._cancel_lock:
            if self.cancelled.is_set():
                return False
            action()
            return True

    def on_cancel(self, hook: Callable[[], object]) -> None:
        """Call ``hook()`` when the turn is cancelled (at once if it already is); what it
        returns is ignored."""
        with self._cancel_lock:
            if not self.cancelled.is_set():
                self._on_cancel.append(hook)
                return
        hook()

    # -- the two faces ------------------------------------------------------------------

    def _blocking(self) -> None:
        """Refuse a blocking operation on the runtime's event loop.

        Raises:
            BlockingCallInAsyncRunner: an async runner called a blocking form.
        """
        if self.loop_thread is not None and threading.get_ident() == self.loop_thread:
            raise BlockingCallInAsyncRunner(
                "a blocking turn operation was called from an async runner; "
                "await its *_async twin (for example `await turn.wait_async(...)`)"
            )

    def request(self, command: Command[R]) -> R:
        """Send one command of this turn to the supervisor and block for its answer.

        Raises:
            BlockingCallInAsyncRunner: called from an async runner.
            TurnInterrupted: the turn is no longer running; and whatever the command raises.
        """
        self._blocking()
        return self.engine.ask(command)

    def request_async(self, command: Command[R]) -> Coroutine[Any, Any, R]:
        """Like :meth:`request`, without blocking the event loop: the engine's
        :meth:`~retinue.actors.calls.Engine.ask_async` itself, to await (no
        coroutine of its own to create and resume per request)."""
        return self.engine.ask_async(command)

    def _wait(self, command: WaitCommand, seconds: float, went_back: str) -> Any:
        self._blocking()
        return self.engine.wait(command, seconds, self._receipt(went_back))

    async def _wait_async(self, command: WaitCommand, seconds: float, went_back: str) -> Any:
        return await self.engine.wait_async(command, seconds, self._receipt(went_back))

    def _receipt(self, went_back: str) -> TurnReceipt:
        return TurnReceipt(
            self.handover, self.engine, self.agent, went_back, keep=self.keeps_receipts
        )

    # -- operations (the Turn's, with the tool layer's field names) --------------------

    def _spawn(
        self, profile: str, task: str, name: str | None, key: str | None, name_field: str
    ) -> Spawn:
        return Spawn(self.ref, profile, task, name, idempotency_key=key, name_field=name_field)

    def spawn(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
        name_field: str = "name",
    ) -> AgentInfo:
        """:meth:`Turn.spawn`; ``name_field`` is the name errors give ``name``.

        Raises:
            RetinueError: as :meth:`Turn.spawn` says.
        """
        return self.request(self._spawn(profile, task, name, idempotency_key, name_field))

    async def spawn_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
        name_field: str = "name",
    ) -> AgentInfo:
        """Like :meth:`spawn`, without blocking the event loop."""
        command = self._spawn(profile, task, name, idempotency_key, name_field)
        return await self.request_async(command)

    def run(
        self, profile: str, task: str, *, name: str | None = None, timeout: float | None = None
    ) -> Completion:
        """:meth:`Turn.run`.

        Raises:
            RetinueError: as :meth:`Turn.run` says.
        """
        seconds = resolve_timeout(timeout, self.limits)
        child = self.spawn(profile, task, name=name)
        result: Completion = self._wait(self._wait_for(child.id, "completion"), seconds, _EVENT)
        return result

    async def run_async(
        self, profile: str, task: str, *, name: str | None = None, timeout: float | None = None
    ) -> Completion:
        """Like :meth:`run`, without blocking the event loop."""
        seconds = resolve_timeout(timeout, self.limits)
        child = await self.spawn_async(profile, task, name=name)
        command = self._wait_for(child.id, "completion")
        result: Completion = await self._wait_async(command, seconds, _EVENT)
        return result

    def _run_many(
        self,
        requests: Sequence[BatchRequest],
        name_field: str = "name",
        keys: Sequence[str | None] | None = None,
    ) -> RunMany:
        """The one command that spawns a batch and waits for it (answered once all are done).

        ``keys`` gives each request's spawn an idempotency key (see :meth:`spawn`).

        Raises:
            InvalidArgument: a request is not a ``(profile, task)`` pair or a
                ``(profile, task, name)`` triple, or ``keys`` is not one per request.
        """
        items = list(requests)
        for item in items:
            if not (isinstance(item, tuple | list) and len(item) in (2, 3)):
                raise InvalidArgument(
                    "run_many takes a list of (profile, task) pairs or (profile, task, name)"
                )
        given = [None] * len(items) if keys is None else list(keys)
        if len(given) != len(items):
            raise InvalidArgument(f"run_many takes one key per request, not {len(given)}")
        spawns = [
            SpawnRequest(
                item[0],
                item[1],
                item[2] if len(item) == 3 else None,
                name_field,
                idempotency_key=key,
            )
            for item, key in zip(items, given, strict=True)
        ]
        return RunMany(self.ref, spawns)

    def run_many(
        self,
        requests: Sequence[BatchRequest],
        timeout: float | None = None,
        *,
        name_field: str = "name",
        keys: Sequence[str | None] | None = None,
    ) -> list[Completion | RetinueError]:
        """:meth:`Turn.run_many`; ``keys`` gives each request's spawn an idempotency key.

        Raises:
            RetinueError: as :meth:`Turn.run_many` says.
        """
        seconds = resolve_timeout(timeout, self.limits)
        result: list[Completion | RetinueError] = self._wait(
            self._run_many(requests, name_field, keys), seconds, _BATCH
        )
        return result

    async def run_many_async(
        self,
        requests: Sequence[BatchRequest],
        timeout: float | None = None,
        *,
        name_field: str = "name",
        keys: Sequence[str | None] | None = None,
    ) -> list[Completion | RetinueError]:
        """Like :meth:`run_many`, without blocking the event loop."""
        seconds = resolve_timeout(timeout, self.limits)
        result: list[Completion | RetinueError] = await self._wait_async(
            self._run_many(requests, name_field, keys), seconds, _BATCH
        )
        return result

    async def run_one_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        name_field: str = "name",
    ) -> tuple[Completion | RetinueError, list[Message]]:
        """Spawn one child and wait for it in one command (a one-child ``run_many``).

        Returns its completion, or the error in its place (a refused spawn, a
        child closed with none, ``WaitTimeout`` when it still runs), with the
        messages it sent this agent meanwhile, oldest first (taken with it).
        ``idempotency_key`` and ``name_field``: see :meth:`Turn.spawn`.
        """
        seconds = resolve_timeout(timeout, self.limits)
        spawn = SpawnRequest(profile, task, name, name_field, idempotency_key=idempotency_key)
        command = RunMany(self.ref, [spawn], messages=True)
        answer: list[Any] = await self._wait_async(command, seconds, _BATCH)
        return answer[0], answer[1:]

    def send(
        self, ref: str, content: str, *, dedup_key: str | None = None, field: str = "ref"
    ) -> Message:
        """:meth:`Turn.send`; ``field`` is the name errors give ``ref`` (a tool layer passes
        its own argument's name, as every operation here that takes a reference does).

        Raises:
            RetinueError: as :meth:`Turn.send` says.
        """
        return self.request(Send(self.ref, ref, content, dedup_key, field))

    async def send_async(
        self, ref: str, content: str, *, dedup_key: str | None = None, field: str = "ref"
    ) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        return await self.request_async(Send(self.ref, ref, content, dedup_key, field))

    def _wait_for(self, ref: str, kind: Any, field: str = "ref") -> Wait:
        return Wait(self.ref, ref, kind, field)

    def wait(
        self, ref: str, timeout: float | None = None, *, field: str = "ref"
    ) -> Message | Completion:
        """:meth:`Turn.wait`.

        Raises:
            RetinueError: as :meth:`Turn.wait` says.
        """
        seconds = resolve_timeout(timeout, self.limits)
        result: Message | Completion = self._wait(
            self._wait_for(ref, "any", field), seconds, _EVENT
        )
        return result

    async def wait_async(
        self, ref: str, timeout: float | None = None, *, field: str = "ref"
    ) -> Message | Completion:
        """Like :meth:`wait`, without blocking the event loop."""
        seconds = resolve_timeout(timeout, self.limits)
        command = self._wait_for(ref, "any", field)
        result: Message | Completion = await self._wait_async(command, seconds, _EVENT)
        return result

    def children(self) -> list[AgentInfo]:
        """:meth:`Turn.children`."""
        return self.request(Children(self.ref))

    async def children_async(self) -> list[AgentInfo]:
        """Like :meth:`children`, without blocking the event loop."""
        return await self.request_async(Children(self.ref))

    def interrupt(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """:meth:`Turn.interrupt`."""
        return self.request(Interrupt(self.ref, ref, field))

    async def interrupt_async(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        return await self.request_async(Interrupt(self.ref, ref, field))

    def interrupt_tree(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """:meth:`Turn.interrupt_tree`."""
        return self.request(InterruptTree(self.ref, ref, field))

    async def interrupt_tree_async(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """Like :meth:`interrupt_tree`, without blocking the event loop."""
        return await self.request_async(InterruptTree(self.ref, ref, field))

    def close(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """:meth:`Turn.close`."""
        return self.request(Close(self.ref, ref, field))

    async def close_async(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Like :meth:`close`, without blocking the event loop."""
        return await self.request_async(Close(self.ref, ref, field))

    def close_tree(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """:meth:`Turn.close_tree`."""
        return self.request(CloseTree(self.ref, ref, field))

    async def close_tree_async(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        return await self.request_async(CloseTree(self.ref, ref, field))
