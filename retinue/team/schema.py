"""The team file's tables as strict msgspec structs, and which settings an agent inherits.

``[defaults]`` is :class:`Defaults`, each ``[agents.<name>]`` an
:class:`AgentSpec`, the file's top level :class:`TopTable`; every struct
forbids unknown keys. An agent's effective setting is its own table's, else
``[defaults]``'s (for the keys in :data:`INHERITED`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec

from retinue.protocol.supervision import Restart

__all__ = [
    "INHERITED",
    "LLM_KNOBS",
    "NAME",
    "PROFILE_KEYS",
    "AgentSpec",
    "Defaults",
    "FiniteSeconds",
    "NonNegativeInt",
    "Positive",
    "PositiveInt",
    "Tools",
    "TopTable",
    "effective_setting",
    "self_tools",
]

Positive = Annotated[float, msgspec.Meta(gt=0)]
FiniteSeconds = Annotated[float, msgspec.Meta(gt=0, le=1e9)]
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
Tools = str | list[str]

NAME = re.compile(r"[a-z0-9_]{1,40}")
"""An agent's (and the team's) name: 1-40 characters of a-z, 0-9 and _."""


class Defaults(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[defaults]`` table: settings every agent gets unless its own table sets them."""

    model: str | None = None
    """litellm model name, e.g. ``retinue/scripted`` (offline) or ``openai/gpt-4o-mini``."""
    tools: Tools | None = None
    """A preset (``read``, ``modify``, ``none``) or a list of tool names."""
    durability: Literal["full", "buffered"] = "full"
    """The store's durability mode (``retinue run --durability`` wins)."""
    workspace: str | None = None
    """The folder workspace tools work in, relative to the team file."""
    api_base: str | None = None
    """Base URL of an OpenAI-compatible server (litellm ``api_base``)."""
    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    retries: NonNegativeInt | None = None
    """Retries of a failed or rate-limited model call before the turn fails."""
    max_tool_calls: PositiveInt | None = None
    request_timeout_s: Positive | None = None
    turn_timeout_s: Positive | None = None
    tool_timeout_s: FiniteSeconds | None = None
    """Seconds one file tool or host tool call may take (the runner's default: 120)."""
    restart: Restart | None = None
    """The restart policy: ``{ max_restarts = 3, within_s = 60, backoff_s = 1, ... }``."""
    approve: list[str] | None = None
    """Tools whose calls a person must approve (``["*"]``: every tool but the coordinator's)."""
    effects: dict[str, str] | None = None
    """Effect classes by granted tool name: ``{ "payments.refund" = "idempotent" }``."""
    in_doubt: Literal["report", "approve"] | None = None
    """What an unsafe call in doubt after a crash gets: ``report`` (the default), ``approve``."""


class AgentSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ``[agents.<name>]`` table: a profile of the team."""

    model: str | None = None
    runner: str | None = None
    """Python code as the agent: ``"package.module:function"`` or ``"file.py:function"``
    (a file relative to the team file)."""
    instructions: str = ""
    description: str = ""
    subagents: list[str] = msgspec.field(default_factory=list)
    tools: Tools | None = None
    result_format: Literal["structured"] | None = None
    turn_timeout_s: Positive | None = None
    wake_on_completion: bool = True
    api_base: str | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    retries: NonNegativeInt | None = None
    max_tool_calls: PositiveInt | None = None
    request_timeout_s: Positive | None = None
    tool_timeout_s: FiniteSeconds | None = None
    restart: Restart | None = None
    approve: list[str] | None = None
    priority: Annotated[float, msgspec.Meta(gt=0, le=1e6)] | None = None
    """The weight of its model calls in the fair admission between trees (1 when unset)."""
    effects: dict[str, str] | None = None
    in_doubt: Literal["report", "approve"] | None = None


class TopTable(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The file's top level: its keys, and its tables still raw (each is decoded on its own)."""

    name: str | None = None
    lead: str | None = None
    description: str = ""
    limits: dict[str, Any] = msgspec.field(default_factory=dict)
    defaults: dict[str, Any] = msgspec.field(default_factory=dict)
    agents: dict[str, Any] = msgspec.field(default_factory=dict)
    mcp: dict[str, Any] = msgspec.field(default_factory=dict)
    providers: dict[str, Any] = msgspec.field(default_factory=dict)


INHERITED = (
    "model",
    "tools",
    "api_base",
    "temperature",
    "retries",
    "max_tool_calls",
    "request_timeout_s",
    "turn_timeout_s",
    "tool_timeout_s",
    "restart",
    "approve",
    "effects",
    "in_doubt",
)
"""Settings an agent inherits from ``[defaults]`` when its own table leaves them unset."""
LLM_KNOBS = (
    "api_base",
    "temperature",
    "retries",
    "max_tool_calls",
    "request_timeout_s",
    "tool_timeout_s",
)
"""Settings only an LLM runner reads: they go to the Profile's ``model_settings``."""
PROFILE_KEYS = (
    "model",
    "tools",
    "result_format",
    "turn_timeout_s",
    "restart",
    "approve",
    "priority",
    "effects",
    "in_doubt",
    *LLM_KNOBS,
)
"""The settings an agent's Profile is built with (the LLM knobs through ``model_settings``)."""


def self_tools(spec: AgentSpec, defaults: Defaults) -> Tools | None:
    """An agent's tools setting: its own, else ``[defaults]``'s."""
    return spec.tools if spec.tools is not None else defaults.tools


def effective_setting(spec: AgentSpec, defaults: Defaults, key: str) -> Any:
    """Return an agent's effective setting ``key``: its own table's, else ``[defaults]``'s."""
    value = getattr(spec, key)
    if value is None and key in INHERITED:
        value = getattr(defaults, key)
    return value
