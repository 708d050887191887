"""A turn as the supervisor, the executor and every operation hold it.

:class:`TurnControl` is what :class:`~retinue.actors.turns._turn.Turn`'s
operations stand on: who the turn is (its agent, task, inputs and sender
ref), its cancellation (the supervisor's and the executor's side: cancel,
claim the start, cancel hooks), and its two faces onto the runtime's
:class:`~retinue.actors.calls._engine.Engine`: a blocking one for sync runners,
refused on the runtime's event loop, and an awaitable one for async runners.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from retinue.actors.calls import Engine, Handover, WaitCommand
from retinue.actors.commands import Command, LlmStarted, LlmStep, TurnRef
from retinue.actors.events import QUIET, TurnWatch
from retinue.actors.turns._receipt import TurnReceipt
from retinue.errors import BlockingCallInAsyncRunner
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message

if TYPE_CHECKING:
    from retinue.actors import Journal, Profile
    from retinue.actors.admission import Admission

__all__ = ["TurnControl"]

R = TypeVar("R")
Event = Message | Completion


class TurnControl:
    """One turn's state, its cancellation and its two faces (see :class:`Turn`, which is one)."""

    def __init__(
        self,
        *,
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
        """Create the context (the supervisor does this).

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
        self.cancelled = threading.Event()
        self.limits = limits
        self.engine = engine
        self.ref = TurnRef(agent.id, agent.generation)
        self.handover: Handover[list[Event]] = Handover()
        self.keeps_receipts = keeps_receipts
        self.runner_returned = False  # set by the executor once the runner is done
        self.runner_started = False  # set by the executor as the runner starts
        self.loop_thread: int | None = None  # an async turn's event-loop thread
        self.watch: TurnWatch = QUIET
        self.trace: str | None = None
        self.cause: str | None = None
        self.root_id = agent.id
        self.admission: Admission | None = None  # the provider limits' gate (None: none)
        # A model turn's stored state as it starts (what LlmLoad answers; set by the scheduler)
        # and its last step, committed with its settle (set by the model runner as it ends).
        self.llm_state: LlmStarted | None = None
        self.last_step: LlmStep | None = None
        self._cancel_lock = threading.RLock()
        self._on_cancel: list[Callable[[], None]] = []

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

    def claim_start(self) -> bool:
        """Claim the turn for its runner (the executor calls this just before running it).

        Returns False if the turn was cancelled first: the runner must not
        run, its inputs already went back. Atomic with :meth:`cancel`.
        """
        with self._cancel_lock:
            if self.cancelled.is_set():
                return False
            self.runner_started = True
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

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` when the turn is cancelled (at once if it already is)."""
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

    async def request_async(self, command: Command[R]) -> R:
        """Like :meth:`request`, without blocking the event loop."""
        return await self.engine.ask_async(command)

    def _wait(self, command: WaitCommand, seconds: float, went_back: str) -> Any:
        self._blocking()
        return self.engine.wait(command, seconds, self._receipt(went_back))

    async def _wait_async(self, command: WaitCommand, seconds: float, went_back: str) -> Any:
        return await self.engine.wait_async(command, seconds, self._receipt(went_back))

    def _receipt(self, went_back: str) -> TurnReceipt:
        return TurnReceipt(
            self.handover, self.engine, self.agent, went_back, keep=self.keeps_receipts
        )
