"""Team files: a whole agent team in one TOML file, checked before anything runs.

A team file has four parts, every one optional but ``[agents.*]``::

    name = "review"          # the top-level agent's name: /root/review
    lead = "lead"            # the agent `retinue run` starts (default: the first)
    description = "..."

    [limits]                 # any Limits field, e.g. depth_cap = 4
    [defaults]               # model, tools, durability, workspace, retries...
    [agents.lead]            # one table per agent (profile)
    model = "retinue/scripted"
    instructions = "..."
    subagents = ["security", "style"]
    tools = ["read_file", "time.*"]

    [mcp.time]               # an MCP server whose tools agents grant as time.<tool>
    command = "mcp-server-time"

Decoding is strict: an unknown key, a wrong type or a bad value raises
:class:`~retinue.errors.TeamFileError` naming the file, the table and the key
(``team.toml: [agents.lead] key 'modle': unknown key; ...``). The delegation
graph is checked with :func:`~retinue.protocol.graph.validate_graph` against
the team's depth cap, so a team that loads never hits the depth cap at run time.
Token and cost budgets are limits: ``[limits] tokens_per_agent``,
``tokens_per_tree``, ``usd_per_agent``, ``usd_per_tree``. Supervision:
``restart = { max_restarts = 3, within_s = 60 }`` (a
:class:`~retinue.protocol.supervision.Restart`) and ``approve = ["bash"]``
(tools whose calls a person approves), in ``[defaults]`` or an agent's table.
An ``[mcp.<server>]`` table declares an MCP server (``command``, ``args``,
``env``, ``env_from_host``, ``cwd`` for stdio; ``url``, ``headers`` for
streamable HTTP; ``startup_timeout_s``, ``tool_timeout_s``); a grant of an
undeclared server's tools, and a child granted tools its parent lacks, are
errors of the file.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from retinue.actors.profile import Profile
from retinue.actors.turn import Runner
from retinue.errors import (
    ConfigurationError,
    DelegationCycleError,
    DelegationGraphError,
    InvalidLimits,
    RetinueError,
    TeamFileError,
)
from retinue.llm.mcp.config import McpServer
from retinue.llm.mcp.teamfile import McpSpec, check_tools, mcp_servers
from retinue.protocol.graph import validate_graph
from retinue.protocol.limits import Limits
from retinue.protocol.supervision import Restart

__all__ = ["AgentSpec", "Defaults", "McpSpec", "Team", "load_team", "open_arguments"]

Positive = Annotated[float, msgspec.Meta(gt=0)]
FiniteSeconds = Annotated[float, msgspec.Meta(gt=0, le=1e9)]
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
Tools = str | list[str]


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


class _Top(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str | None = None
    lead: str | None = None
    description: str = ""
    limits: dict[str, Any] = msgspec.field(default_factory=dict)
    defaults: dict[str, Any] = msgspec.field(default_factory=dict)
    agents: dict[str, Any] = msgspec.field(default_factory=dict)
    mcp: dict[str, Any] = msgspec.field(default_factory=dict)


# Settings an agent inherits from [defaults] when its own table leaves them unset.
_INHERITED = (
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
)
# Settings that only an LLM runner reads: they go to Profile fields of the same name.
_LLM_KNOBS = (
    "api_base",
    "temperature",
    "retries",
    "max_tool_calls",
    "request_timeout_s",
    "tool_timeout_s",
)
_PROFILE_KEYS = (
    "model",
    "tools",
    "result_format",
    "turn_timeout_s",
    "restart",
    "approve",
    *_LLM_KNOBS,
)
_NAME = re.compile(r"[a-z0-9_]{1,40}")


def _fields(cls: type[msgspec.Struct]) -> str:
    return ", ".join(cls.__struct_fields__)


def _convert(source: str, table: str, raw: object, cls: type[msgspec.Struct]) -> msgspec.Struct:
    """Decode one table, turning msgspec's message into one naming table and key."""
    if not isinstance(raw, dict):
        raise TeamFileError(source, table, "", f"must be a table, not {type(raw).__name__}")
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        text = str(exc)
        unknown = re.match(r"Object contains unknown field `(.+?)`(?: - at `\$\.(\w+)`)?", text)
        if unknown:
            key, inner = unknown.group(1), unknown.group(2)
            known = _fields(Restart if inner == "restart" else cls)
            key = f"{inner}.{key}" if inner else key
            raise TeamFileError(source, table, key, f"unknown key; known keys: {known}") from None
        where = re.search(r" - at `\$\.?(.*)`$", text)
        key = where.group(1) if where else ""
        message = text[: where.start()] if where else text
        message = message.replace("`", "").replace(" | null", "")
        raise TeamFileError(source, table, key, message) from None


