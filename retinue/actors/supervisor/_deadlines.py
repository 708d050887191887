"""A turn's deadline: its profile's ``turn_timeout_s``, counted from when the turn started.

A turn that starts arms a timer on the executor's loop that sends
:class:`~retinue.actors.commands.ExpireTurn` once the deadline passes. The
deadline belongs to the turn, not to the process running it: a turn parked for
approval when its runtime closed (or crashed) keeps its stored start time, so
the open that restores the park arms the timer again for what is left of it,
and so does the start that carries the turn on once its approvals are answered
(``turn.reason == "approval"``). A deadline already past fires at once.
"""

from __future__ import annotations

import time

from retinue.actors.commands import ExpireTurn, TurnRef
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World
from retinue.protocol.records import AgentRecord

__all__ = ["arm_deadline"]


def arm_deadline(
    world: World, tx: Transition, record: AgentRecord, *, from_start: bool = False
) -> None:
    """After the commit, arm the timer that expires ``record``'s current turn, if it has one.

    The timer runs ``turn_timeout_s`` from now, or, with ``from_start``, from
    ``record.started_at`` (a turn that began before a reopen: only what is left
    of its time). Nothing is armed for a profile without ``turn_timeout_s`` or
    one this runtime does not define.
    """
    profile = world.profiles.get(record.profile)
    seconds = None if profile is None else profile.turn_timeout_s
    if seconds is None:
        return
    delay = seconds
    if from_start and record.started_at is not None:
        delay = max(0.0, record.started_at + seconds - time.time())
    engine, loop = world.engine, world.executor.loop
    turn = TurnRef(record.id, record.generation)

    def expire() -> None:  # closed meanwhile: refused, nothing to expire
        engine.tell(ExpireTurn(turn, seconds))

    def arm() -> None:
        loop.call_later(delay, expire)

    tx.after(arm)
