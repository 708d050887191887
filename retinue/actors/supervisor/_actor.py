"""The supervisor's thread: the pykka actor that serves its commands one at a time.

:class:`SupervisorActor` is the shell around a
:class:`~retinue.actors.supervisor.Supervisor`: it takes one
:class:`~retinue.actors.commands.Envelope` at a time, in arrival order, from
a C-implemented queue, tells the supervisor whether another command waits
behind it (so the group of served transitions goes to the store when none
does), and commits what was served as it stops.
"""

from __future__ import annotations

import logging
import queue
from typing import Any

import pykka

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

    def on_stop(self) -> None:
        """Commit what was served but not committed yet (nothing is left unanswered)."""
        self.core.commit()

    @staticmethod
    def _create_actor_inbox() -> Any:
        """A C-implemented queue: the supervisor's inbox is the runtime's busiest."""
        return queue.SimpleQueue()
