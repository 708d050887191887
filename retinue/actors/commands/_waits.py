"""The commands of waits: a wait on an agent, a batch run and waited for, the runtime's
quiescence, and how a wait ends early (given up in time) or gives back what it took.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from retinue.actors.commands._base import HOST, Command, Host, Sender, TurnRef
from retinue.actors.commands._spawning import SpawnRequest
from retinue.errors import RetinueError
from retinue.protocol.messages import Completion, Message

__all__ = ["GiveBack", "GiveUpWait", "Idle", "RunMany", "Wait", "WaitKind"]

WaitKind = Literal["completion", "any"]
"""What a turn's wait takes: ``completion`` (only the child's) or ``any`` (a message or it)."""


@dataclass(frozen=True, slots=True)
class Idle(Command[None]):
    """Answer once the runtime is quiescent: no turn queued or running, no restart pending,
    no runner still running (an abandoned one included) and no command waiting behind
    this one. A turn parked for approval does not count: it waits for a person.

    Deferred like a host wait; a :class:`GiveUpWait` for the same future ends
    it with ``WaitTimeout``.
    """

    sender: Host = HOST


@dataclass(frozen=True, slots=True)
class Wait(Command[Message | Completion]):
    """Wait for the next event from an agent.

    From the host: the agent's oldest completion the host has not received
    (answered with a :class:`~retinue.protocol.messages.Completion`). From a
    turn: the next event from its child, a ``Message`` it sent (``kind="any"``)
    or its ``Completion``.

    ``lease`` (host waits only): the transition that marks the completion
    received also stores ``lease -> completion``, and a wait with a lease
    already stored is answered with that completion again (see
    :class:`AckLease`, :class:`ReleaseLease`).

    ``internal_lease``: ``lease`` is one the writer made for a wait of its own
    (the control socket's, for a client's wait without a lease), not a
    caller's key: ``dedup_key_max_length`` does not bound it. It never crosses
    the wire (:mod:`retinue.actors.commands._wire`): a caller cannot set it.
    """

    sender: Sender
    ref: str
    kind: WaitKind = "completion"
    field: str = "ref"
    lease: str | None = None
    internal_lease: bool = False


@dataclass(frozen=True, slots=True)
class RunMany(Command[list[Completion | RetinueError]]):
    """Spawn a batch of children of the sending turn and wait for them all (``run_many``).

    One transition spawns them (a refusal keeps its place, as with
    :class:`SpawnMany`) and registers the turn's wait, so no child's
    completion can arrive before it. Answered once every child has a
    completion pending for the turn, or is closed with none: in request
    order, each refusal as its error and each child's completion
    (``AgentClosed`` for a closed one), taken in one transition. A
    :class:`GiveUpWait` ends it early: a child still running keeps its place
    as ``WaitTimeout``.

    ``messages``: the wait also takes the messages the batch's children sent
    the turn meanwhile, in the same transition; they follow the entries in
    the answer, oldest first (``spawn_subagent`` with ``wait=true`` returns
    them with its child's result).
    """

    sender: TurnRef
    requests: Sequence[SpawnRequest]
    messages: bool = False


@dataclass(frozen=True, slots=True)
class GiveUpWait(Command[None]):
    """A wait ran out of time: end it with ``WaitTimeout`` unless it was answered."""

    after_close: ClassVar[bool] = True
    live_sender: ClassVar[bool] = False
    sender: Sender
    future: concurrent.futures.Future[Any]
    seconds: float


@dataclass(frozen=True, slots=True)
class GiveBack(Command[None]):
    """A waiter lost what it was handed (its wait was cancelled): take ``events`` back.

    To the host (``recipient_id`` None): a completion becomes the next one a
    host wait on its agent receives; messages are unread again in the host's
    inbox, in order. To an agent: a completion is pending for it again (or
    for its nearest live ancestor, if it closed meanwhile) and a message is
    unread again; its next wait or turn receives them.
    """

    after_close: ClassVar[bool] = True
    recipient_id: str | None
    events: tuple[Message | Completion, ...]
    sender: Host = HOST
