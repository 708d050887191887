"""The one way into a runtime: submit a command, get the future it is answered on.

A :class:`Channel` owns the runtime's lifecycle state (:class:`RuntimeState`)
and its closing rules, for the host's calls and every turn's alike: while the
runtime is open every command is served; once it closes, a writer's
supervisor still serves the commands marked ``after_close`` (settles, give-ups,
give-backs, the shutdown itself) until it stops, and a read-only runtime
serves nothing more.
"""

from __future__ import annotations

import concurrent.futures
import enum
import queue
import threading
from collections.abc import Callable
from typing import Any

import pykka
from pykka import messages

from retinue.actors.calls._reply import Reply
from retinue.actors.commands import (
    SUPERVISOR_STOPPED,
    Command,
    Envelope,
    FollowUp,
    Resume,
    Run,
    RunMany,
    Spawn,
    SpawnMany,
)
from retinue.errors import RuntimeClosed

__all__ = ["Channel", "RuntimeState", "Target", "actor_target"]

Target = Callable[[Command[Any], "concurrent.futures.Future[Any] | None"], Any]
"""``target(command, reply)``: start serving ``command``; return the future it answers."""


class RuntimeState(enum.Enum):
    """Where a runtime is in its life.

    ``OPEN``: serving; ``CLOSING``: ``shutdown()`` began, only the commands
    that finish the work in flight are served; ``CLOSED``: shut down.
    """

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


_OPEN = RuntimeState.OPEN  # a global: an enum member's lookup is a slow descriptor

# The commands that start turns: the sender's current span goes with them (tracing).
_TRACED = frozenset({Spawn, Run, SpawnMany, RunMany, FollowUp, Resume})


