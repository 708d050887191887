"""``retinue validate TEAM``: every check ``Runtime.open`` runs, without starting anything."""

from __future__ import annotations

import argparse

from retinue.cli.common import OK, load_team_file
from retinue.cli.pricing import warn_unpriced
from retinue.protocol.graph import validate_graph

__all__ = ["cmd_validate"]


def cmd_validate(args: argparse.Namespace) -> int:
    """``retinue validate TEAM [--import-runners]`` (the checks are :meth:`Team.check`)."""
    team = load_team_file(args.team, None)
    team.check(import_runners=args.import_runners)
    depths = validate_graph({n: s.subagents for n, s in team.agents.items()}, team.limits.depth_cap)
    print(
        f"{args.team}: ok — {len(team.agents)} agents, lead {team.lead!r} at /root/{team.name}, "
        f"delegation depth {depths[team.lead]} (cap {team.limits.depth_cap})"
    )
    for name, spec in team.agents.items():
        model = team.setting(name, "model") or "-"
        tools = team.setting(name, "tools") or "-"
        children = ", ".join(spec.subagents) or "-"
        print(f"  {name}: model {model}, tools {tools}, subagents {children}")
    warn_unpriced(team)
    return OK
