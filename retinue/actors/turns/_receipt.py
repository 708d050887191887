"""A turn's side of its waits: what it claims of a wait's answer, and what it gives back.

The supervisor hands the events a turn's wait takes to the turn's
:class:`~retinue.actors.calls._handover.Handover` ledger as it answers the wait; the
turn's interrupt takes back what the runner has not received. A
:class:`TurnReceipt` is the engine's :class:`~retinue.actors.calls._engine.Receipt`
for one wait of a turn: the runner receives the answer only if it was not
taken back, and a cancelled async wait gives back what it took.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from retinue.actors.calls import Engine, Handover, handed_events
from retinue.actors.commands import GiveBack
from retinue.errors import TurnInterrupted
from retinue.protocol.messages import AgentInfo, Completion, Message

__all__ = ["TurnReceipt"]


class TurnReceipt:
    """A turn's receipt: the supervisor hands a wait's events to the turn's ledger, and an
    interrupt takes back what the runner has not received (see ``TurnControl.handover``)."""

    __slots__ = ("agent", "engine", "handover", "keep", "went_back")

    def __init__(
        self,
        handover: Handover[list[Message | Completion]],
        engine: Engine,
        agent: AgentInfo,
        went_back: str,
        keep: bool = False,
    ) -> None:
        """Receive for the turn of ``agent`` whose ledger is ``handover``; ``went_back`` ends
        the error of a wait an interrupt emptied; ``keep``: the runner has yet to store what
        it receives (a model turn), so the ledger keeps it until then."""
        self.handover = handover
        self.engine = engine
        self.agent = agent
        self.went_back = went_back
        self.keep = keep

    def expect(self, future: concurrent.futures.Future[Any]) -> None:
        """Nothing to do: the supervisor records what it hands, as it hands it."""

    def abandon(self, future: concurrent.futures.Future[Any]) -> bool:
        """Always: the ledger decides at give-back time what is still unseen."""
        return True

    def give_back(self, future: concurrent.futures.Future[Any]) -> None:
        """The task never saw what this wait took: the events go back to the agent."""
        events = [e for held in self.handover.take_back(future) for e in held]
        if events:
            self.engine.tell(GiveBack(self.agent.id, tuple(events)))

    def accept(self, future: concurrent.futures.Future[Any], value: Any, in_task: bool) -> Any:
        """Return the wait's ``value`` unless the turn's interrupt took its events back.

        Raises:
            asyncio.CancelledError: (an async turn) they went back: the task is cancelled.
            TurnInterrupted: (a sync turn) they went back.
        """
        if not handed_events(value) or self.handover.receive(future, keep=self.keep):
            return value
        if in_task:
            raise asyncio.CancelledError
        raise TurnInterrupted(f"{self.agent.path} was interrupted; {self.went_back}")
