"""Agent actors: pykka actors with no thread of their own, run on shared executors.

Agents are virtual actors: the store is an agent's home, and an actor is
started only to run one turn, then stops itself. :class:`PooledActor` uses
pykka's seam for new actor types (``_create_actor_inbox``,
``_create_future``, ``_start_actor_loop``): it keeps pykka's refs, futures and
one-message-at-a-time guarantee, but its inbox is drained by a job on a shared
executor instead of a thread per actor. A sync runner's turn runs in an
:class:`AgentActor` on a :class:`~retinue.actors.turns._executor.WorkerPool`
thread; an async runner's turn (``async def runner(turn) -> str``) is a task on
the runtime's one event loop with no actor
(:class:`~retinue.actors.turns._loop_turns.LoopTurns`, which awaits the runner
itself). Both report an outcome with :func:`report_turn`; a sync runner is run
by :func:`run_runner`.
"""

from __future__ import annotations

import _thread
import contextlib
import contextvars
import inspect
import itertools
import logging
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Self

import pykka

from retinue.actors.commands import LlmStep
from retinue.actors.events import Observer
from retinue.actors.turns._control import TurnControl
from retinue.actors.turns._executor import Executor
from retinue.actors.turns._turn import Runner, Turn, control_of
from retinue.protocol.failures import TurnError, turn_error
from retinue.protocol.text import bounded_text, truncate_utf8

__all__ = [
    "NOT_BY_INTERRUPT",
    "AgentActor",
    "PooledActor",
    "Report",
    "error_text",
    "failure_of",
    "is_async_runner",
    "report_turn",
    "run_runner",
    "running_agent",
]

log = logging.getLogger("retinue.agent")

# report(agent_id, generation, output, error, trace, step): how a finished runner reports
# back (``trace``: its turn's span as a W3C traceparent, None if the runtime traces nothing;
# ``step``: a model turn's last step, committed with the settle, or None).
Report = Callable[[str, int, str | None, TurnError | None, str | None, LlmStep | None], None]
Outcome = tuple[str | None, TurnError | None]
"""A runner's ``(output, error)``: exactly one of them is set."""
Submit = Callable[[Callable[[], None]], Any]


def is_async_runner(runner: Runner) -> bool:
    """Return True if ``runner`` is an ``async def`` function (or object whose call is)."""
    if inspect.iscoroutinefunction(runner):
        return True
    call = getattr(type(runner), "__call__", None)  # noqa: B004 - an instance with async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def is_model_runner(runner: Runner) -> bool:
    """Return True if ``runner`` is a model runner: it reads its stored transcript and
    usage as it starts, so the scheduler hands them to its turns (``Turn.llm_state``).

    A runner says so with its ``model_runner`` attribute
    (:class:`~retinue.llm.LiteLLMRunner`'s is True); one without it is taken for a
    model runner when it has a ``host_tools`` mapping, as a runner shaped like
    ``LiteLLMRunner`` was before the marker. A Python runner that calls a model
    runner itself is not one: its model turns ask for that state (``LlmLoad``),
    one round trip more.
    """
    marker = getattr(runner, "model_runner", None)
    if isinstance(marker, bool):
        return marker
    return isinstance(getattr(runner, "host_tools", None), Mapping)


def _outcome(result: Any, output_max_bytes: int) -> Outcome:
    if not isinstance(result, str):
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            text = (
                f"TypeError: runner returned {type(result).__name__}; "
                "declare it `async def runner(turn)` so the runtime awaits it"
            )
            return None, TurnError(text, "TypeError")
        text = f"TypeError: runner returned {type(result).__name__}, expected str"
        return None, TurnError(text, "TypeError")
    output, _ = truncate_utf8(result, output_max_bytes)
    return output, None


_RUNNING: contextvars.ContextVar[str | None] = contextvars.ContextVar("retinue_running_agent")


def running_agent() -> str | None:
    """Return the id of the agent whose runner is calling (None outside a runner)."""
    return _RUNNING.get(None)


def run_runner(runner: Runner, turn: Turn, output_max_bytes: int) -> Outcome:
    """Run a sync ``runner(turn)`` and return ``(output, error)``; never raises.

    A raised exception becomes ``"<Type>: <message>"`` (no traceback), with
    characters UTF-8 cannot encode escaped, so it can always be stored, and
    its class (:func:`failure_of`); a
    non-string result is an error; an output or error above
    ``output_max_bytes`` is cut with a visible marker. While it runs,
    :func:`running_agent` names the agent (so closing the runtime from a
    runner never waits for itself).
    """
    token = _RUNNING.set(turn.agent.id)
    try:
        with control_of(turn).watch.current():  # its span is current: what it starts nests
            result: Any = runner(turn)
    except BaseException as exc:  # a runner must never take its actor down
        return None, failure_of(exc, output_max_bytes)
    finally:
        _RUNNING.reset(token)
    return _outcome(result, output_max_bytes)


