"""The ``retinue`` argument parser: one function per group of subcommands."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from retinue.cli.act import add_actions
from retinue.cli.approve import cmd_approvals
from retinue.cli.common import store_help
from retinue.cli.extras import cmd_mcp, cmd_web
from retinue.cli.fork import cmd_fork
from retinue.cli.fuzz import add_fuzz
from retinue.cli.reads import cmd_backup, cmd_compact, cmd_inspect, cmd_tree
from retinue.cli.run import cmd_demo, cmd_resume, cmd_run
from retinue.cli.validate import cmd_validate

__all__ = ["EPILOG", "build_parser"]

Add = Callable[[str, str, str], argparse.ArgumentParser]
"""``add(name, summary, description)``: a new subcommand's parser."""

EPILOG = """examples:
  retinue demo
  retinue validate examples/code_review/team.toml
  retinue run examples/code_review/team.toml "Review the change" --store review-store
  retinue tree --store review-store
  retinue inspect /root/review/security --store review-store
  retinue approvals --store review-store
  retinue approve REQUEST_ID --store review-store
  retinue interrupt /root/review/security --tree --store review-store
  retinue resume --store review-store --approve write_file
  retinue fuzz examples/code_review/team.toml --examples 20 --crash

exit codes: 0 completed, 1 an agent failed, 2 usage or input error, 130 interrupted.
"""


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

    _add_runs(add)
    _add_fork(add)
    add_actions(add, store_help())
    _add_reads(add)
    add_fuzz(add)
    _add_extras(add)
    return parser


def _run_options(p: argparse.ArgumentParser) -> None:
    """The options every command that runs trees takes."""
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
        help="fsync every step (full) or every second (buffered); default: the team's, else full",
    )
    p.add_argument(
        "--json", action="store_true", help="print one JSON event per line instead of the tree"
    )
    _approval_options(p)
    p.add_argument(
        "--web",
        nargs="?",
        const="127.0.0.1:8321",
        metavar="HOST:PORT",
        help="also serve the live web view of the run (default: 127.0.0.1:8321; extra: web)",
    )
    _view_options(p, "with --web, ")


def _view_options(p: argparse.ArgumentParser, prefix: str) -> None:
    """--actions and --trace-url: what the web view lets an operator do and follow."""
    p.add_argument(
        "--actions",
        action="store_true",
        help=f"{prefix}let the page approve, deny, interrupt, resume and close agents "
        "(each action a POST with the page's token; off by default)",
    )
    p.add_argument(
        "--trace-url",
        metavar="URL",
        help=f"{prefix}link each agent's trace id to a tracing UI, e.g. "
        "'http://127.0.0.1:16686/trace/{trace_id}'",
    )


def _approval_options(p: argparse.ArgumentParser) -> None:
    """How a run answers its approval requests (on a terminal it asks about the others)."""
    p.add_argument(
        "--approve",
        action="append",
        metavar="TOOL",
        help="approve every call of TOOL (an MCP tool: server.tool or server.*; repeatable)",
    )
    p.add_argument(
        "--deny-unlisted",
        action="store_true",
        help="deny the calls of tools not named with --approve (instead of asking or waiting)",
    )


def _add_runs(add: Add) -> None:
    """demo, run and resume: trees run live on a store."""
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
    _run_options(demo)
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
    run.add_argument("--store", help=store_help())
    _tape_options(run)
    _run_options(run)
    run.set_defaults(handler=cmd_run)

    resume = add(
        "resume",
        "resume every interrupted agent of a store (or one: REF)",
        "Re-run every interrupted agent (after Ctrl-C or a crash) with the team the\n"
        "store was run with, and draw the tree until it settles. With REF, re-run that\n"
        "agent only: through the store's running writer (its control socket) if one\n"
        "runs, else in this process, following its tree.",
    )
    resume.add_argument("ref", nargs="?", metavar="REF", help="one agent to resume (path or id)")
    resume.add_argument("--store", help=store_help())
    resume.add_argument("--team", help="team file to use (default: the one the store was run with)")
    resume.add_argument("--model", help="use this litellm model for every agent")
    resume.add_argument("--json", action="store_true", help="print one JSON event per line")
    _approval_options(resume)
    resume.set_defaults(handler=cmd_resume)


def _tape_options(run: argparse.ArgumentParser) -> None:
    """--record / --replay CASSETTE and --redact: a run recorded, or replayed offline."""
    tape = run.add_mutually_exclusive_group()
    tape.add_argument(
        "--record",
        metavar="CASSETTE",
        help="append every model call and host tool result of the run to CASSETTE",
    )
    tape.add_argument(
        "--replay",
        metavar="CASSETTE",
        help="answer every model call from CASSETTE, offline (a call not recorded fails "
        "its agent with CassetteMiss)",
    )
    run.add_argument(
        "--redact",
        action="append",
        metavar="REGEX",
        help="with --record, replace what REGEX matches by [REDACTED] in the cassette "
        "(repeatable; API keys never reach it)",
    )


