"""The retinue command: run agent teams from team files, watch them live, resume them.

Commands:
  demo      run the bundled code-review team on the offline model, in a fresh store
  run       run a team file's lead on a task and draw the tree live
  resume    resume every interrupted agent of a store and wait for the tree to settle
  tree      print a store's agents by path (read-only; works beside a running writer)
  inspect   show one agent: state, task, output, error, mailbox, usage, transcript
  validate  check a team file without running it
  backup    write a compacted copy of a store
  compact   remove old closed agents and read messages from a store
  mcp       serve a store over MCP (stdio, or streamable HTTP on loopback)
  web       serve a live view of a store in the browser (read-only; extra: web)

Exit codes: 0 completed, 1 an agent failed, 2 usage or input error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from retinue.errors import RetinueError, StoreLocked, TeamFileError, UnknownAgent
from retinue.protocol.messages import AgentState
from retinue.protocol.text import safe_terminal_text
from retinue.view import (
    FAILED,
    INTERRUPTED,
    OK,
    USAGE,
    clip,
    follow,
    make_view,
    ordered,
    plain_row,
    receive,
    report,
    stop_on_signals,
    table,
    usage_of,
)

if TYPE_CHECKING:
    from retinue.runtime import Runtime
    from retinue.team import Team

__all__ = ["main"]

STORE_ENV = "RETINUE_STORE"
DEFAULT_STORE = "retinue-store"
RUN_FILE = "retinue-run.json"
"""Written next to a store by ``run``: which team (and model) ``resume`` needs."""
DEMO_TASK = (
    "Review the change in the workspace (a small payments service) before it ships: "
    "security, style and tests. Report what must be fixed."
)
EPILOG = """examples:
  retinue demo
  retinue validate examples/code_review/team.toml
  retinue run examples/code_review/team.toml "Review the change" --store review-store
  retinue tree --store review-store
  retinue inspect /root/review/security --store review-store
  retinue resume --store review-store

exit codes: 0 completed, 1 an agent failed, 2 usage or input error, 130 interrupted.
"""


class UsageError(Exception):
    """A one-line input problem of the command line itself (exit code 2)."""


# -- stores and teams -----------------------------------------------------------------------


def store_path(value: str | None, *, must_exist: bool) -> Path:
    """Return the store folder named by ``--store``, ``$RETINUE_STORE`` or the default.

    Raises:
        UsageError: the path is a file, or (``must_exist``) holds no store.
    """
    path = Path(value or os.environ.get(STORE_ENV) or DEFAULT_STORE)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--store {path} is a file; a store is a folder (give a folder path)")
    # A folder whose marker survives its data file is a damaged store: let the open say so.
    if must_exist and not (path / "data.mdb").is_file() and not (path / "retinue.json").exists():
        raise UsageError(
            f"no retinue store at {path} (start one with 'retinue run', or pass --store DIR)"
        )
    return path


def _open(path: Path, **kwargs: Any) -> Runtime:
    from retinue.runtime import Runtime

    try:
        return Runtime.open(path, **kwargs)
    except StoreLocked as exc:
        holder = f"process {exc.pid}" if exc.pid is not None else "another process"
        raise UsageError(
            f"store {path} is in use by {holder}; wait for it to finish or stop it "
            f"('retinue tree --store {path}' and 'retinue inspect' can read it meanwhile)"
        ) from None
    except FileExistsError:
        raise UsageError(f"--store {path} is not a folder") from None


def _load(team_file: str, model: str | None) -> Team:
    from retinue.team import load_team

    team = load_team(team_file)
    return team.with_model(model) if model else team


def _save_run(store: Path, team: Team, model: str | None, workspace: Path | None) -> None:
    assert team.source is not None
    record = {
        "team": str(team.source.resolve()),
        "team_toml": team.source.read_text(encoding="utf-8"),
        "model": model,
        "workspace": str(workspace.resolve()) if workspace is not None else None,
    }
    (store / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _saved_run(store: Path, team_file: str | None, model: str | None) -> tuple[Team, Path | None]:
    from retinue.team import Team

    if team_file is not None:
        team = _load(team_file, model)
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


def _team_kwargs(team: Team, workspace: Path | None) -> dict[str, Any]:
    """Runtime.open arguments for a team and the folder its workspace tools work in."""
    if workspace is not None and not workspace.is_dir():
        raise UsageError(f"--workspace {workspace} is not a folder")
    return {"team": team, "workspace": workspace}


def _free_name(rt: Runtime, wanted: str) -> str:
    """``wanted``, or ``wanted_2``, ``wanted_3``... the first not held by a live agent."""
    for n in range(1, 10_000):
        name = wanted if n == 1 else f"{wanted[:36]}_{n}"
        try:
            rt.get(f"/root/{name}")
        except UnknownAgent:
            return name
    raise UsageError(f"every name like {wanted!r} is taken; pass --name")


# -- commands ---------------------------------------------------------------------------------


def _execute(
    args: argparse.Namespace, team: Team, store: Path, task: str, workspace: Path | None
) -> int:
    from retinue.errors import DuplicateAgentPath

    view = make_view(args.json)
    stop = threading.Event()
    agent = args.agent or team.lead
    if agent not in team.agents:
        raise UsageError(
            f"--agent {agent!r} is not an agent of the team ({', '.join(team.agents)})"
        )
    durability = getattr(args, "durability", None) or team.defaults.durability
    with stop_on_signals(stop):
        rt = _open(store, durability=durability, **_team_kwargs(team, workspace))
        web = None
        try:
            web = _start_web(rt, getattr(args, "web", None))
            if team.source is not None:
                _save_run(store, team, getattr(args, "model", None), workspace)
            name = args.name or _free_name(rt, team.name)
            root = f"/root/{name}"
            view.start(f"retinue  {agent} -> {root}  store={store}")

            def start() -> None:
                try:
                    rt.spawn(agent, task, name=name)
                except DuplicateAgentPath:
                    raise UsageError(
                        f"{root} is already in {store}; pass another --name or close it first"
                    ) from None

            try:
                outcome = follow(rt, [root], view, start, stop)
            finally:
                view.stop()
            if not outcome.interrupted:
                receive(rt, [root])
        finally:
            if stop.is_set():
                print("retinue: interrupting every running agent…", file=sys.stderr, flush=True)
            if web is not None:
                web.stop()
            rt.shutdown()
    return report(outcome, [root], store, view, sys.stdout)


def _start_web(rt: Runtime, address: str | None) -> Any:
    """Serve the run's live web view on ``address`` when ``--web`` was given."""
    if not address:
        return None
    from retinue.web import start_web

    web = start_web(rt, address)
    print(f"retinue: live view at {web.url}", file=sys.stderr, flush=True)
    return web


