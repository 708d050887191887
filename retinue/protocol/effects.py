"""Side effects of tool calls: effect classes, idempotency keys, calls in doubt (pure rules).

Every tool call a model agent makes is journaled (its intent is stored
before it runs, its result with the step that answers it): a call whose
intent is stored without a result was running when its turn stopped (a
crash, an interrupt) and is **in doubt**: it may or may not have taken
effect. What happens to it depends on its tool's :data:`Effect` class:

- ``"read"`` (it only reads): run again;
- ``"idempotent"`` (a second run with the same key changes nothing more):
  run again with the same idempotency key;
- ``"unsafe"`` (anything else, the default): never run again behind the
  model's back; the model reads :func:`in_doubt_result`, or, with
  ``Profile(in_doubt="approve")``, a person decides (an approval request
  that says the call is in doubt).

A call that needs approval is ``unsafe`` whatever its tool's class: an
approved call is an unsafe call a person approved.

Every call has a stable idempotency key (:func:`idempotency_key`), from the
agent id, the turn's generation, the step and the call's index in its step
(never from the provider's call id, which a model may repeat). A tool reads
it from :class:`ToolCall`; ``bash`` gets it as :data:`IDEMPOTENCY_ENV`, an
MCP call in its request's ``_meta`` under :data:`MCP_META_KEY`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Literal

import msgspec

from retinue.errors import ConfigurationError
from retinue.protocol.tools import covers, split_mcp_name

__all__ = [
    "BUILTIN_EFFECTS",
    "COORDINATOR_EFFECTS",
    "EFFECTS",
    "IDEMPOTENCY_ENV",
    "IN_DOUBT_ACTIONS",
    "IN_DOUBT_MODES",
    "MCP_META_KEY",
    "Effect",
    "InDoubtAction",
    "InDoubtMode",
    "ToolCall",
    "check_effect",
    "check_effect_names",
    "check_effects",
    "check_in_doubt",
    "effect_of",
    "idempotency_key",
    "in_doubt_action",
    "in_doubt_result",
    "mcp_effect",
    "not_run_result",
]

Effect = Literal["read", "idempotent", "unsafe"]
"""What a second run of a tool call can do: nothing (``read``), nothing more with the same
idempotency key (``idempotent``), or anything (``unsafe``)."""
EFFECTS: tuple[Effect, ...] = ("read", "idempotent", "unsafe")
"""The effect classes, safest first."""
InDoubtMode = Literal["report", "approve"]
"""``Profile.in_doubt``: an unsafe call in doubt is reported to the model, or sent to a person."""
IN_DOUBT_MODES: tuple[InDoubtMode, ...] = ("report", "approve")
"""The values of ``Profile.in_doubt``."""
InDoubtAction = Literal["rerun", "reported", "approval"]
"""What was done with a call in doubt (``ToolCallInDoubt.action``)."""
IN_DOUBT_ACTIONS: tuple[InDoubtAction, ...] = ("rerun", "reported", "approval")
"""Every :data:`InDoubtAction`."""

IDEMPOTENCY_ENV = "RETINUE_IDEMPOTENCY_KEY"
"""The environment variable a ``bash`` call finds its idempotency key in."""
MCP_META_KEY = "retinue/idempotency_key"
"""The key of an MCP ``tools/call`` request's ``_meta`` that carries the idempotency key."""

