"""Async runners' turns, started as tasks on the runtime's event loop with no actor.

An async runner's turn is one task on the runtime's one event loop: it needs
no actor around it (no ref, inbox, stop flag nor drain job, which existed only
to receive the turn and stop). :class:`LoopTurns` starts the turns of one
async runner: :meth:`LoopTurns.start` (the commit's effect, on the store's
writer) hands the turn to the loop in one hop, the loop's thread-safe wake-up
(:meth:`~retinue.actors.turns._executor.LoopThread.call_soon`), and there the
turn's task is created. What the actor guaranteed holds:

- a turn cancelled before its task starts never runs its runner and reports
  itself gone (its inputs already went back);
- interrupting the turn cancels its task at once (its cancel hook); a task
  cancelled by something else reports ``NOT_BY_INTERRUPT``;
- the report is made in the task's last step (no extra loop pass);
- nothing is started before the commit: a command that fails or is rolled
  back drops its effects, so such a turn never reaches the loop.

One :class:`LoopTurns` serves every turn of its runner (the scheduler keeps
one per profile): a turn costs its task, its coroutine and two partials.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from retinue.actors.events import Observer
from retinue.actors.turns._agent import (
    _RUNNING,
    NOT_BY_INTERRUPT,
    Report,
    _outcome,
    failure_of,
    report_turn,
)
from retinue.actors.turns._control import TurnControl
from retinue.actors.turns._executor import LoopThread
from retinue.actors.turns._turn import Runner, Turn, control_of
from retinue.protocol.failures import TurnError

__all__ = ["LoopTurns"]

_current_task = asyncio.current_task
_running_loop = asyncio.get_running_loop


class LoopTurns:
    """Starts the turns of one async runner as tasks on the runtime's event loop.

    Thread-safe: :meth:`start` may be called from any thread; everything else
    runs on the loop's thread.
    """

    __slots__ = ("_loop", "_model", "_observer", "_output_max_bytes", "_runner", "_settle")

    def __init__(
        self,
        runner: Runner,
        settle: Report,
        output_max_bytes: int,
        loop: LoopThread,
        observer: Observer | None = None,
    ) -> None:
        """Start ``runner``'s turns on ``loop``; each reports through ``settle``.

        ``runner`` must be async (:func:`~retinue.actors.turns.is_async_runner`);
        an output above ``output_max_bytes`` is cut; ``observer`` gives each turn its
        watch (its control's ``watch``) as its task starts.
        """
        self._runner = runner
        self._settle = settle
        self._output_max_bytes = output_max_bytes
        self._loop = loop
        self._observer = observer
        model = getattr(runner, "model", None)  # a model runner's, for its turns' spans
        self._model = model if isinstance(model, str) else None

    def start(self, face: Turn) -> None:
        """Have the loop start ``face``'s turn soon (any thread; one wake-up of the loop).

        Call it once the turn's start is committed. A loop that stopped already
        (the runtime closed) runs nothing: the turn is reported at once, as
        gone if it was cancelled, else as cancelled by something else.
        """
        if not self._loop.call_soon(self._begin, face):
            self._unrun(control_of(face))

    def _begin(self, face: Turn) -> None:
        """On the loop: create the turn's task (or report it gone if it was cancelled)."""
        turn = face._control  # control_of(face), without its frame
        observer = self._observer
        if observer is not None:
            turn.watch = observer.watch(turn, self._model)
        if turn.cancelled.is_set():  # its inputs already went back
            self._gone(turn)
            return
        turn.loop_thread = threading.get_ident()  # its blocking faces refuse to run here
        done = partial(self._done, turn)
        task = _running_loop().create_task(
            self._run(face, turn, done), name=f"retinue-turn-{turn.agent.path}"
        )
        task.add_done_callback(done)

    async def _run(self, face: Turn, turn: TurnControl, done: partial[None]) -> None:
        """The turn's task: run its runner, then report it, in its last step.

        Cancellation is not interruption: only the turn's own interrupt, close or
        timeout (``turn.cancelled`` set) ends it as cancelled; a ``CancelledError``
        the runner raises otherwise is its failure, like any exception (the sync
        twin of this rule is :func:`~retinue.actors.turns._agent.run_runner`).

        The report is made here, not by the task's done callback, which would
        take one more pass of the loop per turn: ``done`` is taken off the task
        once the runner has returned, and stays for a task that ends cancelled
        (its runner interrupted, or cancelled by something else).
        """
        # The runner is awaited here, not in a helper coroutine: that would be one more
        # object per turn in flight and one more frame to resume at each of its steps.
        _RUNNING.set(turn.agent.id)  # the task runs in its own context
        task = _current_task()
        assert task is not None  # this coroutine runs as its turn's task
        # claimed with its cancel hook, under one lock: a turn cancelled before this step
        # is not claimed (its inputs already went back), and needs no hook to stop it
        if not turn.claim_start(partial(self._loop.call_soon, task.cancel)):
            raise asyncio.CancelledError
        call: Callable[[Turn], Awaitable[Any]] = self._runner  # type: ignore[assignment]
        watch = turn.watch
        output_max_bytes = self._output_max_bytes
        output: str | None
        error: TurnError | None
        try:
            if watch.span is None:  # no span to make current: no context entered and left
                result: Any = await call(face)
            else:
                with watch.current():  # its span is current in this task
                    result = await call(face)
        except asyncio.CancelledError as exc:
            if turn.cancelled.is_set():  # its interrupt, close or timeout: _done reports it
                raise
            output, error = None, failure_of(exc, output_max_bytes)  # the runner's own
        except BaseException as exc:  # a runner must never take its loop down
            output, error = None, failure_of(exc, output_max_bytes)
        else:
            output, error = _outcome(result, output_max_bytes)
        task.remove_done_callback(done)  # no await from here on: nothing cancels it
        turn.runner_returned = True
        report_turn(self._settle, turn, output, error)

    def _done(self, turn: TurnControl, finished: asyncio.Task[None]) -> None:
        """A task that ended cancelled (or failed outside its runner): report it."""
        if finished.cancelled():
            self._unrun(turn)
            return
        turn.runner_returned = True
        finished.result()  # failed outside its runner (which never raises): re-raised, logged

    def _unrun(self, turn: TurnControl) -> None:
        """The turn's runner did not run to its end: gone if the turn was cancelled (its
        interrupt, close or timeout), else failed with ``NOT_BY_INTERRUPT``."""
        if turn.cancelled.is_set():
            self._gone(turn)
            return
        turn.runner_returned = True
        report_turn(self._settle, turn, None, NOT_BY_INTERRUPT)

    def _gone(self, turn: TurnControl) -> None:
        """A cancelled turn's runner will not run (or ran no further): say so.

        The report is discarded as a late result; it tells the supervisor that
        no runner of that turn runs any more (see ``Runtime.wait_idle``).
        """
        turn.runner_returned = True
        turn.watch.end("interrupted", None)
        self._settle(turn.agent.id, turn.agent.generation, None, None, None, None)
