"""Profiles: the kinds of agent a team defines, and what each may spawn."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING

from retinue.errors import ConfigurationError

if TYPE_CHECKING:
    from retinue.actors.turn import Turn

__all__ = ["Profile", "Runner"]

Runner = Callable[["Turn"], str]
"""Anything that takes a turn context and returns the turn's output text."""


@dataclass(frozen=True)
class Profile:
    """One kind of agent.

    ``subagents`` names the profiles this one may spawn (the delegation graph,
    checked at ``Runtime.open``); ``runner`` runs its turns (the runtime's
    default runner when None); ``wake_on_completion`` gives an idle agent a
    follow-up turn when a child's completion arrives.
    """

    name: str
    _: KW_ONLY
    subagents: Sequence[str] = field(default=())
    runner: Runner | None = None
    instructions: str = ""
    wake_on_completion: bool = True
    description: str = ""

    def __post_init__(self) -> None:
        """Check the fields.

        Raises:
            ConfigurationError: an empty name, a non-string subagent or a runner
                that is not callable.
        """
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError("a profile name must be a non-empty string")
        subagents = self.subagents
        if isinstance(subagents, str) or not isinstance(subagents, Iterable):
            raise ConfigurationError(
                f"profile {self.name!r}: subagents must be a list of profile names"
            )
        names = tuple(subagents)
        if not all(isinstance(n, str) and n for n in names):
            raise ConfigurationError(f"profile {self.name!r}: subagents must be non-empty strings")
        object.__setattr__(self, "subagents", names)
        if self.runner is not None and not callable(self.runner):
            raise ConfigurationError(f"profile {self.name!r}: runner must be callable")
