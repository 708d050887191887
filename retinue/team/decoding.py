"""The steps that decode and check a team file, each naming where the file is wrong.

Every step raises :class:`~retinue.errors.TeamFileError` with the file's
label, the table and the key (``team.toml: [agents.lead] key 'modle':
unknown key; ...``); :meth:`~retinue.team.Team.from_toml` runs them in order.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from typing import Any

import msgspec

from retinue.errors import (
    DelegationCycleError,
    DelegationGraphError,
    InvalidLimits,
    RetinueError,
    TeamFileError,
)
from retinue.protocol.graph import validate_graph
from retinue.protocol.limits import Limits
from retinue.protocol.provider_limits import (
    ProviderLimit,
    merge_provider_limits,
    provider_limits_from_env,
)
from retinue.protocol.validation import decode_table
from retinue.team.schema import NAME, AgentSpec, TopTable

__all__ = [
    "check_delegation",
    "choose_lead",
    "decode_agents",
    "decode_limits",
    "decode_providers",
    "decode_top",
    "team_name",
]


def _fields(cls: type[msgspec.Struct]) -> str:
    return ", ".join(cls.__struct_fields__)


def decode_top(label: str, text: str) -> TopTable:
    """Parse the TOML text and decode its top level (its tables stay raw).

    Raises:
        TeamFileError: not valid TOML, or an unknown top-level key.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TeamFileError(label, "", "", f"not valid TOML: {exc}") from None
    return decode_table(label, "", data, TopTable)


def decode_limits(label: str, raw: dict[str, Any], environ: bool) -> Limits:
    """Return the ``[limits]`` over ``Limits.from_env()`` (``environ``) or the defaults.

    Raises:
        TeamFileError: an unknown key, or a value :class:`Limits` refuses.
    """
    base = Limits.from_env() if environ else Limits()
    for key in raw:
        if key not in Limits.__struct_fields__:
            raise TeamFileError(label, "limits", key, f"unknown key; known keys: {_fields(Limits)}")
    try:
        return base.replace(**raw)
    except (InvalidLimits, RetinueError) as exc:
        key = next((k for k in raw if f"Limits.{k} " in str(exc)), "")
        raise TeamFileError(label, "limits", key, str(exc)) from None


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_FIELD_IN = re.compile(r"\bProviderLimit\.(\w+)")


def decode_providers(
    label: str, raw: Mapping[str, Any], environ: bool
) -> tuple[ProviderLimit, ...]:
    """Return the ``[providers."<match>"]`` limits, over ``RETINUE_PROVIDER_LIMITS`` (``environ``).

    A table replaces the environment's limit of the same match whole.

    Raises:
        TeamFileError: a table with an unknown key (``match`` too: the table's
            name is its match), a bad value or a bad match, or two tables
            naming the same match (differing only in case or a trailing ``/``);
            the message names the table and the key.
        InvalidLimits: the environment variable is unusable.
    """
    base = provider_limits_from_env() if environ else ()
    limits: dict[str, ProviderLimit] = {}
    for match, table in raw.items():
        where = "providers." + (match if _BARE_KEY.fullmatch(match) else json.dumps(match))
        if isinstance(table, dict):
            _check_provider_keys(label, where, table)
            table = {"match": match, **table}
        try:
            limit = decode_table(label, where, table, ProviderLimit)
        except TeamFileError as exc:
            named = _FIELD_IN.search(exc.problem)
            if exc.key or named is None or named[1] == "match":
                raise
            raise TeamFileError(label, where, named[1], exc.problem) from None
        if limit.match in limits:
            raise TeamFileError(
                label,
                where,
                "",
                f"names {limit.match!r} as another [providers] table does "
                f"(they differ only in case or a trailing /); keep one",
            )
        limits[limit.match] = limit
    return merge_provider_limits(base, limits.values())


def _check_provider_keys(label: str, where: str, table: Mapping[str, Any]) -> None:
    """Refuse a key that is not a provider limit's setting (``match`` too: the table names it).

    Raises:
        TeamFileError: the unknown key, with the known ones.
    """
    for key in table:
        if key == "match":
            raise TeamFileError(
                label, where, key, "unknown key; the table's name is what it matches"
            )
        if key not in ProviderLimit.FIELDS:
            raise TeamFileError(
                label, where, key, f"unknown key; known keys: {', '.join(ProviderLimit.FIELDS)}"
            )


def decode_agents(label: str, raw: Mapping[str, Any]) -> dict[str, AgentSpec]:
    """Decode the ``[agents.<name>]`` tables, in the file's order.

    Raises:
        TeamFileError: no agent, a bad agent name, a bad table, or a subagent
            that is not an agent of the team.
    """
    if not raw:
        raise TeamFileError(label, "agents", "", "a team needs at least one [agents.<name>]")
    agents: dict[str, AgentSpec] = {}
    for name, table in raw.items():
        where = f"agents.{name}"
        if not NAME.fullmatch(name):
            raise TeamFileError(
                label, where, "", "an agent name is 1-40 characters of a-z, 0-9 and _"
            )
        agents[name] = decode_table(label, where, table, AgentSpec)
    for name, spec in agents.items():
        for child in spec.subagents:
            if child not in agents:
                raise TeamFileError(
                    label,
                    f"agents.{name}",
                    "subagents",
                    f"{child!r} is not an agent of this team (agents: {', '.join(agents)})",
                )
    return agents


def check_delegation(label: str, agents: Mapping[str, AgentSpec], depth_cap: int) -> None:
    """Check the delegation graph: no cycle, no chain deeper than ``depth_cap``.

    Raises:
        TeamFileError: a cycle (named at its first agent) or a chain too deep.
    """
    try:
        validate_graph({n: s.subagents for n, s in agents.items()}, cap=depth_cap)
    except DelegationCycleError as exc:
        raise TeamFileError(label, f"agents.{exc.cycle[0]}", "subagents", str(exc)) from None
    except DelegationGraphError as exc:
        raise TeamFileError(
            label,
            "agents",
            "subagents",
            f"{exc}; shorten the chain or raise [limits] depth_cap",
        ) from None


def choose_lead(label: str, lead: str | None, agents: Mapping[str, AgentSpec]) -> str:
    """Return the lead: the file's ``lead``, else its first agent.

    Raises:
        TeamFileError: ``lead`` is not an agent of the team.
    """
    chosen = lead if lead is not None else next(iter(agents))
    if chosen not in agents:
        raise TeamFileError(
            label, "", "lead", f"{chosen!r} is not an agent of this team ({', '.join(agents)})"
        )
    return chosen


def team_name(label: str, name: str | None, lead: str) -> str:
    """Return the team's name (its top-level agent's): the file's ``name``, else the lead's.

    Raises:
        TeamFileError: the name is not an agent name, or is ``root``.
    """
    chosen = name if name is not None else lead
    if not NAME.fullmatch(chosen) or chosen == "root":
        raise TeamFileError(
            label, "", "name", "the team name is an agent name: 1-40 characters of a-z, 0-9, _"
        )
    return chosen
