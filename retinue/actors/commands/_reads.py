"""The commands that read the tree and change nothing: an agent, every agent, one in full,
a turn's children, the store's backlog.
"""

from __future__ import annotations

from dataclasses import dataclass

from retinue.actors.commands._base import Command, Sender, TurnRef
from retinue.protocol.details import AgentCounts, AgentDetail, Backlog
from retinue.protocol.messages import AgentInfo

__all__ = ["Agents", "Children", "CountAgents", "CountBacklog", "Get", "Inspect"]


@dataclass(frozen=True, slots=True)
class Get(Command[AgentInfo]):
    """Return one agent by id or live path."""

    sender: Sender
    ref: str
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class CountBacklog(Command[Backlog]):
    """Count the unread messages and pending completions of the whole store."""

    sender: Sender


@dataclass(frozen=True, slots=True)
class CountAgents(Command[AgentCounts]):
    """Count the store's agents by state and the live ones by profile."""

    sender: Sender


@dataclass(frozen=True, slots=True)
class Agents(Command[list[AgentInfo]]):
    """Return every agent, oldest first (closed ones only if asked); with ``limit`` or
    ``after``, one page of them by path (:mod:`retinue.protocol.paging`)."""

    sender: Sender
    include_closed: bool = False
    limit: int | None = None
    after: str | None = None


@dataclass(frozen=True, slots=True)
class Inspect(Command[AgentDetail]):
    """Return one agent in full: its mailbox, pending completions and transcript tail."""

    sender: Sender
    ref: str
    transcript_tail: int = 20
    field: str = "ref"


@dataclass(frozen=True, slots=True)
class Children(Command[list[AgentInfo]]):
    """Return the sending turn's live children."""

    sender: TurnRef
