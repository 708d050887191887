"""The commands that spawn agents: one child, or a batch in one transition."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from retinue.actors.commands._base import Command, Sender
from retinue.errors import RetinueError
from retinue.protocol.messages import AgentInfo, Completion

__all__ = ["Fork", "Run", "Spawn", "SpawnMany", "SpawnRequest"]


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    """One child of a :class:`SpawnMany` or :class:`RunMany` batch (``name_field`` and
    ``idempotency_key``: see :class:`Spawn`)."""

    profile: str
    task: str
    name: str | None = None
    name_field: str = "name"
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class Spawn(Command[AgentInfo]):
    """Record a new agent and queue its first turn.

    A turn spawns below itself; the host below ``parent`` (a live path or id).
    ``name_field`` is the caller's argument that held ``name`` (``task_name``
    from a coordinator tool), which an error about a bad name names.
    """

    sender: Sender
    profile: str
    task: str
    name: str | None = None
    parent: str | None = None
    idempotency_key: str | None = None
    name_field: str = "name"


@dataclass(frozen=True, slots=True)
class Run(Command[Completion]):
    """Spawn an agent as :class:`Spawn` does and wait for its first completion, in one command.

    The host sends it (``Runtime.run``). Its transition records the agent and
    registers the host's wait on it (as a host :class:`~retinue.actors.commands.Wait`
    with ``lease``), so the spawn's writes commit in that one transition and
    the answer comes at the agent's settle: the completion, or what the wait
    ends with. A refused spawn, or a refused wait (a bad lease), changes nothing.
    A :class:`~retinue.actors.commands.GiveUpWait` for the same future ends it with
    ``WaitTimeout`` naming the agent's path. ``internal_lease``: as a
    :class:`~retinue.actors.commands.Wait`'s (the writer's own lease, never on the wire).
    """

    sender: Sender
    profile: str
    task: str
    name: str | None = None
    parent: str | None = None
    idempotency_key: str | None = None
    lease: str | None = None
    name_field: str = "name"
    internal_lease: bool = False


@dataclass(frozen=True, slots=True)
class SpawnMany(Command[list[AgentInfo | RetinueError]]):
    """Spawn a batch of children of the sender in one transition."""

    sender: Sender
    requests: Sequence[SpawnRequest]


@dataclass(frozen=True, slots=True)
class Fork(Command[AgentInfo]):
    """Record a settled copy of agent ``ref`` as of its generation ``at`` (None: now).

    The copy goes below ``parent`` (None: beside ``ref``, under its parent),
    named ``name`` (None: ``<name>_fork<n>``); with ``tree`` its subtree is
    copied too, each agent as it was when that generation ended. The host sends it.
    """

    sender: Sender
    ref: str
    at: int | None = None
    name: str | None = None
    parent: str | None = None
    tree: bool = True
