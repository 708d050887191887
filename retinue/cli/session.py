"""One run of trees on a writable store, as ``run``, ``demo`` and ``resume`` do it.

:func:`run_session` is the skeleton all three share: open the store, serve
the web view when asked, plan what to start (a :class:`Plan`), follow the
trees live until they settle or Ctrl-C, take the host's completions, close,
report. The helpers below remember the team a store was run with
(``retinue-run.json``), so ``resume`` needs no arguments.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retinue.cli.approve import Approver
from retinue.cli.common import OK, RUN_FILE, UsageError, load_team_file, open_store
from retinue.cli.extras import WebRequest, start_web
from retinue.cli.follow import Outcome, follow, receive, report, stop_on_signals
from retinue.cli.render import make_view
from retinue.errors import UnknownAgent

if TYPE_CHECKING:
    from retinue.runtime import Runtime
    from retinue.team import Team

__all__ = ["Plan", "free_name", "run_session", "save_run", "saved_run", "team_kwargs"]


@dataclass(frozen=True)
class Plan:
    """What a session starts: its title, the roots it follows, and how it starts them."""

    title: str
    roots: list[str]
    start: Callable[[], None]


def run_session(
    store: Path,
    open_kwargs: dict[str, Any],
    plan: Callable[[Runtime], Plan | None],
    *,
    json_mode: bool,
    web: WebRequest | None = None,
    approver: Callable[[Runtime, Sequence[str]], Approver] | None = None,
) -> int:
    """Open ``store``, start what ``plan`` says and follow it to the end; return the exit code.

    ``plan(rt)`` returns None when there is nothing to do (exit 0). Ctrl-C
    interrupts every running agent, saves the tree and exits 130.
    ``approver(rt, roots)`` answers the trees' approval requests meanwhile.

    Raises:
        UsageError: the store is in use, or the plan refuses the arguments.
    """
    view = make_view(json_mode)
    stop = threading.Event()
    outcome: Outcome | None = None
    with stop_on_signals(stop):
        rt = open_store(store, **open_kwargs)
        server = None
        try:
            server = start_web(rt, web)
            chosen = plan(rt)
            if chosen is None:
                return OK
            view.start(chosen.title)
            answers = None if approver is None else approver(rt, chosen.roots)
            tick = None if answers is None else lambda batch: answers.tick(batch, view, stop)
            try:
                outcome = follow(rt, chosen.roots, view, chosen.start, stop, tick)
            finally:
                view.stop()
            if not outcome.interrupted:
                receive(rt, chosen.roots)
        finally:
            if stop.is_set():
                print("retinue: interrupting every running agent…", file=sys.stderr, flush=True)
            if server is not None:
                server.stop()
            rt.shutdown()
    return report(outcome, chosen.roots, store, view, sys.stdout)


def save_run(store: Path, team: Team, model: str | None, workspace: Path | None) -> None:
    """Record next to ``store`` the team (and model, workspace) it is run with."""
    assert team.source is not None
    record = {
        "team": str(team.source.resolve()),
        "team_toml": team.source.read_text(encoding="utf-8"),
        "model": model,
        "workspace": str(workspace.resolve()) if workspace is not None else None,
    }
    (store / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def saved_run(store: Path, team_file: str | None, model: str | None) -> tuple[Team, Path | None]:
    """Return the team ``store`` was run with (or ``team_file``), and its workspace.

    Raises:
        UsageError: the store has no (readable) record and no team was named.
    """
    from retinue.team import Team

    if team_file is not None:
        team = load_team_file(team_file, model)
        return team, team.workspace
    try:
        record = json.loads((store / RUN_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(
            f"{store} was not started by 'retinue run'; name its team with --team FILE"
        ) from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{store / RUN_FILE} is unreadable ({exc}); pass --team FILE") from None
    team = Team.from_toml(record["team_toml"], source=record["team"])
    chosen = model or record.get("model")
    if chosen:
        team = team.with_model(chosen)
    workspace = record.get("workspace")
    return team, Path(workspace) if workspace else team.workspace


def team_kwargs(team: Team, workspace: Path | None) -> dict[str, Any]:
    """Runtime.open arguments for a team and the folder its workspace tools work in."""
    if workspace is not None and not workspace.is_dir():
        raise UsageError(f"--workspace {workspace} is not a folder")
    return {"team": team, "workspace": workspace}


def free_name(rt: Runtime, wanted: str) -> str:
    """``wanted``, or ``wanted_2``, ``wanted_3``... the first not held by a live agent."""
    for n in range(1, 10_000):
        name = wanted if n == 1 else f"{wanted[:36]}_{n}"
        try:
            rt.get(f"/root/{name}")
        except UnknownAgent:
            return name
    raise UsageError(f"every name like {wanted!r} is taken; pass --name")
