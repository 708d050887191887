"""The steps of :meth:`Runtime.open <retinue.runtime.Runtime.open>`, in the order it takes them.

Apply the team (:func:`apply_team`), check the limits (:func:`checked_limits`)
and the provider limits (:func:`provider_limits_of`: the environment's, the
team file's, then ``provider_limits``, merged by match),
then either attach a reader to an existing store (:func:`attach_reader`) or
start a writer (:func:`start_writer`): the event bus, the MCP servers, the
profile table with its runners, the grants check, litellm's import on a
thread of its own when a profile has a model (waited for before the open
returns), the spans (:func:`open_tracing`: :mod:`retinue.tracing` when
OpenTelemetry is installed; it is imported only then, never by ``import
retinue``), and the
:class:`~retinue.actors.system.System` that starts (and, on failure or at
shutdown, stops) everything below the facade.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, wait
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from retinue.actors import Profile
from retinue.actors.admission import ProviderGate
from retinue.actors.events import EventBus, Spans
from retinue.actors.system import ReadOnlySystem, System
from retinue.actors.turns import Runner
from retinue.control import ControlServer, remove_stale_socket
from retinue.errors import ArgumentTypeError, ConfigurationError, InvalidLimits
from retinue.llm import LiteLLMRunner
from retinue.llm.mcp import McpManager, McpServer
from retinue.llm.model import preload_litellm
from retinue.llm.turn import check_profiles
from retinue.persistence.options import StoreOptions
from retinue.protocol.limits import Limits
from retinue.protocol.provider_limits import (
    ProviderLimit,
    merge_provider_limits,
    provider_limits_from_env,
)
from retinue.team import Team, load_team, open_arguments

__all__ = [
    "OpenArguments",
    "Writer",
    "apply_team",
    "attach_reader",
    "checked_control",
    "checked_limits",
    "open_tracing",
    "provider_limits_of",
    "start_control",
    "start_writer",
]


class OpenArguments(NamedTuple):
    """What ``Runtime.open`` runs with once a team is applied."""

    profiles: Iterable[Profile]
    limits: Limits | None
    workspace: str | os.PathLike[str] | None
    team_servers: Mapping[str, McpServer]
    provider_limits: tuple[ProviderLimit, ...] = ()
    """The team's provider limits (over the environment's), or the environment's."""


class Writer(NamedTuple):
    """A started writable runtime: its system, its MCP servers and its profile table."""

    system: System
    mcp: McpManager | None
    profiles: dict[str, Profile]


def apply_team(
    team: Team | str | os.PathLike[str] | None,
    readonly: bool,
    profiles: Iterable[Profile],
    runner: Runner | None,
    limits: Limits | None,
    workspace: str | os.PathLike[str] | None,
) -> OpenArguments:
    """Return the open's arguments with the team's applied (a read-only open ignores it).

    Its provider limits are the team's (``RETINUE_PROVIDER_LIMITS`` under the
    file's ``[providers]``, as the team was read), else the environment's.

    Raises:
        TeamFileError: the team file is unusable (named by table and key).
        InvalidLimits: ``RETINUE_PROVIDER_LIMITS`` is unusable.
    """
    if readonly:
        return OpenArguments(profiles, limits, workspace, {})
    if team is None:
        return OpenArguments(profiles, limits, workspace, {}, provider_limits_from_env())
    team = team if isinstance(team, Team) else load_team(team)
    profiles, limits, workspace = open_arguments(team, profiles, runner, limits, workspace)
    return OpenArguments(profiles, limits, workspace, dict(team.mcp), team.provider_limits)


def provider_limits_of(
    given: OpenArguments, provider_limits: Iterable[ProviderLimit] | None
) -> tuple[ProviderLimit, ...]:
    """Return the limits model calls are admitted under: ``given``'s, then ``provider_limits``.

    A limit of ``provider_limits`` replaces the team's or the environment's
    limit of the same match whole.

    Raises:
        ArgumentTypeError: ``provider_limits`` is one ProviderLimit, or not iterable.
        InvalidLimits: an item is not a ProviderLimit, or one match is named twice.
    """
    if provider_limits is None:
        return merge_provider_limits(given.provider_limits)
    if isinstance(provider_limits, ProviderLimit | str) or not isinstance(
        provider_limits, Iterable
    ):
        raise ArgumentTypeError(
            "provider_limits must be a list of retinue.ProviderLimit, not "
            f"{type(provider_limits).__name__}; write provider_limits=[ProviderLimit(...)]"
        )
    try:
        return merge_provider_limits(given.provider_limits, list(provider_limits))
    except InvalidLimits as exc:
        raise InvalidLimits(
            str(exc).replace("provider limits source 2", "provider_limits")
        ) from None


def checked_limits(limits: Limits | None) -> Limits:
    """Return the limits to run with: ``limits``, or the environment's.

    Raises:
        ArgumentTypeError: ``limits`` is not a Limits.
        InvalidLimits: ``limits`` is None and a ``RETINUE_*`` variable is bad.
    """
    if limits is not None and not isinstance(limits, Limits):
        raise ArgumentTypeError(
            f"limits must be a Limits, not {type(limits).__name__}; "
            "build one with Limits(**fields) or Limits.from_env(**fields)"
        )
    return limits if limits is not None else Limits.from_env()


