"""The input rule: a turn's inputs are consumed only by a turn that completes.

A turn's inputs are the unread messages and children's completions it starts
with (``turn.messages``, taken by :meth:`~retinue.actors.supervisor._mailboxes.Mailboxes.inbox`)
and what its waits receive (kept in its :class:`~retinue.actors.calls._handover.Handover`
ledger). In the store they are read or delivered, tagged with the turn's
generation, so a crash that kills the turn hands them to the next one
(:meth:`~retinue.actors.tree.Tree.load`). Whatever runs the turn, a Python
runner or a model:

- a turn that **completes** consumes them (its output answers them);
- a model turn whose transcript stores them consumes them at that step
  (:class:`~retinue.actors.commands.LlmStep`; :meth:`ModelState.step
  <retinue.actors.supervisor._model_state.ModelState.step>`): its next attempt reads
  them from the transcript, never twice;
- a turn that **fails** (restarted or not), is **interrupted** (an
  interrupt, a close, the runtime closing, its ``turn_timeout_s``) or is
  **lost** gives them back: pending or unread again, in arrival order, for
  the next attempt or the next turn. A failed turn is not woken by what it
  gave back (it would fail again on it), only by completions that arrived
  besides.

So each completion is received exactly once overall: by the turn that
completes with it (or by the host).
"""

from __future__ import annotations

from retinue.actors import Journal
from retinue.actors.supervisor._scheduler import TurnHandle
from retinue.actors.turns import TurnControl
from retinue.protocol.messages import Completion, Message

__all__ = ["Event", "consume", "given_back_ids", "inputs_of", "take_held"]

Event = Message | Completion
"""One input: a message, or a child's completion."""


def inputs_of(turn: TurnControl) -> list[Event]:
    """The events a turn was handed as it started: its messages and children's completions."""
    return [m.completion if m.completion is not None else m for m in turn.messages]


def take_held(handle: TurnHandle, journal: Journal) -> list[Event]:
    """Take what an ending turn (its handle released) still holds: everything it must give
    back, in ``journal``'s command.

    That is what its waits received and did not consume, what was handed to
    them and not received yet, and its starting inputs unless its transcript
    stored them (or it had none).
    """
    events = [event for held in handle.turn.handover.take_back(None, journal) for event in held]
    if handle.holds_input:
        events += inputs_of(handle.turn)
    return events


def consume(handle: TurnHandle, journal: Journal) -> list[Event]:
    """The turn (its handle released) completed: what it received is consumed; return
    what was handed to its waits and never received (that goes back)."""
    handover = handle.turn.handover
    if handover.kept:  # nearly every turn: nothing kept (no call to say so)
        handover.consume(journal)
    back = handover.take_back(None, journal)
    return [event for held in back for event in held] if back else []


def given_back_ids(events: list[Event]) -> frozenset[str]:
    """The ids of the completions among ``events`` (what may not wake the turn that gave
    them back)."""
    return frozenset(e.id for e in events if isinstance(e, Completion))
