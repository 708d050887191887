"""The supervisor's thread: the pykka actor that serves its commands one at a time.

:class:`SupervisorActor` is the shell around a
:class:`~retinue.actors.supervisor.Supervisor`: it takes one
:class:`~retinue.actors.commands.Envelope` at a time, in arrival order, from
a C-implemented queue, tells the supervisor whether another command waits
behind it (so the group of served transitions goes to the store when none
does), and commits what was served as it stops.

A command's envelope is put in the inbox as it is
(:func:`~retinue.actors.calls.actor_target`), not inside pykka's envelope
through ``ActorRef.tell``: the actor's loop (pykka's, :meth:`SupervisorActor._actor_loop_running`)
serves it before asking pykka what a message is. That is four Python calls
fewer for the sender (``tell``, ``is_alive``, ``is_set``, pykka's envelope) and
two for the supervisor (``_handle_receive`` and its four ``isinstance``,
``on_receive``) per command, with pykka's rules kept: a failure is pykka's
failure, a stop message stops the loop, and an envelope left in the inbox as
the actor stops is dropped as a ``tell`` is.
"""

from __future__ import annotations

import logging
import queue
import sys
from typing import Any

import pykka

from retinue.actors.calls import refuse_left
from retinue.actors.commands import Envelope
from retinue.actors.supervisor._supervisor import Supervisor

__all__ = ["SupervisorActor"]

log = logging.getLogger("retinue.supervisor")


class SupervisorActor(pykka.ThreadingActor):
    """The pykka shell around :class:`Supervisor`: one command at a time, in arrival order."""

    use_daemon_thread = True

    def __init__(self, core: Supervisor) -> None:
        """Create the shell around ``core`` (recovered and committed already)."""
        super().__init__()
        self.core = core

    def on_receive(self, message: Any) -> Any:
        """Serve an :class:`Envelope`; anything else is a bug, logged and dropped."""
        if isinstance(message, Envelope):
            self.core.handle(message, last=self.actor_inbox.empty())
        else:
            log.error("the supervisor got a message that is not an Envelope: %r", message)
        return None

    def _actor_loop_running(self) -> None:
        """pykka's receive loop (pykka 4.5's ``Actor._actor_loop_running``), with the
        supervisor's envelopes served first: a bare :class:`Envelope` goes to the
        supervisor with no pykka envelope, ``_handle_receive`` or ``on_receive`` between.

        Anything else (pykka's stop, a proxy call) is pykka's, served as pykka
        serves it, once the transitions served before it are handed to the
        store; a failure is handled as pykka handles it. The stop flag is
        read after each of those: only they set it (on this thread), so a run of
        the supervisor's envelopes is served without reading it each time.
        """
        inbox = self.actor_inbox
        get, empty, handle, stopped = inbox.get, inbox.empty, self.core.handle, self.actor_stopped
        commit = self.core.commit
        while not stopped.is_set():
            envelope: Any = get()  # ours (an Envelope, put bare) or pykka's
            try:
                while type(envelope) is Envelope:
                    handle(envelope, last=empty())
                    envelope = get()
                # A command served just before this message saw a full inbox and kept its
                # transition for the group: hand the group over now, or it would wait (its
                # caller too) for a command that may never come.
                commit()
                response = self._handle_receive(envelope.message)
                if envelope.reply_to is not None:
                    envelope.reply_to.set(response)
            except Exception:
                if envelope.reply_to is not None:
                    log.info("Exception returned from %s to caller:", self, exc_info=True)
                    envelope.reply_to.set_exception()
                else:
                    self._handle_failure(*sys.exc_info())
                    try:
                        self.on_failure(*sys.exc_info())
                    except Exception:
                        self._handle_failure(*sys.exc_info())
            except BaseException:
                log.debug("%r in %s. Stopping all actors.", sys.exc_info()[1], self)
                self._stop()
                pykka.ActorRegistry.stop_all()

    def on_stop(self) -> None:
        """Commit what was served but not committed yet (nothing is left unanswered)."""
        self.core.commit()

    def _actor_loop_teardown(self) -> None:
        """pykka's teardown of the inbox (its ``_actor_loop_teardown``), with ours answered.

        pykka drops an inbox item with no ``reply_to`` (a ``tell``), and our bare
        envelopes have none: a command put behind the stop message (one served
        while closing, from another thread) would never be answered, and its
        caller would wait for ever. :func:`~retinue.actors.calls.refuse_left` answers
        it ``RuntimeClosed`` and pykka's own messages as pykka does, without ever
        blocking: the channel's :meth:`~retinue.actors.calls.Channel.disconnect` may
        drain the same inbox at once (pykka answers the stop before this runs).
        """
        refuse_left(self.actor_inbox)

    @staticmethod
    def _create_actor_inbox() -> Any:
        """A C-implemented queue: the supervisor's inbox is the runtime's busiest."""
        return queue.SimpleQueue()