BUILTIN_EFFECTS: Mapping[str, Effect] = MappingProxyType(
    {
        "read_file": "read",
        "list_dir": "read",
        "grep": "read",
        "find": "read",
        "write_file": "idempotent",  # the same path and content again change nothing
        "edit_file": "unsafe",  # a replacement applied twice may apply again
        "bash": "unsafe",
    }
)
"""The effect class of each built-in workspace tool."""
COORDINATOR_EFFECTS: Mapping[str, Effect] = MappingProxyType(
    {
        "spawn_subagent": "idempotent",  # the spawn carries the call's key: one child
        "spawn_subagents": "idempotent",  # each entry's spawn carries a key of its own
        "send_message": "idempotent",  # the message carries the call's key as its dedup key
        "wait_agent": "read",  # what a lost turn took is given back to the next one
        "list_agents": "read",
        "interrupt_agent": "idempotent",
        "close_agent": "idempotent",
    }
)
"""The coordinator tools' classes: each is exactly once through the supervisor's keys."""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One tool call as a tool sees it (a ``@tool`` function's ``call: retinue.ToolCall``).

    ``idempotency_key`` is stable across the call's runs: a call in doubt run
    again (``attempt`` 2 and up, ``in_doubt`` true) carries the key its first
    run had, so the tool, or the service behind it, can tell a second run of
    one call from a new call. ``tool`` is the name the tool is granted by,
    ``call_id`` the model's id of the call, ``effect`` the class it ran under;
    ``agent_id``, ``generation``, ``step`` and ``index`` (the call's place in
    its step) are what the key is made of.
    """

    idempotency_key: str
    attempt: int = 1
    in_doubt: bool = False
    tool: str = ""
    call_id: str = ""
    effect: Effect = "unsafe"
    agent_id: str = ""
    generation: int = 0
    step: int = 0
    index: int = 0


def idempotency_key(agent_id: str, generation: int, step: int, index: int) -> str:
    """Return the idempotency key of call ``index`` (from 0) of step ``step`` (from 1) of
    turn ``generation`` of agent ``agent_id``: ``<agent id>-<generation>-<step>-<index>``."""
    return f"{agent_id}-{generation}-{step}-{index}"


def check_effect(owner: str, value: object) -> Effect:
    """Return ``value`` as an effect class.

    Raises:
        ConfigurationError: it is not ``"read"``, ``"idempotent"`` or ``"unsafe"``
            (``owner`` names where it was given).
    """
    if value not in EFFECTS:
        raise ConfigurationError(
            f"{owner}: effect must be 'read', 'idempotent' or 'unsafe', not {value!r}"
        )
    effect: Effect = value
    return effect


def check_effects(owner: str, effects: object) -> dict[str, Effect]:
    """Return a profile's ``effects`` (granted tool name -> effect class) as a dict.

    Raises:
        ConfigurationError: not a mapping of non-empty tool names to effect classes.
    """
    if not isinstance(effects, Mapping):
        raise ConfigurationError(
            f"profile {owner!r}: effects must be a mapping of tool names to "
            f"'read', 'idempotent' or 'unsafe', not {effects!r}"
        )
    out: dict[str, Effect] = {}
    for name, value in effects.items():
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(
                f"profile {owner!r}: effects must be keyed by tool names, not {name!r}"
            )
        out[name] = check_effect(f"profile {owner!r}: effects[{name!r}]", value)
    return out


def check_in_doubt(owner: str, value: object) -> InDoubtMode:
    """Return a profile's ``in_doubt`` setting.

    Raises:
        ConfigurationError: it is not ``"report"`` or ``"approve"``.
    """
    if value not in IN_DOUBT_MODES:
        raise ConfigurationError(
            f"profile {owner!r}: in_doubt must be 'report' (the model is told) or 'approve' "
            f"(a person decides), not {value!r}"
        )
    mode: InDoubtMode = value
    return mode


def in_doubt_action(effect: str, mode: str) -> InDoubtAction:
    """What is done with a call of class ``effect`` found in doubt, under ``Profile.in_doubt``
    ``mode``: a read or idempotent call runs again, an unsafe one is reported or asked for."""
    if effect in ("read", "idempotent"):
        return "rerun"
    return "approval" if mode == "approve" else "reported"


def in_doubt_result(tool: str, key: str | None) -> str:
    """The result the model reads for an unsafe call in doubt (not run again).

    ``key`` is the call's idempotency key (None for a call stored before calls had keys).
    """
    return json.dumps(
        {
            "error": (
                f"in doubt: {tool} was running when the process stopped; it may or may not "
                "have taken effect. Check before you call it again."
            ),
            "idempotency_key": key,
        },
        ensure_ascii=False,
    )


def not_run_result(tool: str) -> str:
    """The result of a call that never started: its step waited for approvals and its turn
    ended first (an interrupt, a close, a timeout)."""
    return json.dumps(
        {"error": f"not run: {tool} waited for its step's approvals and the turn ended first"},
        ensure_ascii=False,
    )


def mcp_effect(annotations: object) -> Effect:
    """The effect class of an MCP tool from its ``annotations``: ``readOnlyHint`` -> read,
    ``idempotentHint`` -> idempotent, otherwise unsafe (hints are read as the SDK gives them,
    ``read_only_hint`` / ``idempotent_hint``, or as a JSON object's keys)."""
    if annotations is None:
        return "unsafe"

    def hint(snake: str, camel: str) -> bool:
        if isinstance(annotations, Mapping):
            return annotations.get(camel, annotations.get(snake)) is True
        return getattr(annotations, snake, getattr(annotations, camel, None)) is True

    if hint("read_only_hint", "readOnlyHint"):
        return "read"
    if hint("idempotent_hint", "idempotentHint"):
        return "idempotent"
    return "unsafe"


def effect_of(granted: str, declared: Effect, overrides: Mapping[str, Effect]) -> Effect:
    """The class a call of the tool granted as ``granted`` runs under: the profile's
    override for that name (or for its MCP server's ``<server>.*``), else ``declared``."""
    if granted in overrides:
        return overrides[granted]
    split = split_mcp_name(granted)
    if split is not None and f"{split[0]}.*" in overrides:
        return overrides[f"{split[0]}.*"]
    return declared


def check_effect_names(owner: str, effects: Iterable[str], tools: Iterable[str]) -> None:
    """Check that each ``effects`` key names a tool the profile has (its effective ``tools``)
    or ``<server>.*`` for an MCP server it has tools of: an override of a misspelt name
    would silently leave the tool's own class in force.

    Raises:
        ConfigurationError: a key names no tool of the profile (a coordinator tool
            included: those are exactly once already).
    """
    has = tuple(tools)
    servers = {split[0] for name in has if (split := split_mcp_name(name)) is not None}
    for name in effects:
        if covers(name, has):
            continue
        split = split_mcp_name(name)
        if split is not None and split[1] == "*" and split[0] in servers:
            continue
        offered = ", ".join(has) or "none"
        raise ConfigurationError(
            f"profile {owner!r}: effects names {name!r}, which is not one of its tools "
            f"({offered}); name a tool it has or '<server>.*' for an MCP server it uses"
        )