@dataclass(frozen=True)
class Team:
    """A checked team: its agents (profiles), limits and defaults.

    Build one with :func:`load_team` (a file) or :meth:`Team.from_toml`
    (text). ``Runtime.open(path, team=...)`` takes a Team or a file path.
    """

    agents: Mapping[str, AgentSpec]
    limits: Limits = dataclasses.field(default_factory=Limits)
    defaults: Defaults = dataclasses.field(default_factory=Defaults)
    name: str = "team"
    lead: str = ""
    description: str = ""
    source: Path | None = None
    mcp: Mapping[str, McpServer] = dataclasses.field(default_factory=dict)
    """The ``[mcp.<server>]`` servers, by name."""

    @classmethod
    def from_toml(
        cls, text: str, *, source: str | os.PathLike[str] | None = None, environ: bool = True
    ) -> Team:
        """Decode and check a team from TOML text.

        ``source`` names the file in errors and anchors a relative
        ``workspace``. ``[limits]`` start from ``Limits.from_env()`` when
        ``environ`` is true (so ``RETINUE_DEPTH_CAP`` still applies), else from
        the defaults; the file's values win.

        Raises:
            TeamFileError: bad TOML, an unknown key, a wrong type or value, an
                unknown subagent or lead, or a bad delegation graph; the message
                names the file, the table and the key.
        """
        label = str(source) if source is not None else "<team>"
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TeamFileError(label, "", "", f"not valid TOML: {exc}") from None
        top = _convert(label, "", data, _Top)
        assert isinstance(top, _Top)
        defaults = _convert(label, "defaults", top.defaults, Defaults)
        assert isinstance(defaults, Defaults)
        limits = _limits(label, top.limits, environ)
        if not top.agents:
            raise TeamFileError(label, "agents", "", "a team needs at least one [agents.<name>]")
        agents: dict[str, AgentSpec] = {}
        for name, raw in top.agents.items():
            table = f"agents.{name}"
            if not _NAME.fullmatch(name):
                raise TeamFileError(
                    label, table, "", "an agent name is 1-40 characters of a-z, 0-9 and _"
                )
            spec = _convert(label, table, raw, AgentSpec)
            assert isinstance(spec, AgentSpec)
            agents[name] = spec
        for name, spec in agents.items():
            for child in spec.subagents:
                if child not in agents:
                    raise TeamFileError(
                        label,
                        f"agents.{name}",
                        "subagents",
                        f"{child!r} is not an agent of this team (agents: {', '.join(agents)})",
                    )
        try:
            validate_graph({n: s.subagents for n, s in agents.items()}, cap=limits.depth_cap)
        except DelegationCycleError as exc:
            raise TeamFileError(label, f"agents.{exc.cycle[0]}", "subagents", str(exc)) from None
        except DelegationGraphError as exc:
            raise TeamFileError(
                label,
                "agents",
                "subagents",
                f"{exc}; shorten the chain or raise [limits] depth_cap",
            ) from None
        lead = top.lead if top.lead is not None else next(iter(agents))
        if lead not in agents:
            raise TeamFileError(
                label, "", "lead", f"{lead!r} is not an agent of this team ({', '.join(agents)})"
            )
        team_name = top.name if top.name is not None else lead
        if not _NAME.fullmatch(team_name) or team_name == "root":
            raise TeamFileError(
                label, "", "name", "the team name is an agent name: 1-40 characters of a-z, 0-9, _"
            )
        servers = mcp_servers(label, top.mcp, Path(source) if source is not None else None)
        check_tools(
            label, {n: (self_tools(a, defaults), a.subagents) for n, a in agents.items()}, servers
        )
        return cls(
            agents=agents,
            limits=limits,
            defaults=defaults,
            name=team_name,
            lead=lead,
            description=top.description,
            source=Path(source) if source is not None else None,
            mcp=servers,
        )

    @property
    def workspace(self) -> Path | None:
        """The ``[defaults] workspace`` folder, resolved against the team file's folder."""
        if self.defaults.workspace is None:
            return None
        folder = Path(self.defaults.workspace).expanduser()
        if not folder.is_absolute() and self.source is not None:
            folder = self.source.parent / folder
        return folder

    def with_model(self, model: str) -> Team:
        """Return a copy in which every agent uses ``model`` (``retinue run --model``)."""
        agents = {n: msgspec.structs.replace(s, model=model) for n, s in self.agents.items()}
        defaults = msgspec.structs.replace(self.defaults, model=model)
        return dataclasses.replace(self, agents=agents, defaults=defaults)

    def setting(self, agent: str, key: str) -> Any:
        """Return an agent's effective setting: its own table's, else ``[defaults]``'s."""
        value = getattr(self.agents[agent], key)
        if value is None and key in _INHERITED:
            value = getattr(self.defaults, key)
        return value

    def profiles(self, runner: Runner | None = None) -> list[Profile]:
        """Build the team's :class:`Profile` objects, lead first.

        An agent's ``runner`` key imports its Python runner; else an agent with
        a model gets an LLM runner for it (the LLM settings go to the Profile's
        ``model_settings``); an agent with neither uses ``runner``.

        Raises:
            TeamFileError: a runner that does not import, a setting this
                retinue's Profile does not support, or one the Profile refuses
                (e.g. an unknown tool), named by table and key.
        """
        known = {f.name for f in dataclasses.fields(Profile)}
        label = str(self.source) if self.source is not None else "<team>"
        order = [self.lead, *(n for n in self.agents if n != self.lead)]
        profiles: list[Profile] = []
        for name in order:
            spec = self.agents[name]
            table = f"agents.{name}"
            extra: dict[str, Any] = {}
            settings: dict[str, Any] = {}
            for key in _PROFILE_KEYS:
                value = self.setting(name, key)
                if value is None:
                    continue
                if key in _LLM_KNOBS and "model_settings" in known:
                    settings[key] = value
                elif key not in known:
                    raise TeamFileError(
                        label, table, key, "this version of retinue's Profile has no such setting"
                    )
                else:
                    extra[key] = tuple(value) if isinstance(value, list) else value
            if settings:
                extra["model_settings"] = settings
            own = _import_runner(label, table, spec.runner, self.source) if spec.runner else None
            if own is not None:
                extra.pop("model", None)
                extra.pop("model_settings", None)
            try:
                profile = Profile(
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
            profiles.append(profile)
        return profiles


def _import_runner(label: str, table: str, target: str, source: Path | None) -> Runner:
    """Import ``module:function`` or ``file.py:function`` (relative to the team file)."""
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


def self_tools(spec: AgentSpec, defaults: Defaults) -> Tools | None:
    """An agent's tools setting: its own, else ``[defaults]``'s."""
    return spec.tools if spec.tools is not None else defaults.tools


def _limits(label: str, raw: dict[str, Any], environ: bool) -> Limits:
    base = Limits.from_env() if environ else Limits()
    for key in raw:
        if key not in Limits.__struct_fields__:
            raise TeamFileError(label, "limits", key, f"unknown key; known keys: {_fields(Limits)}")
    try:
        return base.replace(**raw)
    except (InvalidLimits, RetinueError) as exc:
        key = next((k for k in raw if f"Limits.{k} " in str(exc)), "")
        raise TeamFileError(label, "limits", key, str(exc)) from None


def open_arguments(
    team: Team | str | os.PathLike[str],
    profiles: Iterable[Profile],
    runner: Runner | None,
    limits: Limits | None,
    workspace: str | os.PathLike[str] | None,
) -> tuple[list[Profile], Limits, str | os.PathLike[str] | None]:
    """Merge a team into ``Runtime.open``'s arguments: profiles, limits, workspace.

    The team's profiles come first, then ``profiles``; explicit ``limits`` and
    ``workspace`` win over the team's ``[limits]`` and ``[defaults] workspace``.

    Raises:
        TeamFileError: the team file is unusable.
    """
    chosen = team if isinstance(team, Team) else load_team(team)
    merged = [*chosen.profiles(runner), *profiles]
    return (
        merged,
        limits if limits is not None else chosen.limits,
        workspace if workspace is not None else chosen.workspace,
    )


def load_team(path: str | os.PathLike[str], *, environ: bool = True) -> Team:
    """Read and check the team file at ``path``; see :meth:`Team.from_toml`.

    Raises:
        TeamFileError: the file is missing, unreadable, not UTF-8 or not a
            valid team (named by table and key).
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TeamFileError(str(file), "", "", "no such file") from None
    except IsADirectoryError:
        raise TeamFileError(
            str(file), "", "", "is a folder; give the path of a .toml file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TeamFileError(str(file), "", "", f"cannot be read: {exc}") from None
    return Team.from_toml(text, source=file, environ=environ)
