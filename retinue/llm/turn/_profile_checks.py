"""Every check ``Runtime.open`` runs on its profiles, in one function: :func:`check_profiles`.

A writable open runs it before it starts anything
(:func:`retinue.runtime._opening.start_writer`), and :meth:`Team.check
<retinue.team.Team.check>` (``retinue validate``) runs it without starting
anything at all: the MCP servers are declared, never started; the model
runners are built, never called. So a team the check passes is a team the
open accepts, and the same words refuse one it does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from retinue.actors import Profile
from retinue.actors.system import profile_table
from retinue.actors.turns import Runner
from retinue.llm.mcp import McpManager, McpServer, check_mcp_grants, open_mcp
from retinue.llm.turn._runner import model_runner_factory
from retinue.protocol.limits import Limits
from retinue.protocol.messages import Event

__all__ = ["CheckedProfiles", "check_profiles"]


class CheckedProfiles(NamedTuple):
    """The profile table a runtime runs with, each profile's runner, and its MCP servers."""

    profiles: dict[str, Profile]
    runners: dict[str, Runner]
    mcp: McpManager | None


def check_profiles(
    profiles: Iterable[Profile],
    runner: Runner | None,
    limits: Limits,
    workspace: Path | None,
    *,
    team_servers: Mapping[str, McpServer] | None = None,
    mcp_servers: Mapping[str, McpServer] | None = None,
    publish: Callable[[Sequence[Event]], None] | None = None,
) -> CheckedProfiles:
    """Check the profiles as an open does; return the table, the runners and the MCP servers.

    Profiles that name (or inherit) a model get a
    :class:`~retinue.llm.turn._runner.LiteLLMRunner` confined to ``workspace``
    (:func:`~retinue.llm.turn._runner.model_runner_factory`); ``team_servers`` and
    ``mcp_servers`` (which win) are declared on one
    :class:`~retinue.llm.mcp.McpManager`, not started, whose events go to
    ``publish``.

    Raises:
        ArgumentTypeError, ConfigurationError: bad ``mcp_servers``; bad
            profiles (see :func:`~retinue.actors.system._boot.profile_table`: a
            capability ceiling, a tool a model runner cannot provide, two
            tools offered under one name, an ``approve`` entry naming no tool,
            a profile without a runner); a grant of an undeclared MCP server's
            tools (see :func:`~retinue.llm.mcp.check_mcp_grants`).
        DelegationCycleError, DelegationDepthError: a bad profile graph.
    """
    mcp = open_mcp(team_servers, mcp_servers, workspace, publish)
    table, runners = profile_table(
        profiles, runner, limits, model_runner=model_runner_factory(workspace, mcp)
    )
    check_mcp_grants(table, runners, mcp)
    return CheckedProfiles(table, runners, mcp)
