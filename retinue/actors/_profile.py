"""Profiles: the kinds of agent a team defines, and what each may spawn."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from retinue.errors import ConfigurationError, InvalidArgument
from retinue.protocol.checks import check_text
from retinue.protocol.effects import Effect, InDoubtMode, check_effects, check_in_doubt
from retinue.protocol.supervision import Restart, check_approve
from retinue.protocol.tools import resolve_tools

__all__ = ["AnyRunner", "Profile"]

AnyRunner = Callable[..., str | Awaitable[str]]
"""What a profile's ``runner`` holds: a :data:`retinue.actors.turns._turn.Runner` (typed
loosely here, so the profile does not depend on the turn context that depends on it)."""

RESULT_FORMATS = (None, "structured")


def _check_storable(name: str, what: str) -> None:
    """Raise ``ConfigurationError`` if ``name`` cannot be stored (a lone surrogate)."""
    try:
        check_text(name, what)
    except InvalidArgument as exc:
        raise ConfigurationError(str(exc)) from None


@dataclass(frozen=True)
class Profile:
    """One kind of agent.

    ``subagents`` names the profiles this one may spawn (the delegation graph,
    checked at ``Runtime.open``); ``runner`` runs its turns (the runtime's
    default runner when None); ``wake_on_completion`` gives an idle agent a
    follow-up turn when a child's completion arrives; ``turn_timeout_s``
    bounds one turn's running time: past it the supervisor interrupts the
    turn and it settles ``failed`` with ``TurnTimeout: turn exceeded N s``.

    LLM fields: ``model`` (a litellm model name such as ``"openai/gpt-4o-mini"``
    or ``"retinue/scripted"``) gives a profile without a runner a
    :class:`~retinue.llm.LiteLLMRunner` for that model, built with
    ``model_settings`` as its keyword arguments (``api_base``, ``api_key``,
    ``temperature``, ``max_tool_calls``, ``retries`` ...). A profile with
    neither ``runner`` nor ``model`` inherits the model and settings of the
    first profile (in definition order) that lists it in ``subagents`` and has
    one. ``tools`` is what an LLM runner may offer besides the coordinator
    tools: a preset (``"read"``, ``"modify"``, ``"none"``), an exact list of
    tool names, or None to inherit (see :mod:`retinue.protocol.tools`); a
    child's tools must lie within its parent's, checked at ``Runtime.open``
    and at every spawn. ``result_format="structured"`` asks the model for the
    structured result contract.

    Supervision fields: ``restart`` (a :class:`~retinue.protocol.supervision.Restart`
    policy; None: a failed turn stays failed) restarts a failed (or lost)
    turn after a backoff; ``approve`` names the tools whose calls a person
    must approve before they run (``["*"]``: every tool but the coordinator
    tools).

    Side effects: ``effects`` overrides the effect class of tools by the
    name they are granted by (``{"payments.refund": "idempotent"}``; see
    :mod:`retinue.protocol.effects`); ``in_doubt`` says what happens to an
    unsafe tool call found in doubt after a crash: ``"report"`` (the model is
    told, the default) or ``"approve"`` (a person decides whether it runs
    again).

    ``priority`` weighs the profile's model calls in the fair admission
    between top-level trees under provider limits
    (:class:`~retinue.protocol.provider_limits.ProviderLimit`): a call of a
    profile with priority 2 costs its tree half a turn, so that tree gets
    twice the share of one whose calls have priority 1 (the default).
    """

    name: str
    _: KW_ONLY
    subagents: Sequence[str] = field(default=())
    runner: AnyRunner | None = None
    instructions: str = ""
    wake_on_completion: bool = True
    description: str = ""
    model: str | None = None
    tools: str | Sequence[str] | None = None
    result_format: str | None = None
    model_settings: Mapping[str, Any] = field(default_factory=dict, hash=False)
    turn_timeout_s: float | None = None
    restart: Restart | None = None
    approve: Sequence[str] = field(default=())
    priority: float = 1.0
    effects: Mapping[str, Effect] = field(default_factory=dict, hash=False)
    in_doubt: InDoubtMode = "report"

    def __post_init__(self) -> None:
        """Check the fields.

        Raises:
            ConfigurationError: an empty or blank name, a non-string subagent, a
                name with a lone surrogate (it could not be stored), a runner
                that is not callable, an empty or non-string model, an unknown
                result format, or bad ``tools`` (not a preset, a coordinator
                tool name, a malformed name), or a turn_timeout_s that is not a
                positive number; a restart that is not a Restart, an approve
                that is not a list of tool names; a priority that is not a
                positive number; ``effects`` that do not map tool names to
                effect classes; an ``in_doubt`` other than report and approve.
        """
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError("a profile name must be a non-empty string")
        _check_storable(self.name, "a profile name")
        subagents = self.subagents
        if isinstance(subagents, str) or not isinstance(subagents, Iterable):
            raise ConfigurationError(
                f"profile {self.name!r}: subagents must be a list of profile names"
            )
        names = tuple(subagents)
        if not all(isinstance(n, str) and n for n in names):
            raise ConfigurationError(f"profile {self.name!r}: subagents must be non-empty strings")
        for sub in names:
            _check_storable(sub, f"profile {self.name!r}: a subagent name")
        object.__setattr__(self, "subagents", names)
        if self.runner is not None and not callable(self.runner):
            raise ConfigurationError(f"profile {self.name!r}: runner must be callable")
        self._check_turn_timeout()
        self._check_llm_fields()
        if self.restart is not None and not isinstance(self.restart, Restart):
            raise ConfigurationError(
                f"profile {self.name!r}: restart must be a retinue.Restart or None, "
                f"not {type(self.restart).__name__}"
            )
        object.__setattr__(self, "approve", check_approve(self.name, self.approve))
        self._check_priority()
        object.__setattr__(self, "effects", check_effects(self.name, self.effects))
        object.__setattr__(self, "in_doubt", check_in_doubt(self.name, self.in_doubt))

    def _check_priority(self) -> None:
        priority = self.priority
        if (
            isinstance(priority, bool)
            or not isinstance(priority, int | float)
            or not math.isfinite(priority)
            or not 0 < priority <= 1e6
        ):
            raise ConfigurationError(
                f"profile {self.name!r}: priority must be a positive number (1 by default, "
                f"at most 1e6), not {priority!r}"
            )
        object.__setattr__(self, "priority", float(priority))

    def _check_turn_timeout(self) -> None:
        timeout = self.turn_timeout_s
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ConfigurationError(
                f"profile {self.name!r}: turn_timeout_s must be a positive number of seconds "
                f"or None, not {timeout!r}"
            )

    def _check_llm_fields(self) -> None:
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ConfigurationError(f"profile {self.name!r}: model must be a non-empty string")
        if self.result_format not in RESULT_FORMATS:
            raise ConfigurationError(
                f"profile {self.name!r}: result_format must be 'structured' or None, "
                f"not {self.result_format!r}"
            )
        resolved = resolve_tools(self.tools, owner=self.name)
        if resolved is not None and not isinstance(self.tools, str):
            object.__setattr__(self, "tools", resolved)  # a list becomes a tuple, deduplicated
        if not isinstance(self.model_settings, Mapping):
            raise ConfigurationError(f"profile {self.name!r}: model_settings must be a mapping")
        object.__setattr__(self, "model_settings", dict(self.model_settings))
