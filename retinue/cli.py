"""The ``retinue`` command: run the demo tree live, or inspect a store.

``retinue demo`` runs a three-level team (a lead, reviewers, checkers) built
from Python runners on a durable store, drawing the tree live as its agents
move through their states. ``retinue tree STORE`` opens a store read-only
(safe while a writer runs) and prints its tree. ``retinue compact STORE``
compacts a store that no runtime holds.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.tree import Tree as RichTree

from retinue.errors import RetinueError
from retinue.protocol.messages import AgentInfo, AgentState, Completion
from retinue.protocol.text import safe_terminal_text

__all__ = ["main"]

_STYLE = {
    AgentState.STARTING: "yellow",
    AgentState.RUNNING: "bold cyan",
    AgentState.COMPLETED: "green",
    AgentState.FAILED: "bold red",
    AgentState.INTERRUPTED: "magenta",
    AgentState.CLOSED: "dim",
}


def render(agents: Sequence[AgentInfo], title: str) -> RichTree:
    """Draw agents as a rich tree under ``/root``, each with its state and output."""
    root = RichTree(f"[bold]{title}[/]")
    nodes = {"/root": root}
    for agent in sorted(agents, key=lambda a: (a.depth, a.created_at)):
        parent = nodes.get(agent.parent_path, root)
        style = _STYLE.get(agent.state, "")
        text = agent.output if agent.output is not None else agent.error or ""
        line = (
            f"[{style}]{agent.name}[/] [dim]{agent.profile}[/] "
            f"[{style}]{agent.state}[/] g{agent.generation}"
        )
        if text:
            line += "  " + safe_terminal_text(text, 60).replace("[", r"\[").replace("\n", " ")
        nodes[agent.path] = parent.add(line)
    return root


def _demo(args: argparse.Namespace) -> int:
    from retinue.actors.profile import Profile
    from retinue.actors.turn import Turn
    from retinue.runtime import Runtime

    rng = random.Random(args.seed)
    slow = float(args.slow)
    pause = threading.Lock()

    def delay() -> float:
        with pause:
            return rng.uniform(0.05, 0.25) * slow

    def checker(turn: Turn) -> str:
        time.sleep(delay())
        return f"checked {turn.task}"

    def reviewer(turn: Turn) -> str:
        results = turn.run_many([("checker", f"{turn.task}/{p}") for p in ("auth", "io")])
        ok = sum(1 for r in results if not isinstance(r, RetinueError))
        time.sleep(delay())
        return f"{ok}/{len(results)} checks of {turn.task}"

    def lead(turn: Turn) -> str:
        areas = [f"area_{i}" for i in range(args.reviewers)]
        results = turn.run_many([("reviewer", area) for area in areas], timeout=60)
        lines = [r.output or "" for r in results if not isinstance(r, RetinueError)]
        return f"review done: {len(lines)} reports"

    profiles = [
        Profile("lead", subagents=["reviewer"], runner=lead),
        Profile("reviewer", subagents=["checker"], runner=reviewer),
        Profile("checker", runner=checker),
    ]
    console = Console()
    changed = threading.Event()
    with Runtime.open(args.store, profiles=profiles, durability=args.durability) as rt:
        rt.subscribe(lambda event: changed.set())
        started = time.perf_counter()
        info = rt.spawn("lead", "review the service")
        done: list[object] = []

        def wait() -> None:
            done.append(rt.wait(info.id, timeout=120))
            changed.set()

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()

        def tree_of() -> RichTree:
            mine = [a for a in rt.agents() if a.path.startswith(info.path)]
            return render(mine, f"retinue demo  store={rt.path}")

        with Live(tree_of(), console=console, refresh_per_second=12) as live:
            while not done:
                changed.wait(0.1)
                changed.clear()
                live.update(tree_of())
            live.update(tree_of())
        elapsed = time.perf_counter() - started
        completion = done[0]
        assert isinstance(completion, Completion)
        count = sum(1 for a in rt.agents() if a.path.startswith(info.path))
    console.print()
    console.print(f"[green]{completion.status}[/]: {completion.output}")
    console.print(
        f"{count} agents settled in {elapsed:.2f}s; inspect with: retinue tree {args.store}"
    )
    return 0


def _tree(args: argparse.Namespace) -> int:
    from retinue.runtime import Runtime

    rt = Runtime.open(args.store, readonly=True)
    try:
        agents = rt.agents(include_closed=args.all)
        console = Console()
        console.print(render(agents, f"{args.store} ({len(agents)} agents)"))
        for diag in rt.diagnostics:
            console.print(f"[yellow]diagnostic[/] {diag.code} {diag.key}: {diag.message}")
    finally:
        rt.shutdown()
    return 0


def _compact(args: argparse.Namespace) -> int:
    from retinue.errors import StoreError
    from retinue.runtime import Runtime

    if not (Path(args.store) / "data.mdb").exists():
        raise StoreError(f"no retinue store at {args.store}")
    with Runtime.open(args.store, profiles=[], runner=lambda turn: "") as rt:
        print(rt.compact())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``retinue`` command; return its exit code."""
    parser = argparse.ArgumentParser(prog="retinue", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a three-level agent team live on a durable store")
    demo.add_argument("--store", default="retinue-demo", help="store folder (created)")
    demo.add_argument("--reviewers", type=int, default=3, help="reviewers under the lead")
    demo.add_argument("--durability", choices=["full", "buffered"], default="full")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--slow", type=float, default=1.0, help="scale runner delays")
    tree = sub.add_parser("tree", help="print a store's tree (read-only, safe beside a writer)")
    tree.add_argument("store")
    tree.add_argument("--all", action="store_true", help="include closed agents")
    compact = sub.add_parser("compact", help="compact a store no runtime holds")
    compact.add_argument("store")
    args = parser.parse_args(argv)
    handlers = {"demo": _demo, "tree": _tree, "compact": _compact}
    try:
        return handlers[args.command](args)
    except RetinueError as exc:
        print(f"retinue: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