def _add_fork(add: Add) -> None:
    """fork: a settled copy of an agent and its subtree as of a past generation."""
    fork = add(
        "fork",
        "copy an agent and its subtree as of a past generation",
        "Record a settled copy of REF (default: beside it, as <name>_fork<n>) as of\n"
        "its generation --at (default: its last settled one), with its subtree as of\n"
        "then: tasks, outputs, transcripts; usage from nothing. Nothing runs: give the\n"
        "copy a turn (Runtime.follow_up) to carry on differently. Needs the store free\n"
        "of writers; uses the team the store was run with (or --team).",
    )
    fork.add_argument("ref", metavar="REF", help="agent path (/root/review/security) or id")
    fork.add_argument("--at", type=int, metavar="N", help="the generation to fork as of")
    fork.add_argument("--name", help="name of the copy (default: <name>_fork<n>)")
    fork.add_argument("--parent", help="path of the copy's parent (/root: top level)")
    fork.add_argument("--no-tree", action="store_true", help="copy REF alone, not its subtree")
    fork.add_argument("--store", help=store_help())
    fork.add_argument("--team", help="team file to use (default: the one the store was run with)")
    fork.set_defaults(handler=cmd_fork)


def _add_reads(add: Add) -> None:
    """tree, inspect, approvals, validate, backup and compact."""
    tree = add(
        "tree",
        "print a store's agents by path (read-only)",
        "Print every agent of a store with its path, profile, state, time, tokens\n"
        "and result. Read-only: safe while another process runs the store.",
    )
    tree.add_argument("store_pos", nargs="?", metavar="STORE", help=argparse.SUPPRESS)
    tree.add_argument("--store", help=store_help())
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
    inspect.add_argument("--store", help=store_help())
    inspect.add_argument("--json", action="store_true", help="print one JSON object")
    inspect.set_defaults(handler=cmd_inspect)

    approvals = add(
        "approvals",
        "list the approval requests waiting in a store (read-only)",
        "List the tool calls waiting for approval: id, tool, agent path, arguments.\n"
        "Read-only: safe while another process runs the store; that run (retinue run\n"
        "or resume) asks, or answers with --approve / --deny-unlisted.",
    )
    approvals.add_argument("--store", help=store_help())
    approvals.add_argument(
        "--json", action="store_true", help="print one JSON object per request and line"
    )
    approvals.set_defaults(handler=cmd_approvals)

    validate = add(
        "validate",
        "check a team file without running it",
        "Decode a team file strictly (unknown keys and wrong types are errors that\n"
        "name the table and key) and run every check 'retinue run' runs when it opens\n"
        "the team (delegation graph, tool ceilings, tool names, MCP grants), without\n"
        "starting anything. Runner files are checked (their form, that the module or\n"
        "file exists), not imported, unless --import-runners.",
    )
    validate.add_argument("team", metavar="TEAM", help="team file (TOML)")
    validate.add_argument(
        "--import-runners",
        action="store_true",
        help="import the agents' Python runners too (runs their modules' code)",
    )
    validate.set_defaults(handler=cmd_validate)

    backup = add(
        "backup",
        "write a compacted copy of a store",
        "Write a consistent, compacted copy of a store into DEST (a new folder).\n"
        "Works while another process runs the store.",
    )
    backup.add_argument("dest", metavar="DEST", help="new folder for the copy")
    backup.add_argument("--store", help=store_help())
    backup.set_defaults(handler=cmd_backup)

    compact = add(
        "compact",
        "remove old closed agents and read messages from a store",
        "Remove what the retention limits no longer keep (closed agents, read\n"
        "messages, delivered completions). Needs the store to be free of writers.\n"
        "--reclaim then swaps in a compacted copy of the file: the free pages go\n"
        "back to the file system (readers beside it follow the new file).",
    )
    compact.add_argument("store_pos", nargs="?", metavar="STORE", help=argparse.SUPPRESS)
    compact.add_argument("--store", help=store_help())
    compact.add_argument("--reclaim", action="store_true", help="give the free pages back")
    compact.set_defaults(handler=cmd_compact)


def _add_extras(add: Add) -> None:
    """mcp and web: the commands of optional extras."""
    from retinue.mcp.options import add_arguments as mcp_arguments

    mcp = add(
        "mcp",
        "serve a store over MCP (stdio, or streamable HTTP on loopback)",
        "Serve a store's trees to an MCP client (Claude Code, an IDE): tools run_team,\n"
        "spawn, wait, send, tree, inspect, interrupt, close, resume, approvals, approve,\n"
        "deny; resources "
        "retinue://tree and retinue://agent/{path}. Needs pip install 'retinue[mcp]'.",
    )
    mcp_arguments(mcp, store_help())
    mcp.set_defaults(handler=cmd_mcp)
    web = add(
        "web",
        "serve a live view of a store in the browser (read-only)",
        "Serve a page that shows a store's tree live (states, tokens, cost, the tool\n"
        "in progress), an agent's detail and transcript, and a timeline. Read-only\n"
        "beside the process that runs the store: with --actions its buttons act\n"
        "through that writer's control socket (refused while no writer runs). Loopback by\n"
        "default; another address needs a bearer token ($RETINUE_WEB_TOKEN or --token),\n"
        "every interface (0.0.0.0) also --allowed-host. Needs: pip install 'retinue[web]'.",
    )
    web.add_argument("--store", help=store_help())
    web.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; any other needs a token, and 0.0.0.0 "
        "or :: also --allowed-host)",
    )
    web.add_argument("--port", type=int, default=8321, help="port to listen on (0: any free one)")
    web.add_argument(
        "--token",
        help="bearer token every request must carry (default: $RETINUE_WEB_TOKEN, which keeps "
        "it out of the process list; a browser opens the view once with ?token=TOKEN)",
    )
    web.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="a name or address clients reach this machine by, answered besides the loopback "
        "names and the address bound (repeatable)",
    )
    _view_options(web, "")
    web.set_defaults(handler=cmd_web)
