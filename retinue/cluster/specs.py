"""What a shard is opened with, as plain data: profiles by import path, the team's text, limits.

A shard runs in another process, possibly on another machine, so its
profiles cannot be handed over as Python objects: each runner goes as the
``module:qualified_name`` it imports from (as team files name runners), which
must be importable on every worker (an installed package, or Ray's runtime
environment: ``runtime_env={"py_modules": [...]}``). A team goes as its file's
text and path (``file.py:function`` runners load relative to it).
:func:`shard_config` checks all of it on the host before any shard starts.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from retinue.actors import Profile
from retinue.actors.turns import Runner
from retinue.errors import ArgumentTypeError, ConfigurationError
from retinue.protocol.limits import Limits
from retinue.protocol.provider_limits import ProviderLimit
from retinue.protocol.supervision import Restart
from retinue.team import Team, load_team

__all__ = [
    "ProfileSpec",
    "ShardConfig",
    "TeamSpec",
    "config_digest",
    "profile_of",
    "runner_path",
    "shard_config",
    "spec_of",
    "team_of",
]


class ProfileSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A :class:`~retinue.actors._profile.Profile` as data; ``runner`` is ``module:name``."""

    name: str
    subagents: tuple[str, ...] = ()
    runner: str | None = None
    instructions: str = ""
    wake_on_completion: bool = True
    description: str = ""
    model: str | None = None
    tools: str | tuple[str, ...] | None = None
    result_format: str | None = None
    model_settings: dict[str, Any] = {}
    turn_timeout_s: float | None = None
    restart: Restart | None = None
    approve: tuple[str, ...] = ()
    priority: float = 1.0


class TeamSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A team file's text and its path (where ``file.py`` runners and the workspace resolve)."""

    text: str
    source: str


class ShardConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a shard opens its runtime with (the same for every shard of a cluster)."""

    profiles: tuple[ProfileSpec, ...] = ()
    team: TeamSpec | None = None
    limits: Limits | None = None
    durability: str = "full"
    lease_timeout_s: float = 120.0
    request_ttl_s: float = 3600.0
    max_requests: int = 1_000_000
    lock_wait_s: float = 30.0
    stream_idle_s: float = 60.0
    max_streams: int = 1_000
    provider_limits: tuple[ProviderLimit, ...] = ()
    provider_lease_s: float = 10.0
    max_released_leases: int = 100_000


def runner_path(runner: Runner, owner: str) -> str:
    """Return the ``module:qualified_name`` that imports ``runner`` back.

    Raises:
        ConfigurationError: it is not reachable by name (a lambda, a local
            function, an instance, something defined in ``__main__``).
    """
    module = getattr(runner, "__module__", None)
    qualname = getattr(runner, "__qualname__", None)
    advice = (
        f"profile {owner!r}: its runner {runner!r} cannot reach the cluster's workers; "
        "a shard imports runners by name, so use a function (or class) defined at the top "
        "level of an importable module (as team files do with runner = 'module:function')"
    )
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        raise ConfigurationError(advice)
    if module == "__main__":
        raise ConfigurationError(f"{advice}, not in __main__")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        raise ConfigurationError(advice) from None
    if found is not runner:
        raise ConfigurationError(advice)
    return f"{module}:{qualname}"


def import_runner(path: str) -> Runner:
    """Import a runner named ``module:qualified_name``.

    Raises:
        ConfigurationError: it does not import, or is not callable.
    """
    module, _, qualname = path.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f"runner {path!r} does not import on this worker ({type(exc).__name__}: {exc}); "
            "install the package on every node or ship it with "
            "runtime_env={'py_modules': [...]}"
        ) from None
    if not callable(found):
        raise ConfigurationError(f"runner {path!r} is not callable")
    runner: Runner = found
    return runner


def spec_of(profile: Profile) -> ProfileSpec:
    """Return ``profile`` as data.

    Raises:
        ConfigurationError: its runner is not reachable by name, or a model
            setting is not plain data (msgpack-encodable).
    """
    tools = profile.tools if isinstance(profile.tools, str | None) else tuple(profile.tools)
    settings = dict(profile.model_settings)
    try:
        msgspec.msgpack.encode(settings)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"profile {profile.name!r}: model_settings must be plain data to reach a shard: {exc}"
        ) from None
    return ProfileSpec(
        name=profile.name,
        subagents=tuple(profile.subagents),
        runner=None if profile.runner is None else runner_path(profile.runner, profile.name),
        instructions=profile.instructions,
        wake_on_completion=profile.wake_on_completion,
        description=profile.description,
        model=profile.model,
        tools=tools,
        result_format=profile.result_format,
        model_settings=settings,
        turn_timeout_s=profile.turn_timeout_s,
        restart=profile.restart,
        approve=tuple(profile.approve),
        priority=profile.priority,
    )


def profile_of(spec: ProfileSpec) -> Profile:
    """Rebuild a profile on a shard (its runner imported by name).

    Raises:
        ConfigurationError: the runner does not import, or the profile is invalid.
    """
    return Profile(
        spec.name,
        subagents=spec.subagents,
        runner=None if spec.runner is None else import_runner(spec.runner),
        instructions=spec.instructions,
        wake_on_completion=spec.wake_on_completion,
        description=spec.description,
        model=spec.model,
        tools=spec.tools,
        result_format=spec.result_format,
        model_settings=spec.model_settings,
        turn_timeout_s=spec.turn_timeout_s,
        restart=spec.restart,
        approve=spec.approve,
        priority=spec.priority,
    )


def team_of(team: Team | str | os.PathLike[str]) -> TeamSpec:
    """Return a team as data: its file's text and path, checked here first.

    Raises:
        ConfigurationError: a :class:`~retinue.team.Team` without a source file.
        TeamFileError: the file is unusable.
    """
    if isinstance(team, Team):
        if team.source is None:
            raise ConfigurationError(
                "a cluster's team must come from a file (load_team(path) or a path): "
                "each shard reads it again"
            )
        source = team.source
    elif isinstance(team, str | os.PathLike):
        source = Path(team)
        load_team(source)  # every problem is reported here, before any shard starts
    else:
        raise ArgumentTypeError(f"team must be a Team or a path, not {type(team).__name__}")
    source = source.resolve()
    return TeamSpec(text=source.read_text(encoding="utf-8"), source=str(source))


def shard_config(
    *,
    profiles: Iterable[Profile] | None,
    team: Team | str | os.PathLike[str] | None,
    limits: Limits | None,
    **options: Any,
) -> ShardConfig:
    """Build and check what every shard opens its runtime with.

    Raises:
        ArgumentTypeError: ``limits`` is not a Limits, ``profiles`` not profiles.
        ConfigurationError, TeamFileError: as :func:`spec_of` and :func:`team_of`.
    """
    if limits is not None and not isinstance(limits, Limits):
        raise ArgumentTypeError(f"limits must be a Limits, not {type(limits).__name__}")
    specs: list[ProfileSpec] = []
    for profile in profiles or ():
        if not isinstance(profile, Profile):
            raise ConfigurationError(
                f"profiles must be Profile objects, not {type(profile).__name__}"
            )
        specs.append(spec_of(profile))
    return ShardConfig(
        profiles=tuple(specs),
        team=None if team is None else team_of(team),
        limits=limits,
        **options,
    )


def config_digest(config: ShardConfig) -> str:
    """Return a short digest of ``config`` (a shard reports it; the face compares)."""
    return hashlib.sha256(msgspec.msgpack.encode(config)).hexdigest()[:16]