class _ActorTarget:
    """A supervisor actor's target (:func:`actor_target`): callable as any target, and
    taken apart by a :class:`Channel` it is connected to, which delivers inline."""

    __slots__ = ("capture", "inbox", "put", "stopped")

    def __init__(
        self, actor: pykka.ActorRef[Any], capture: Callable[[], str | None] | None
    ) -> None:
        self.inbox = actor.actor_inbox
        self.put = actor.actor_inbox.put
        self.stopped = actor.actor_stopped.is_set
        self.capture = capture

    def __call__(
        self, command: Command[Any], reply: concurrent.futures.Future[Any] | None
    ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = reply if reply is not None else Reply()
        capture = self.capture
        trace = capture() if capture is not None and type(command) in _TRACED else None
        if self.stopped():
            raise RuntimeClosed(SUPERVISOR_STOPPED)
        # Every command class is a member of the closed union; the
        # supervisor's exhaustive match answers anything else with an error.
        # (No typing.cast: a Python call per command for the type checker only.)
        self.put(Envelope(command, future, trace))  # type: ignore[arg-type]
        return future


def actor_target(
    actor: pykka.ActorRef[Any], capture: Callable[[], str | None] | None = None
) -> Target:
    """Return the target that puts a command in the supervisor actor's inbox.

    The :class:`Envelope` goes into the inbox as it is, not through
    ``actor.tell`` (which wraps it in pykka's envelope after asking whether the
    actor is alive, three Python calls per command): the supervisor actor's
    loop serves bare envelopes (:class:`~retinue.actors.supervisor.SupervisorActor`;
    ``actor`` must be one). The same check as ``tell`` comes first: a stopped
    actor takes nothing. A :class:`Channel` connected to it delivers each
    command itself, inline (no call of the target per command).

    ``capture()`` (when the runtime traces) is the sender's current span, taken
    on the sender's thread for each command that starts turns.

    Raises (from the target):
        RuntimeClosed: the supervisor has stopped.
    """
    return _ActorTarget(actor, capture)


def refuse_left(inbox: Any) -> None:
    """Answer every item left in a stopped supervisor actor's ``inbox``; never wait for one.

    Ours (a bare :class:`Envelope`) is refused ``RuntimeClosed``; pykka's are answered
    as pykka's own teardown answers a message it never handled: another ``stop``
    as done (its ``stop()`` returns True), an ``ask`` ``ActorDeadError``; a ``tell``
    is dropped, as pykka drops it. The actor's teardown and :meth:`Channel.disconnect`
    may drain one inbox at once: each item is taken by one of them, and neither
    blocks on an empty inbox.
    """
    while True:
        try:
            item: Any = inbox.get_nowait()  # ours (bare) or pykka's
        except queue.Empty:
            return
        if type(item) is Envelope:
            item.refuse()
        elif item.reply_to is None:
            continue
        elif isinstance(item.message, messages._ActorStop):  # stopped: as asked (True)
            item.reply_to.set(None)
        else:
            dead = pykka.ActorDeadError("the supervisor stopped before handling the message")
            item.reply_to.set_exception(exc_info=(pykka.ActorDeadError, dead, None))


class Channel:
    """Submits commands to a supervisor (or a read-only reader) under the closing rules.

    Thread-safe. ``after_close`` says whether commands marked so are still
    served once the runtime closes (a writer: yes, until its supervisor
    stops; a reader: no). The target is connected once the supervisor runs.
    """

    def __init__(self, *, after_close: bool) -> None:
        """Create an open channel with no target yet (see :meth:`connect`)."""
        self._lock = threading.Lock()
        self._state = RuntimeState.OPEN
        self._after_close = after_close
        self._target: Target | None = None
        self._actor: _ActorTarget | None = None  # the target, if an actor's: inline

    @property
    def state(self) -> RuntimeState:
        """The runtime's state now."""
        return self._state

    def connect(self, target: Target) -> None:
        """Serve commands through ``target`` from now on."""
        with self._lock:
            self._target = target
            self._actor = target if type(target) is _ActorTarget else None

    def submit(
        self, command: Command[Any], reply: concurrent.futures.Future[Any] | None = None
    ) -> concurrent.futures.Future[Any]:
        """Hand ``command`` to the supervisor; return the future it answers (``reply`` if given).

        Raises:
            RuntimeClosed: the runtime is closed, or closing and the command is
                not served while it closes.
            StoreReadOnly: (a reader's target) the command would change the store.
        """
        # acquire/release, not ``with``: a with statement builds two bound methods per
        # command (about a thousand instructions, on every caller's thread).
        lock = self._lock
        lock.acquire()
        try:
            state = self._state
            if state is not _OPEN and not (self._after_close and command.after_close):
                closing = state is RuntimeState.CLOSING and self._after_close
                raise RuntimeClosed(f"the runtime is {'closing' if closing else 'closed'}")
            actor = self._actor
            if actor is not None:  # a supervisor actor's inbox (see actor_target): inline,
                # a Python call fewer per command on every caller's thread
                future: concurrent.futures.Future[Any] = reply if reply is not None else Reply()
                capture = actor.capture
                trace = capture() if capture is not None and type(command) in _TRACED else None
                if actor.stopped():
                    raise RuntimeClosed(SUPERVISOR_STOPPED)
                actor.put(Envelope(command, future, trace))  # type: ignore[arg-type]  # see above
                return future
            target = self._target
            if target is None:
                raise RuntimeClosed("the runtime is closed")
            future = target(command, reply)
        finally:
            lock.release()
        return future

    def disconnect(self) -> None:
        """Serve no command from now on: the supervisor has stopped.

        A command put in a supervisor actor's inbox just as it stopped (its
        sender saw it running) is never served: it is answered
        ``RuntimeClosed`` here, under the lock every sender holds, so none is
        left waiting for ever. Call once the actor has stopped.
        """
        with self._lock:
            actor, self._actor, self._target = self._actor, None, None
            if actor is None:
                return
            refuse_left(actor.inbox)

    def close(self, state: RuntimeState) -> None:
        """Move to ``CLOSING`` or ``CLOSED`` (never back to ``OPEN``)."""
        with self._lock:
            if state is RuntimeState.CLOSED or self._state is RuntimeState.OPEN:
                self._state = state