def cmd_web(args: argparse.Namespace) -> int:
    """``retinue web``: serve a store's live view in the browser, read-only."""
    from retinue.web.command import run_web

    return run_web(store_path(args.store, must_exist=True), args.host, args.port)


def cmd_demo(args: argparse.Namespace) -> int:
    """``retinue demo``: the bundled code-review team on a fresh store."""
    example = Path(__file__).resolve().parent.parent / "examples" / "code_review" / "team.toml"
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
    team = _load(str(example), args.model)
    workspace = Path(args.workspace) if args.workspace else team.workspace
    args.agent = None
    args.name = None
    return _execute(args, team, store, args.task or DEMO_TASK, workspace)


def cmd_run(args: argparse.Namespace) -> int:
    """``retinue run TEAM TASK``."""
    team = _load(args.team, args.model)
    store = store_path(args.store, must_exist=False)
    workspace = Path(args.workspace) if args.workspace else team.workspace
    if not args.task.strip():
        raise UsageError("TASK is empty; say what the team should do")
    return _execute(args, team, store, args.task, workspace)


def cmd_resume(args: argparse.Namespace) -> int:
    """``retinue resume``: resume every interrupted agent and follow the trees."""
    store = store_path(args.store, must_exist=True)
    team, workspace = _saved_run(store, args.team, args.model)
    view = make_view(args.json)
    stop = threading.Event()
    with stop_on_signals(stop):
        rt = _open(store, **_team_kwargs(team, workspace))
        try:
            waiting = [a for a in rt.agents() if a.state is AgentState.INTERRUPTED]
            if not waiting:
                print(f"nothing to resume: no interrupted agent in {store}", file=sys.stderr)
                return OK
            roots = sorted({"/".join(a.path.split("/")[:3]) for a in waiting})
            view.start(f"retinue resume  {len(waiting)} agents  store={store}")

            def start() -> None:
                # Parents first: a parent is busy again before a child settles, so
                # the child's completion reaches the resumed turn instead of waking
                # the parent for a second, separate turn.
                for agent in sorted(waiting, key=lambda a: (a.depth, a.created_at)):
                    rt.resume(agent.id)

            try:
                outcome = follow(rt, roots, view, start, stop)
            finally:
                view.stop()
            if not outcome.interrupted:
                receive(rt, roots)
        finally:
            if stop.is_set():
                print("retinue: interrupting every running agent…", file=sys.stderr, flush=True)
            rt.shutdown()
    return report(outcome, roots, store, view, sys.stdout)