def error_text(exc: BaseException, max_bytes: int) -> str:
    """Return ``"<Type>: <message>"`` for a runner's exception, storable and bounded.

    Never raises: a ``__str__`` that fails is reported as such, lone
    surrogates are escaped (``\\ud800``), and the text is cut to
    ``max_bytes`` with ``…[truncated]``.
    """
    name = type(exc).__name__
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not lose the completion
        message = "(its message could not be read)"
    text = f"{name}: {message}" if message else name
    return bounded_text(text, max_bytes)


def failure_of(exc: BaseException, max_bytes: int) -> TurnError:
    """Return how a runner's exception failed its turn: its text, class and failure class.

    Never raises (see :func:`error_text` and
    :func:`~retinue.protocol.failures.turn_error`).
    """
    return turn_error(exc, error_text(exc, max_bytes))


NOT_BY_INTERRUPT = TurnError(
    "CancelledError: the turn's task was cancelled, and not by its interrupt", "CancelledError"
)
"""The error of an async turn whose task something else cancelled (the turn failed)."""


def report_turn(
    settle: Report, turn: TurnControl, output: str | None, error: TurnError | None
) -> None:
    """Settle ``turn`` through ``settle`` with its runner's outcome, and end its span.

    Raises whatever ``settle`` raises (the span is ended all the same).
    """
    watch = turn.watch
    if watch.span is None:  # no span to pass on or to end
        step = turn.last_step  # a model turn's last step goes with its settle
        settle(turn.agent.id, turn.agent.generation, output, error, None, step)
        return
    trace = watch.traceparent()
    status = (
        "interrupted" if turn.cancelled.is_set() else "failed" if error is not None else "completed"
    )
    try:
        step = turn.last_step
        settle(turn.agent.id, turn.agent.generation, output, error, trace, step)
    finally:
        watch.end(status, None if error is None else error.text)


class _Inbox:
    """A pooled actor's inbox: a deque, and a drain job scheduled when it gets work."""

    __slots__ = ("_items", "_lock", "_scheduled", "kick")

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._lock = threading.Lock()
        self._scheduled = False
        self.kick: Callable[[], None] | None = None

    def put(self, envelope: Any, /) -> None:
        with self._lock:
            self._items.append(envelope)
            if self._scheduled or self.kick is None:
                return
            self._scheduled = True
        self.kick()

    def get(self) -> Any:
        return self._items.popleft()

    def empty(self) -> bool:
        return not self._items

    def next_or_release(self) -> Any | None:
        """Return the next envelope, or None (and unschedule the drain) when empty."""
        with self._lock:
            if self._items:
                return self._items.popleft()
            self._scheduled = False
            return None


class _StopFlag(threading.Event):
    """``actor_stopped`` without a Condition: pykka only sets and reads it.

    A pooled actor makes one with ``object.__new__`` (in C, no ``__init__`` frame): it
    starts unset from the class's ``_stopped``.
    """

    _stopped = False  # until set: the class's (no Condition: set and read under the GIL)

    def __init__(self) -> None:  # no Condition
        self._stopped = False

    def is_set(self) -> bool:
        return self._stopped

    def set(self) -> None:
        self._stopped = True

    def clear(self) -> None:
        self._stopped = False

    def wait(self, timeout: float | None = None) -> bool:
        raise NotImplementedError("a pooled actor's stop flag is not waited on")


_URNS = itertools.count(1)  # pooled actors' URNs (see PooledActor.__init__)
_new = object.__new__
_new_lock = _thread.allocate_lock  # threading.Lock's own (no module attribute lookup)