def attach_reader(options: StoreOptions, limits: Limits) -> ReadOnlySystem:
    """Open the existing store ``options`` names read-only, beside its writer.

    Raises:
        ConfigurationError: no path was given (a reader needs a store).
        StoreVersionError, StoreError, StoreCorrupted: as
            :class:`~retinue.actors.system._readonly.ReadOnlySystem` raises.
    """
    if options.path is None:
        raise ConfigurationError("a read-only runtime needs the path of a store")
    return ReadOnlySystem(options.path, limits)


def start_writer(
    options: StoreOptions,
    limits: Limits,
    given: OpenArguments,
    runner: Runner | None,
    create: bool,
    mcp_servers: dict[str, McpServer] | None,
    spans: Spans | None = None,
    provider_limits: tuple[ProviderLimit, ...] = (),
) -> Writer:
    """Check the profiles and MCP grants, then start the writable runtime on ``options``.

    The checks are :func:`~retinue.llm.turn._profile_checks.check_profiles`, the
    ones ``Team.check`` (``retinue validate``) runs. ``given`` are the open's
    arguments with the team's applied (its ``limits`` already checked into
    ``limits``); ``spans`` where the turns' spans go (see :func:`open_tracing`);
    with ``provider_limits``, every model call passes a
    :class:`~retinue.actors.admission.ProviderGate` over them.

    The MCP servers start on first use; the system closes them at shutdown,
    or at once if its start fails.

    Raises:
        ArgumentTypeError, ConfigurationError: bad ``mcp_servers`` or
            profiles (see :func:`~retinue.llm.turn._profile_checks.check_profiles`).
        DelegationCycleError, DelegationDepthError: a bad profile graph.
        StoreError, StoreLocked, StoreVersionError, StoreCorrupted: as
            :meth:`System.start <retinue.actors.system.System.start>` raises.
    """
    folder = None if given.workspace is None else Path(given.workspace)
    bus = EventBus(limits.event_queue_capacity)
    table, runners, mcp = check_profiles(
        given.profiles,
        runner,
        limits,
        folder,
        team_servers=given.team_servers,
        mcp_servers=mcp_servers,
        publish=bus.publish,
    )
    litellm = _import_litellm(runners)
    gate = None
    if provider_limits:
        gate = ProviderGate(
            provider_limits,
            window_s=limits.provider_window_s,
            bus=bus,
            max_agents=limits.max_agents,
        )
    stops = [] if mcp is None else [mcp.close]
    system = System.start(
        options,
        create=create,
        profiles=table,
        runners=runners,
        limits=limits,
        bus=bus,
        before_stop=stops if gate is None else [*stops, gate.close],
        spans=spans,
        admission=gate,
    )
    if litellm is not None:
        wait([litellm])  # an ImportError is the turn's to raise, not the open's
    return Writer(system, mcp, table)


def checked_control(control: object) -> bool:
    """Return ``control`` if it is a bool.

    Raises:
        ArgumentTypeError: it is not.
    """
    if not isinstance(control, bool):
        raise ArgumentTypeError(f"control must be True or False, not {type(control).__name__}")
    return control


def start_control(system: System, control: bool) -> ControlServer | None:
    """Serve ``system``'s control socket (``control`` True), else remove a stale one.

    The server stops first when the runtime closes (after its waits were
    ended), before the store is released. A failed start shuts ``system`` down.

    Raises:
        StoreError: the socket cannot be served (see
            :meth:`~retinue.control.ControlServer.start`).
    """
    try:
        if not control:
            remove_stale_socket(system.path)
            return None
        server = ControlServer.start(system)
    except BaseException:
        system.shutdown()
        raise
    system.before_stop.insert(0, server.stop)
    return server


def open_tracing(provider: Any, capture_content: bool | None, limits: Limits) -> Spans | None:
    """Return the spans of a writer: :class:`retinue.tracing.Tracing` over ``provider``.

    ``provider`` None is OpenTelemetry's global tracer provider (spans cost a
    few microseconds while no SDK is configured). No spans at all when
    OpenTelemetry is not installed (and no provider was given) or when
    ``OTEL_SDK_DISABLED`` is ``true``. ``capture_content`` None reads the
    conventions' environment variable.

    Raises:
        ArgumentTypeError: ``capture_content`` is not a bool or None.
        ExtraNotInstalled: a ``provider`` was given without the ``otel`` extra.
    """
    if capture_content is not None and not isinstance(capture_content, bool):
        raise ArgumentTypeError(
            f"capture_content must be True, False or None, not {type(capture_content).__name__}"
        )
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if provider is None and importlib.util.find_spec("opentelemetry") is None:
        return None
    from retinue.tracing import Tracing  # the extra, imported only now

    return Tracing(
        provider, capture_content=capture_content, max_content=limits.trace_content_max_bytes
    )


def _import_litellm(runners: Mapping[str, Runner]) -> Future[ModuleType] | None:
    """Start importing litellm beside the store's opening when a profile has a model runner.

    ``Runtime.open`` returns once the import is done, so the first model call
    never waits seconds for it. Returns the import's future, or None when no
    runner is a :class:`~retinue.llm.LiteLLMRunner`.
    """
    if not any(isinstance(r, LiteLLMRunner) for r in runners.values()):
        return None
    return preload_litellm()
