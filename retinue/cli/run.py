"""``retinue run``, ``retinue demo`` and ``retinue resume``: trees run live on a store."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from retinue.cli.approve import approver_for
from retinue.cli.common import UsageError, load_team_file, store_path
from retinue.cli.extras import web_request
from retinue.cli.pricing import warn_unpriced
from retinue.cli.session import Plan, free_name, run_session, save_run, saved_run, team_kwargs
from retinue.protocol.messages import AgentState

if TYPE_CHECKING:
    from retinue.runtime import Runtime
    from retinue.team import Team

__all__ = ["DEMO_TASK", "cmd_demo", "cmd_resume", "cmd_run"]

DEMO_TASK = (
    "Review the change in the workspace (a small payments service) before it ships: "
    "security, style and tests. Report what must be fixed."
)


def _execute(
    args: argparse.Namespace, team: Team, store: Path, task: str, workspace: Path | None
) -> int:
    """Start the team's lead (or ``--agent``) on ``task`` and follow its tree."""
    from retinue.errors import DuplicateAgentPath

    agent = args.agent or team.lead
    if agent not in team.agents:
        raise UsageError(
            f"--agent {agent!r} is not an agent of the team ({', '.join(team.agents)})"
        )
    durability = getattr(args, "durability", None) or team.defaults.durability

    def plan(rt: Runtime) -> Plan:
        if team.source is not None:
            save_run(store, team, getattr(args, "model", None), workspace)
        name = args.name or free_name(rt, team.name)
        root = f"/root/{name}"

        def start() -> None:
            try:
                rt.spawn(agent, task, name=name)
            except DuplicateAgentPath:
                raise UsageError(
                    f"{root} is already in {store}; pass another --name or close it first"
                ) from None

        return Plan(f"retinue  {agent} -> {root}  store={store}", [root], start)

    open_kwargs = {"durability": durability, **team_kwargs(team, workspace)}
    web = web_request(args)
    warn_unpriced(team)
    return run_session(
        store,
        open_kwargs,
        plan,
        json_mode=args.json,
        web=web,
        approver=lambda rt, roots: approver_for(rt, roots, args),
    )


def cmd_demo(args: argparse.Namespace) -> int:
    """``retinue demo``: the bundled code-review team on a fresh store."""
    example = Path(__file__).resolve().parents[2] / "examples" / "code_review" / "team.toml"
    if not example.is_file():
        raise UsageError(
            f"the demo team ships with retinue's source tree and is not at {example}; "
            "run the demo from a clone (./dev demo)"
        )
    if args.store is None:
        store = Path(tempfile.mkdtemp(prefix="retinue-demo-"))
    else:
        store = Path(args.store)
        if store.exists() and not store.is_dir():
            raise UsageError(f"--store {store} is a file; the demo needs a new, empty folder")
        if store.is_dir() and any(store.iterdir()):
            raise UsageError(
                f"--store {store} is not empty; the demo runs on a fresh store "
                "(pick a new folder, or leave out --store for a temporary one)"
            )
    team = load_team_file(str(example), args.model)
    workspace = Path(args.workspace) if args.workspace else team.workspace
    args.agent = None
    args.name = None
    return _execute(args, team, store, args.task or DEMO_TASK, workspace)


def cmd_run(args: argparse.Namespace) -> int:
    """``retinue run TEAM TASK``."""
    team = load_team_file(args.team, args.model)
    store = store_path(args.store, must_exist=False)
    workspace = Path(args.workspace) if args.workspace else team.workspace
    if not args.task.strip():
        raise UsageError("TASK is empty; say what the team should do")
    team = _taped(args, team)
    return _execute(args, team, store, args.task, workspace)


def _taped(args: argparse.Namespace, team: Team) -> Team:
    """``team`` recording to (``--record``) or replaying (``--replay``) a cassette.

    Raises:
        UsageError: ``--redact`` without ``--record``, or a replay of no file.
    """
    redact = list(args.redact or [])
    if redact and args.record is None:
        raise UsageError("--redact applies to what --record writes; add --record CASSETTE")
    if args.record is not None:
        return team.with_runner_settings(cassette=args.record, mode="record", redact=redact)
    if args.replay is not None:
        if not Path(args.replay).is_file():
            raise UsageError(f"--replay {args.replay}: no such cassette; record one with --record")
        return team.with_runner_settings(cassette=args.replay, mode="replay")
    return team


def cmd_resume(args: argparse.Namespace) -> int:
    """``retinue resume``: resume every interrupted agent and follow the trees (REF: one)."""
    if getattr(args, "ref", None) is not None:
        from retinue.cli.act import cmd_resume_agent

        return cmd_resume_agent(args)
    store = store_path(args.store, must_exist=True)
    team, workspace = saved_run(store, args.team, args.model)

    def plan(rt: Runtime) -> Plan | None:
        agents = rt.agents()
        waiting = [a for a in agents if a.state is AgentState.INTERRUPTED]
        # Restarts and approvals kept in the store carry on by themselves: follow them too.
        pending = [a for a in agents if a.state.busy]
        if not waiting and not pending:
            print(f"nothing to resume: no interrupted agent in {store}", file=sys.stderr)
            return None
        roots = sorted({"/".join(a.path.split("/")[:3]) for a in [*waiting, *pending]})

        def start() -> None:
            # Parents first: a parent is busy again before a child settles, so
            # the child's completion reaches the resumed turn instead of waking
            # the parent for a second, separate turn.
            for agent in sorted(waiting, key=lambda a: (a.depth, a.created_at)):
                rt.resume(agent.id)

        count = len(waiting) + len(pending)
        return Plan(f"retinue resume  {count} agents  store={store}", roots, start)

    web = web_request(args)
    return run_session(
        store,
        team_kwargs(team, workspace),
        plan,
        json_mode=args.json,
        web=web,
        approver=lambda rt, roots: approver_for(rt, roots, args),
    )