class PooledActor(pykka.Actor):
    """A pykka actor whose messages are handled by jobs on a shared executor.

    ``submit(job)`` hands a job to the executor (a worker pool, an event loop);
    one job at a time drains the inbox, so messages are still handled one at a
    time and in order, and the actor holds no thread while its inbox is empty.
    ``on_start`` runs with the first message, on the executor.

    Pooled actors are not put in pykka's ``ActorRegistry`` (their owner stops
    them; ``stop_all`` never waits on one), and starting one makes no system
    call: no thread, no ``os.urandom`` for its URN, no Condition for its stop flag.
    """

    def __init__(self, submit: Submit) -> None:
        """Create the actor on ``submit``'s executor (pykka's fields, set cheaply).

        Its URN is unique in the process (a counter's next number, no random bits):
        a pooled actor is never registered, so nothing looks it up by URN.
        """
        self._submit = submit
        self._set_up = False  # until its first drain sets the actor up (set here: an
        # attribute first set after __init__ leaves the instance's dict unshared)
        self.actor_urn = f"urn:retinue:{next(_URNS)}"
        inbox = _Inbox()  # what _create_actor_inbox makes, without its frame
        inbox.kick = self._kick
        self.actor_inbox = inbox
        self.actor_stopped = object.__new__(_StopFlag)  # unset (see _StopFlag)
        self._actor_ref = pykka.ActorRef(self)

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> pykka.ActorRef[Self]:
        """Create the actor and return its ref; nothing runs until its first message
        (there is no loop to start: :meth:`_start_actor_loop` does nothing)."""
        obj = cls(*args, **kwargs)
        return obj._actor_ref  # actor_ref's, without the property's frame

    def _stop(self) -> None:
        """Stop at once (pykka's stop, without the registry)."""
        self.actor_stopped.set()
        try:
            self.on_stop()
        except Exception:
            self._handle_failure(*sys.exc_info())

    @staticmethod
    def _create_actor_inbox() -> Any:
        return _Inbox()

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return pykka.ThreadingFuture()

    def _start_actor_loop(self) -> None:
        """Nothing to start: the first message schedules the first drain."""

    def _kick(self) -> None:
        self._submit(self._drain)

    def _drain(self) -> None:
        if not self._set_up:
            self._set_up = True
            self._actor_loop_setup()
        inbox: _Inbox = self.actor_inbox  # type: ignore[assignment]  # (no cast call)
        while not self.actor_stopped.is_set():
            envelope = inbox.next_or_release()
            if envelope is None:
                return
            try:
                response = self._handle_receive(envelope.message)
                if envelope.reply_to is not None:
                    envelope.reply_to.set(response)
            except Exception:
                if envelope.reply_to is not None:
                    envelope.reply_to.set_exception()
                else:
                    self._handle_failure(*sys.exc_info())
            except BaseException:  # SystemExit and friends stop this actor, never others
                self._stop()
        self._actor_loop_teardown()
        # Break the cycle actor -> inbox -> kick -> actor: refcounting frees a
        # stopped actor at once instead of the cyclic GC, once per turn.
        inbox.kick = None


class AgentActor(PooledActor):
    """Runs one turn of one sync runner on the executor's worker pool, reports the
    outcome, and stops (an async runner's turn needs no actor:
    :class:`~retinue.actors.turns._loop_turns.LoopTurns`)."""

    def __init__(
        self,
        runner: Runner,
        settle: Report,
        output_max_bytes: int,
        executor: Executor,
        observer: Observer | None = None,
    ) -> None:
        """Prepare the actor; the turn arrives as its one message.

        ``observer`` gives the turn its watch (its control's ``watch``) as the runner starts.
        """
        # PooledActor.__init__'s work, inline (one actor per turn: two Python frames fewer,
        # its own and its inbox's): the same fields, in the same order.
        self._submit = executor.pool.submit
        self._set_up = False
        self.actor_urn = f"urn:retinue:{next(_URNS)}"
        inbox = _new(_Inbox)  # _Inbox(), its slots set here
        inbox._items = deque()
        inbox._lock = _new_lock()
        inbox._scheduled = False
        inbox.kick = self._kick
        self.actor_inbox = inbox
        self.actor_stopped = _new(_StopFlag)  # unset (see _StopFlag)
        self._actor_ref = pykka.ActorRef(self)
        self._runner = runner
        self._settle = settle
        self._output_max_bytes = output_max_bytes
        self._observer = observer
        model = getattr(runner, "model", None)  # a model runner's, for its turn's span
        self._model = model if isinstance(model, str) else None

    def _handle_receive(self, message: Any) -> Any:
        """Handle a message: a turn (its one message) at once, anything else as pykka does."""
        if type(message) is Turn:
            return self.on_receive(message)
        return super()._handle_receive(message)

    def on_receive(self, message: Any) -> Any:
        """Run the turn in ``message``, report it, then stop."""
        if isinstance(message, Turn):
            control = control_of(message)
            if self._observer is not None:
                control.watch = self._observer.watch(control, self._model)
            if not control.claim_start():  # cancelled first: its inputs already went back
                self._gone(control)
                return None
            output, error = run_runner(self._runner, message, self._output_max_bytes)
            control.runner_returned = True
            try:
                report_turn(self._settle, control, output, error)
            finally:
                # Stop at once, in this drain job: what stop() would do through the inbox
                # (a stop message this same job then handles); a stop the runtime sent
                # meanwhile is answered by the drain's teardown.
                self._stop()
        return None

    def _gone(self, turn: TurnControl) -> None:
        """A cancelled turn's runner will not run: say so, then stop.

        The report is discarded as a late result; it tells the supervisor that
        no runner of that turn runs any more (see ``Runtime.wait_idle``).
        """
        turn.runner_returned = True
        turn.watch.end("interrupted", None)
        try:
            self._settle(turn.agent.id, turn.agent.generation, None, None, None, None)
        finally:
            with contextlib.suppress(pykka.ActorDeadError):  # the runtime stopped it first
                self.stop()
