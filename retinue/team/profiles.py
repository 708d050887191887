"""From a checked team to :class:`~retinue.actors._profile.Profile` objects.

Each agent's effective settings (its own table's, else ``[defaults]``'s) go to
its Profile: the LLM knobs as ``model_settings``, the rest as Profile fields;
an agent's ``runner`` key imports its Python runner (``module:function`` or
``file.py:function``, a file relative to the team file: see
:mod:`~retinue.team.runners`), or only checks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retinue.actors import Profile
from retinue.actors.turns import Runner
from retinue.errors import ConfigurationError, TeamFileError
from retinue.team.runners import import_runner, locate_runner, stand_in
from retinue.team.schema import LLM_KNOBS, PROFILE_KEYS, AgentSpec, Defaults, effective_setting

__all__ = ["import_runner", "team_profiles"]


def team_profiles(
    agents: Mapping[str, AgentSpec],
    defaults: Defaults,
    lead: str,
    source: Path | None,
    runner: Runner | None,
    *,
    import_runners: bool = True,
) -> list[Profile]:
    """Build the team's profiles, lead first (see :meth:`retinue.team.Team.profiles`).

    With ``import_runners`` false an agent's ``runner`` key is only checked
    (:func:`~retinue.team.runners.locate_runner`) and a stand-in takes its place.

    Raises:
        TeamFileError: a runner that does not import (or, not imported, is
            malformed or names no module or file), or a setting the Profile
            refuses (e.g. an unknown tool), named by table and key.
    """
    label = str(source) if source is not None else "<team>"
    order = [lead, *(n for n in agents if n != lead)]
    return [
        _profile(label, name, agents[name], defaults, source, runner, import_runners)
        for name in order
    ]


def _profile(
    label: str,
    name: str,
    spec: AgentSpec,
    defaults: Defaults,
    source: Path | None,
    runner: Runner | None,
    import_runners: bool,
) -> Profile:
    """Build one agent's profile: its settings, and its own runner, a model's, or ``runner``."""
    table = f"agents.{name}"
    extra = _settings(spec, defaults)
    own = _own_runner(label, table, spec.runner, source, import_runners)
    if own is not None:
        extra.pop("model", None)
        extra.pop("model_settings", None)
    try:
        return Profile(
            name,
            subagents=tuple(spec.subagents),
            instructions=spec.instructions,
            description=spec.description,
            wake_on_completion=spec.wake_on_completion,
            runner=own if own is not None else (None if "model" in extra else runner),
            **extra,
        )
    except (ConfigurationError, ValueError, TypeError) as exc:
        raise TeamFileError(label, table, "", str(exc)) from None


def _own_runner(
    label: str, table: str, target: str | None, source: Path | None, imported: bool
) -> Runner | None:
    """Return an agent's own runner: imported, or (not ``imported``) checked and stood in for."""
    if not target:
        return None
    if imported:
        return import_runner(label, table, target, source)
    locate_runner(label, table, target, source)
    return stand_in(target)


def _settings(spec: AgentSpec, defaults: Defaults) -> dict[str, Any]:
    """Return the Profile keyword arguments of an agent's effective settings."""
    extra: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for key in PROFILE_KEYS:
        value = effective_setting(spec, defaults, key)
        if value is None:
            continue
        if key in LLM_KNOBS:
            settings[key] = value
        else:
            extra[key] = tuple(value) if isinstance(value, list) else value
    if settings:
        extra["model_settings"] = settings
    return extra
