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

    [providers."openai/gpt-4.1-mini"]   # a provider limit (retinue.ProviderLimit)
    requests_per_minute = 500
    tokens_per_minute = 200000

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
errors of the file. A ``[providers."<match>"]`` table is a
:class:`~retinue.protocol.provider_limits.ProviderLimit` for a provider
(``[providers.openai]``), a model or an ``api_base`` URL: its keys are the
limit's keyword arguments; with ``environ`` the file's tables replace the
same matches of ``RETINUE_PROVIDER_LIMITS``. An agent's ``priority`` weighs
its model calls in the fair admission between trees.

The package: :mod:`~retinue.team.schema` (the tables as strict structs),
:mod:`~retinue.team.decoding` (the decoding steps and checks) and
:mod:`~retinue.team.profiles` (a checked team's profiles); :class:`Team`
and the loaders are here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from retinue.actors import Profile
from retinue.actors.turns import Runner
from retinue.errors import TeamFileError
from retinue.llm.mcp import McpServer
from retinue.llm.mcp._teamfile import McpSpec, check_tools, mcp_servers
from retinue.llm.turn import check_profiles
from retinue.protocol.limits import Limits
from retinue.protocol.provider_limits import ProviderLimit
from retinue.protocol.validation import decode_table
from retinue.team.decoding import (
    check_delegation,
    choose_lead,
    decode_agents,
    decode_limits,
    decode_providers,
    decode_top,
    team_name,
)
from retinue.team.profiles import team_profiles
from retinue.team.schema import AgentSpec, Defaults, effective_setting, self_tools

# Importable from here as before the split (not part of __all__).
from retinue.team.schema import FiniteSeconds as FiniteSeconds
from retinue.team.schema import NonNegativeInt as NonNegativeInt
from retinue.team.schema import Positive as Positive
from retinue.team.schema import PositiveInt as PositiveInt
from retinue.team.schema import Tools as Tools

__all__ = ["AgentSpec", "Defaults", "McpSpec", "Team", "load_team", "open_arguments"]


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
    provider_limits: tuple[ProviderLimit, ...] = ()
    """The ``[providers."<match>"]`` limits (over ``RETINUE_PROVIDER_LIMITS`` when read with
    ``environ``), for ``Runtime.open``'s ``provider_limits`` (not applied to model calls yet)."""
    runner_settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments added to every model agent's ``LiteLLMRunner`` (over its own
    settings): :meth:`with_runner_settings`, e.g. a cassette for ``retinue run --record``."""

    @classmethod
    def from_toml(
        cls, text: str, *, source: str | os.PathLike[str] | None = None, environ: bool = True
    ) -> Team:
        """Decode and check a team from TOML text.

        ``source`` names the file in errors and anchors a relative
        ``workspace``. ``[limits]`` start from ``Limits.from_env()`` when
        ``environ`` is true (so ``RETINUE_DEPTH_CAP`` still applies), else from
        the defaults; the file's values win. ``[providers."<match>"]`` tables
        likewise replace the same matches of ``RETINUE_PROVIDER_LIMITS``.

        Raises:
            TeamFileError: bad TOML, an unknown key, a wrong type or value, an
                unknown subagent or lead, or a bad delegation graph, or a bad
                provider limit; the message names the file, the table and the key.
            InvalidLimits: ``RETINUE_PROVIDER_LIMITS`` is unusable (``environ``).
        """
        label = str(source) if source is not None else "<team>"
        top = decode_top(label, text)
        defaults = decode_table(label, "defaults", top.defaults, Defaults)
        limits = decode_limits(label, top.limits, environ)
        providers = decode_providers(label, top.providers, environ)
        agents = decode_agents(label, top.agents)
        check_delegation(label, agents, limits.depth_cap)
        lead = choose_lead(label, top.lead, agents)
        name = team_name(label, top.name, lead)
        file = Path(source) if source is not None else None
        servers = mcp_servers(label, top.mcp, file)
        check_tools(
            label, {n: (self_tools(a, defaults), a.subagents) for n, a in agents.items()}, servers
        )
        return cls(
            agents=agents,
            limits=limits,
            defaults=defaults,
            name=name,
            lead=lead,
            description=top.description,
            source=file,
            mcp=servers,
            provider_limits=providers,
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

    def with_runner_settings(self, **settings: Any) -> Team:
        """Return a copy whose model agents' runners also get ``settings`` (e.g.
        ``cassette=path, mode="replay"``: ``retinue run --replay``)."""
        merged = {**self.runner_settings, **settings}
        return dataclasses.replace(self, runner_settings=merged)

    def setting(self, agent: str, key: str) -> Any:
        """Return an agent's effective setting: its own table's, else ``[defaults]``'s."""
        return effective_setting(self.agents[agent], self.defaults, key)

    def profiles(self, runner: Runner | None = None) -> list[Profile]:
        """Build the team's :class:`Profile` objects, lead first.

        An agent's ``runner`` key imports its Python runner; else an agent with
        a model gets an LLM runner for it (the LLM settings go to the Profile's
        ``model_settings``); an agent with neither uses ``runner``.

        Raises:
            TeamFileError: a runner that does not import, or a setting the
                Profile refuses (e.g. an unknown tool), named by table and key.
        """
        built = team_profiles(self.agents, self.defaults, self.lead, self.source, runner)
        if not self.runner_settings:
            return built
        return [
            p
            if p.model is None
            else dataclasses.replace(p, model_settings={**p.model_settings, **self.runner_settings})
            for p in built
        ]

    def check(self, *, import_runners: bool = False) -> dict[str, Profile]:
        """Run every check ``Runtime.open(path, team=self)`` runs, without starting anything.

        The profiles are built and checked by the function the open uses
        (:func:`~retinue.llm.turn._profile_checks.check_profiles`): capability
        ceilings, tools a model runner cannot provide, two tools offered
        under one name, ``approve`` entries, MCP grants, an agent without a
        runner. No store is opened, no MCP server started, no model called.
        ``runner`` keys are checked, not imported (their form, and that the
        module is found or the file exists; a stand-in runs the checks in
        their place), unless ``import_runners``: then the checks that need
        the imported object (a runner that is a ``LiteLLMRunner``) run too.
        ``retinue validate`` is this call (``--import-runners``).

        Returns:
            The checked profiles by name, inherited tools resolved.

        Raises:
            TeamFileError: a ``runner`` key that is malformed, names no
                module or file, or (``import_runners``) does not import.
            ConfigurationError: a check the open runs fails (a
                ``ToolsNotPermitted`` for a capability ceiling).
            DelegationCycleError, DelegationDepthError: a bad profile graph.
        """
        profiles = team_profiles(
            self.agents,
            self.defaults,
            self.lead,
            self.source,
            None,
            import_runners=import_runners,
        )
        checked = check_profiles(profiles, None, self.limits, self.workspace, team_servers=self.mcp)
        return checked.profiles


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
