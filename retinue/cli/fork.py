"""``retinue fork REF``: copy an agent (and its subtree) as of a past generation, settled."""

from __future__ import annotations

import argparse

from retinue.cli.common import OK, UsageError, open_store, store_path
from retinue.cli.render import fork_text
from retinue.cli.session import saved_run, team_kwargs
from retinue.errors import UnknownAgent

__all__ = ["cmd_fork"]


def cmd_fork(args: argparse.Namespace) -> int:
    """``retinue fork REF [--at N] [--name NAME]``: record the fork and print its agents.

    The store is opened for writing with the team it was run with (its
    profiles decide what the fork's parent may hold), nothing is run.

    Raises:
        UsageError: no such agent, or the store is in use.
        RetinueError: the fork is refused (a cap, a generation not kept...).
    """
    store = store_path(args.store, must_exist=True)
    team, workspace = saved_run(store, args.team, None)
    rt = open_store(store, **team_kwargs(team, workspace))
    try:
        try:
            fork = rt.fork(
                args.ref, at=args.at, name=args.name, parent=args.parent, tree=not args.no_tree
            )
        except UnknownAgent:
            raise UsageError(
                f"no agent {args.ref!r} in {store} (see 'retinue tree --store {store}')"
            ) from None
        copies = [
            a for a in rt.agents() if a.path == fork.path or a.path.startswith(fork.path + "/")
        ]
    finally:
        rt.shutdown()
    origin = fork.forked_from
    assert origin is not None
    print(
        f"forked {origin.path} as of generation {origin.generation}: {fork.path} "
        f"({len(copies)} agents, settled)"
    )
    for copy in copies:
        print(f"  {copy.path}  {copy.profile}  {copy.state.value}{fork_text(copy)}")
    return OK
