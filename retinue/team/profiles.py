"""From a checked team to :class:`~retinue.actors.profile.Profile` objects.

Each agent's effective settings (its own table's, else ``[defaults]``'s) go to
its Profile: the LLM knobs as ``model_settings``, the rest as Profile fields;
an agent's ``runner`` key imports its Python runner (``module:function`` or
``file.py:function``, a file relative to the team file).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retinue.actors.profile import Profile
from retinue.actors.turn import Runner
from retinue.errors import ConfigurationError, TeamFileError
from retinue.team.schema import LLM_KNOBS, PROFILE_KEYS, AgentSpec, Defaults, effective_setting

__all__ = ["import_runner", "team_profiles"]


def team_profiles(
    agents: Mapping[str, AgentSpec],
    defaults: Defaults,
    lead: str,
    source: Path | None,
    runner: Runner | None,
) -> list[Profile]:
    """Build the team's profiles, lead first (see :meth:`retinue.team.Team.profiles`).

    Raises:
        TeamFileError: a runner that does not import, or a setting the
            Profile refuses (e.g. an unknown tool), named by table and key.
    """
    label = str(source) if source is not None else "<team>"
    order = [lead, *(n for n in agents if n != lead)]
    return [_profile(label, name, agents[name], defaults, source, runner) for name in order]


def _profile(
    label: str,
    name: str,
    spec: AgentSpec,
    defaults: Defaults,
    source: Path | None,
    runner: Runner | None,
) -> Profile:
    """Build one agent's profile: its settings, and its own runner, a model's, or ``runner``."""
    table = f"agents.{name}"
    extra = _settings(spec, defaults)
    own = import_runner(label, table, spec.runner, source) if spec.runner else None
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


def import_runner(label: str, table: str, target: str, source: Path | None) -> Runner:
    """Import ``module:function`` or ``file.py:function`` (relative to the team file).

    Raises:
        TeamFileError: ``target`` is not ``module:function``, does not
            import, or is not callable.
    """
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise TeamFileError(label, table, "runner", f"{target!r} is not 'module:function'")
    try:
        if module_name.endswith(".py"):
            file = Path(module_name)
            if not file.is_absolute() and source is not None:
                file = source.parent / file
            spec = importlib.util.spec_from_file_location(f"_retinue_team_{file.stem}", file)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {file}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
        found = getattr(module, attribute)
    except Exception as exc:
        raise TeamFileError(
            label, table, "runner", f"cannot import {target!r}: {type(exc).__name__}: {exc}"
        ) from None
    if not callable(found):
        raise TeamFileError(label, table, "runner", f"{target!r} is not callable")
    runner: Runner = found
    return runner
