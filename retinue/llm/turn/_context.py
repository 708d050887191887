"""What the LLM layer needs of a turn: the :class:`TurnContext` protocol.

The turn's private control (:class:`~retinue.actors.turns._control.TurnControl`,
which a model runner reaches from the runner's :class:`retinue.Turn` with
:func:`~retinue.actors.turns._turn.control_of`) satisfies it; the runner, the
toolbox and the coordinator tools are typed against it, so they read (and a
test can supply) exactly what they use: the agent and its task, the turn's input, its limits
and profile, the watch its model and tool calls are reported on, and the
awaitable coordinator operations with the name the tools' errors give each
reference (``field=``, ``name_field=``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from retinue.actors import Profile
from retinue.actors.commands import Command, LlmStarted, LlmStep, TurnRef
from retinue.actors.events import TurnWatch
from retinue.actors.turns import BatchRequest
from retinue.errors import RetinueError
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message

__all__ = ["TurnContext"]

R = TypeVar("R")


class TurnContext(Protocol):
    """One agent's turn, as a model runner and its tools use it."""

    agent: AgentInfo
    task: str
    reason: str
    messages: list[Message]
    limits: Limits
    profile: Profile
    instructions: str
    ref: TurnRef
    watch: TurnWatch
    llm_state: LlmStarted | None  # the stored state handed at the turn's start (read once)
    last_step: LlmStep | None  # the last step, committed with the turn's settle

    async def request_async(self, command: Command[R]) -> R:
        """Send one command of this turn to the supervisor; return its answer."""
        ...

    async def spawn_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
        name_field: str = "name",
    ) -> AgentInfo:
        """Spawn a child; its completion arrives later."""
        ...

    async def run_many_async(
        self,
        requests: Sequence[BatchRequest],
        timeout: float | None = None,
        *,
        name_field: str = "name",
        keys: Sequence[str | None] | None = None,
    ) -> list[Completion | RetinueError]:
        """Run a batch of children (each spawn with its idempotency key) and wait for them all."""
        ...

    async def run_one_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        name_field: str = "name",
    ) -> tuple[Completion | RetinueError, list[Message]]:
        """Spawn one child and wait for it in one command; return it with its messages."""
        ...

    async def send_async(
        self, ref: str, content: str, *, dedup_key: str | None = None, field: str = "ref"
    ) -> Message:
        """Send a message to the parent, a child or a sibling."""
        ...

    async def wait_async(
        self, ref: str, timeout: float | None = None, *, field: str = "ref"
    ) -> Message | Completion:
        """Return the next event from a child."""
        ...

    async def children_async(self) -> list[AgentInfo]:
        """Return the live children."""
        ...

    async def interrupt_async(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Interrupt a descendant's turn."""
        ...

    async def close_async(self, ref: str, *, field: str = "ref") -> AgentInfo:
        """Close a descendant without live children."""
        ...

    async def close_tree_async(self, ref: str, *, field: str = "ref") -> list[AgentInfo]:
        """Close a descendant's whole subtree."""
        ...