def _reader(store: Path) -> Runtime:
    from retinue.runtime import Runtime

    return Runtime.open(store, readonly=True)


def cmd_tree(args: argparse.Namespace) -> int:
    """``retinue tree``: every agent by path, read-only."""
    store = store_path(args.store or args.store_pos, must_exist=True)
    rt = _reader(store)
    try:
        agents = ordered(rt.agents(include_closed=args.all))
        diagnostics = list(rt.diagnostics)
    finally:
        rt.shutdown()
    if args.json:
        for agent in agents:
            sys.stdout.write(msgspec.json.encode(agent).decode() + "\n")
        return OK
    if sys.stdout.isatty():
        from rich.console import Console

        Console().print(table(agents, f"{store}: {len(agents)} agents"))
    else:
        print(f"{store}: {len(agents)} agents")
        now = time.time()
        for agent in agents:
            print(plain_row(agent, now))
    for diag in diagnostics:
        print(f"diagnostic {diag.code} {diag.key}: {diag.message}", file=sys.stderr)
    return OK


def cmd_inspect(args: argparse.Namespace) -> int:
    """``retinue inspect REF``: one agent in full, read-only."""
    store = store_path(args.store, must_exist=True)
    rt = _reader(store)  # one consistent snapshot, read-only: safe beside the store's writer
    try:
        detail = rt.inspect(args.ref, transcript_tail=10)
    except UnknownAgent:
        raise UsageError(
            f"no agent {args.ref!r} in {store} (see 'retinue tree --store {store}')"
        ) from None
    finally:
        rt.shutdown()
    info = detail.info
    unread, pending = detail.unread, detail.pending
    transcript = [msgspec.to_builtins(m) for m in detail.transcript]
    if args.json:
        payload = {
            "agent": msgspec.to_builtins(info),
            "unread": msgspec.to_builtins(unread),
            "pending_completions": msgspec.to_builtins(pending),
            "transcript_tail": transcript,
        }
        print(json.dumps(payload))
        return OK
    tokens, cost = usage_of(info)
    rows = [
        ("path", info.path),
        ("id", info.id),
        ("profile", info.profile),
        ("state", f"{info.state.value} (generation {info.generation})"),
        ("task", info.task),
        ("output", info.output if info.output is not None else "-"),
        ("error", info.error if info.error is not None else "-"),
        ("usage", f"{tokens:,} tokens, ${cost:.4f}" if tokens else "-"),
        ("unread", f"{len(unread)} messages"),
    ]
    for key, value in rows:
        print(f"{key:<9} {safe_terminal_text(value, 4000)}")
    for message in unread:
        print(f"  from {message.sender} ({message.kind}): {clip(message.content, 200)}")
    print(f"pending   {len(pending)} completions of children not yet received")
    for completion in pending:
        print(f"  {completion.path} g{completion.generation} {completion.status.value}")
    print(f"transcript {len(transcript)} latest messages" if transcript else "transcript -")
    for entry in transcript:
        print(f"  {_entry_line(entry)}")
    return OK


def _entry_line(entry: dict[str, Any]) -> str:
    role = str(entry.get("role", "?"))
    text = entry.get("content")
    calls = entry.get("tool_calls") or []
    parts = [str(text)] if text else []
    for call in calls:
        parts.append(f"-> {call.get('name', '?')}({call.get('arguments', '')})")
    return f"{role}: {clip(' '.join(parts), 200)}"


def cmd_validate(args: argparse.Namespace) -> int:
    """``retinue validate TEAM``."""
    from retinue.protocol.graph import validate_graph

    team = _load(args.team, None)
    team.profiles(runner=lambda turn: "")
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
    return OK


def cmd_backup(args: argparse.Namespace) -> int:
    """``retinue backup DEST``: a compacted copy, read beside any running writer."""
    store = store_path(args.store, must_exist=True)
    dest = Path(args.dest)
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"backup destination {dest} is a file; give a folder")
    rt = _reader(store)
    try:
        copy = rt.backup(dest)
        count = len(rt.agents(include_closed=True))
    finally:
        rt.shutdown()
    print(f"backed up {store} ({count} agents) to {copy}; open it with --store {copy}")
    return OK


def cmd_compact(args: argparse.Namespace) -> int:
    """``retinue compact``: remove what retention no longer keeps."""
    store = store_path(args.store or args.store_pos, must_exist=True)
    rt = _open(store, profiles=[], runner=lambda turn: "")
    try:
        result = rt.compact()
    finally:
        rt.shutdown()
    print(
        f"compacted {store}: removed {result.agents} closed agents, {result.messages} read "
        f"messages and {result.completions} delivered completions"
    )
    return OK


def cmd_mcp(args: argparse.Namespace) -> int:
    """``retinue mcp``: serve a store over MCP (see :mod:`retinue.mcp`)."""
    from retinue.mcp.serve import serve

    return serve(args, store_path(args.store, must_exist=False))


# -- argument parsing ----------------------------------------------------------------------------


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keep the descriptions' line breaks; add a default the help does not already say."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" not in text
            and default not in (None, False, argparse.SUPPRESS)
            and action.option_strings
        ):
            text += f" (default: {default})"
        return text


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("retinue")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The ``retinue`` argument parser with every subcommand."""
    store_help = f"store folder (default: ${STORE_ENV}, else ./{DEFAULT_STORE})"
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the Python traceback of an error",
    )
    parser = argparse.ArgumentParser(
        prog="retinue",
        description="Run agent teams from team files, watch them live, resume them.",
        epilog=EPILOG,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"retinue {_version()}")
    parser.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=summary,
            description=description,
            parents=[common],
            formatter_class=_Formatter,
        )

    def run_options(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--model", help="use this litellm model for every agent (e.g. openai/gpt-4o-mini)"
        )
        p.add_argument(
            "--workspace",
            help="folder the workspace tools read (default: the team's [defaults] workspace)",
        )
        p.add_argument(
            "--durability",
            choices=["full", "buffered"],
            help="fsync every step (full) or every second (buffered); "
            "default: the team's, else full",
        )
        p.add_argument(
            "--json", action="store_true", help="print one JSON event per line instead of the tree"
        )
        p.add_argument(
            "--web",
            nargs="?",
            const="127.0.0.1:8321",
            metavar="HOST:PORT",
            help="also serve the live web view of the run (default: 127.0.0.1:8321; extra: web)",
        )

    demo = add(
        "demo",
        "run the bundled code-review team on the offline model",
        "Run examples/code_review (a lead delegating to security, style and test\n"
        "reviewers, which delegate further) on the offline model retinue/scripted\n"
        "against its sample workspace, in a fresh store, drawing the tree live.",
    )
    demo.add_argument(
        "--store", help="a new or empty folder for the store (default: a fresh temporary folder)"
    )
    demo.add_argument(
        "--task", help="the task given to the lead (default: review the sample change)"
    )
    run_options(demo)
    demo.set_defaults(handler=cmd_demo)

    run = add(
        "run",
        "run a team file's lead on a task",
        "Start the team's lead (or --agent) as /root/<name> on TASK, draw the tree\n"
        "live until every agent settles, then print the lead's answer. Ctrl-C\n"
        "interrupts every agent and saves them for 'retinue resume'.",
    )
    run.add_argument("team", metavar="TEAM", help="team file (TOML)")
    run.add_argument("task", metavar="TASK", help="what the lead should do")
    run.add_argument("--agent", help="agent of the team to start (default: the team's lead)")
    run.add_argument(
        "--name", help="name of the top-level agent (default: the team's name, made unique)"
    )
    run.add_argument("--store", help=store_help)
    run_options(run)
    run.set_defaults(handler=cmd_run)

    resume = add(
        "resume",
        "resume every interrupted agent of a store",
        "Re-run every interrupted agent (after Ctrl-C or a crash) with the team the\n"
        "store was run with, and draw the tree until it settles.",
    )
    resume.add_argument("--store", help=store_help)
    resume.add_argument("--team", help="team file to use (default: the one the store was run with)")
    resume.add_argument("--model", help="use this litellm model for every agent")
    resume.add_argument("--json", action="store_true", help="print one JSON event per line")
    resume.set_defaults(handler=cmd_resume)

    tree = add(
        "tree",
        "print a store's agents by path (read-only)",
        "Print every agent of a store with its path, profile, state, time, tokens\n"
        "and result. Read-only: safe while another process runs the store.",
    )
    tree.add_argument("store_pos", nargs="?", metavar="STORE", help=argparse.SUPPRESS)
    tree.add_argument("--store", help=store_help)
    tree.add_argument("--all", action="store_true", help="include closed agents")
    tree.add_argument(
        "--json", action="store_true", help="print one JSON object per agent and line"
    )
    tree.set_defaults(handler=cmd_tree)

    inspect = add(
        "inspect",
        "show one agent in full (read-only)",
        "Show an agent's state, generation, task, output, error, unread messages,\n"
        "pending completions, usage and the tail of its transcript. Read-only.",
    )
    inspect.add_argument("ref", metavar="REF", help="agent path (/root/review/security) or id")
    inspect.add_argument("--store", help=store_help)
    inspect.add_argument("--json", action="store_true", help="print one JSON object")
    inspect.set_defaults(handler=cmd_inspect)

    validate = add(
        "validate",
        "check a team file without running it",
        "Decode a team file strictly (unknown keys and wrong types are errors that\n"
        "name the table and key) and check its delegation graph against the depth cap.",
    )
    validate.add_argument("team", metavar="TEAM", help="team file (TOML)")
    validate.set_defaults(handler=cmd_validate)

    backup = add(
        "backup",
        "write a compacted copy of a store",
        "Write a consistent, compacted copy of a store into DEST (a new folder).\n"
        "Works while another process runs the store.",
    )
    backup.add_argument("dest", metavar="DEST", help="new folder for the copy")
    backup.add_argument("--store", help=store_help)
    backup.set_defaults(handler=cmd_backup)

    compact = add(
        "compact",
        "remove old closed agents and read messages from a store",
        "Remove what the retention limits no longer keep (closed agents, read\n"
        "messages, delivered completions). Needs the store to be free of writers.",
    )
    compact.add_argument("store_pos", nargs="?", metavar="STORE", help=argparse.SUPPRESS)
    compact.add_argument("--store", help=store_help)
    compact.set_defaults(handler=cmd_compact)

    from retinue.mcp.options import add_arguments as mcp_arguments

    mcp = add(
        "mcp",
        "serve a store over MCP (stdio, or streamable HTTP on loopback)",
        "Serve a store's trees to an MCP client (Claude Code, an IDE): tools run_team,\n"
        "spawn, wait, send, tree, inspect, interrupt, close, resume; resources\n"
        "retinue://tree and retinue://agent/{path}. Needs pip install 'retinue[mcp]'.",
    )
    mcp_arguments(mcp, store_help)
    mcp.set_defaults(handler=cmd_mcp)
    web = add(
        "web",
        "serve a live view of a store in the browser (read-only)",
        "Serve a page that shows a store's tree live (states, tokens, cost, the tool\n"
        "in progress), an agent's detail and transcript, and a timeline. Read-only:\n"
        "safe while another process runs the store. Needs: pip install 'retinue[web]'.",
    )
    web.add_argument("--store", help=store_help)
    web.add_argument("--host", default="127.0.0.1", help="address to listen on")
    web.add_argument("--port", type=int, default=8321, help="port to listen on (0: any free one)")
    web.set_defaults(handler=cmd_web)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``retinue`` command; return its exit code (0, 1, 2 or 130)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("\nretinue: interrupted", file=sys.stderr)
        return INTERRUPTED
    except (UsageError, TeamFileError) as exc:
        if debug:
            traceback.print_exc()
        print(f"retinue: {exc}", file=sys.stderr)
        return USAGE
    except RetinueError as exc:
        if debug:
            traceback.print_exc()
        print(f"retinue: {type(exc).__name__}: {exc}", file=sys.stderr)
        return USAGE
    except BrokenPipeError:  # the reader of our output went away (| head): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return FAILED
    except OSError as exc:
        if debug:
            traceback.print_exc()
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"retinue: {exc.strerror or exc}{where}", file=sys.stderr)
        return USAGE
    except Exception as exc:
        if debug:
            raise
        print(
            f"retinue: internal error: {type(exc).__name__}: {clip(str(exc), 300)} "
            "(rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return FAILED


if __name__ == "__main__":
    sys.exit(main())
