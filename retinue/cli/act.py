"""Acting on a store's agents from the command line, beside its running writer or without one.

``retinue approve ID``, ``deny ID --reason``, ``interrupt REF [--tree]``,
``resume REF``, ``close REF [--tree]`` and ``follow-up REF TASK`` go to the
store's writer over its control socket (:func:`retinue.connect`) when one
runs (a ``retinue run``, ``retinue mcp``, a host program), and print what
they did. When no writer holds the store, the command opens one of its own
with the team the store was run with: ``interrupt`` and ``close`` act and
close it; ``approve``, ``deny``, ``resume`` and ``follow-up``, which start
work, follow the tree they touched until it settles, as ``retinue resume``
does (Ctrl-C interrupts it, saved for later).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retinue.cli.approve import approver_for
from retinue.cli.common import OK, UsageError, open_store, store_path
from retinue.cli.session import Plan, run_session, saved_run, team_kwargs
from retinue.errors import NoWriter, StoreLocked, UnknownApproval
from retinue.protocol.messages import AgentInfo
from retinue.protocol.text import safe_terminal_text

if TYPE_CHECKING:
    from retinue.control import RemoteRuntime
    from retinue.runtime import Runtime

__all__ = [
    "cmd_approve",
    "cmd_close",
    "cmd_deny",
    "cmd_follow_up",
    "cmd_interrupt",
    "cmd_resume_agent",
    "connect_writer",
]

Host = Any  # a Runtime or a RemoteRuntime: the calls used here are the same on both


def connect_writer(store: Path) -> RemoteRuntime | None:
    """The store's running writer over its control socket; None when no writer holds it.

    Raises:
        UsageError: a writer holds the store but serves no control socket
            (``control=False``), or does not answer.
    """
    import retinue
    from retinue.persistence.lock import WriterLock

    try:
        return retinue.connect(store)
    except NoWriter as exc:
        try:
            WriterLock(store).release()  # free: no writer runs
        except StoreLocked:  # one runs, but cannot be reached
            raise UsageError(str(exc)) from None
        return None


def _root(path: str) -> str:
    """The top-level agent of ``path`` (``/root/a/b`` -> ``/root/a``)."""
    return "/".join(path.split("/")[:3])


def _say(verb: str, agents: list[AgentInfo]) -> None:
    for agent in agents:
        line = f"{verb} {agent.path}  {agent.id}  {agent.state.value}"
        print(safe_terminal_text(line, 400))


def _own_writer(store: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The arguments of a writer of this command's own: the store's saved team, if any."""
    try:
        team, workspace = saved_run(store, getattr(args, "team", None), None)
    except UsageError:
        return {}
    return team_kwargs(team, workspace)


def _quick(args: argparse.Namespace, act: Callable[[Host], list[AgentInfo]], verb: str) -> int:
    """Do ``act`` on the running writer, else on a writer of its own closed at once."""
    store = store_path(args.store, must_exist=True)
    remote = connect_writer(store)
    if remote is not None:
        with remote:
            _say(verb, act(remote))
        return OK
    rt = open_store(store, **_own_writer(store, args))
    try:
        _say(verb, act(rt))
    finally:
        rt.shutdown()
    return OK


def _followed(
    args: argparse.Namespace, act: Callable[[Host], list[AgentInfo]], verb: str, title: str
) -> int:
    """Do ``act`` on the running writer, else on a writer of its own that follows its tree."""
    store = store_path(args.store, must_exist=True)
    remote = connect_writer(store)
    if remote is not None:
        with remote:
            _say(verb, act(remote))
        return OK

    def plan(rt: Runtime) -> Plan:
        done: list[AgentInfo] = []

        def start() -> None:
            done.extend(act(rt))

        roots = sorted({_root(a.path) for a in _touched(rt, args)})
        return Plan(f"retinue {title}  store={store}", roots, start)

    return run_session(
        store,
        _own_writer(store, args),
        plan,
        json_mode=bool(getattr(args, "json", False)),
        approver=lambda rt, roots: approver_for(rt, roots, args),
    )


def _touched(rt: Runtime, args: argparse.Namespace) -> list[AgentInfo]:
    """The agents a followed command starts work on (an approval's agent, or REF)."""
    request_id = getattr(args, "request_id", None)
    if request_id is None:
        return [rt.get(args.ref)]
    for request in rt.approvals():
        if request.id == request_id:
            return [rt.get(request.path)]
    raise UnknownApproval(f"no approval request {request_id!r} is pending in {rt.path}")


def cmd_approve(args: argparse.Namespace) -> int:
    """``retinue approve ID [--note TEXT]``: approve a pending tool call."""

    def act(host: Host) -> list[AgentInfo]:
        host.approve(args.request_id, note=args.note)
        print(f"approved {args.request_id}")
        return []

    return _followed(args, act, "approved", f"approve {args.request_id}")


def cmd_deny(args: argparse.Namespace) -> int:
    """``retinue deny ID --reason TEXT``: deny a pending tool call."""

    def act(host: Host) -> list[AgentInfo]:
        host.deny(args.request_id, reason=args.reason)
        print(f"denied {args.request_id}: {safe_terminal_text(args.reason, 200)}")
        return []

    return _followed(args, act, "denied", f"deny {args.request_id}")


def cmd_interrupt(args: argparse.Namespace) -> int:
    """``retinue interrupt REF [--tree]``: cancel an agent's turn (or its subtree's)."""

    def act(host: Host) -> list[AgentInfo]:
        if args.tree:
            agents: list[AgentInfo] = host.interrupt_tree(args.ref)
            return agents
        return [host.interrupt(args.ref)]

    return _quick(args, act, "interrupted")


def cmd_close(args: argparse.Namespace) -> int:
    """``retinue close REF [--tree]``: close an agent (or its whole live subtree)."""

    def act(host: Host) -> list[AgentInfo]:
        if args.tree:
            agents: list[AgentInfo] = host.close_tree(args.ref)
            return agents
        return [host.close(args.ref)]

    return _quick(args, act, "closed")


def cmd_resume_agent(args: argparse.Namespace) -> int:
    """``retinue resume REF``: re-run one interrupted agent's task."""
    return _followed(args, lambda host: [host.resume(args.ref)], "resumed", f"resume {args.ref}")


def cmd_follow_up(args: argparse.Namespace) -> int:
    """``retinue follow-up REF TASK``: give an idle agent a new turn."""

    def act(host: Host) -> list[AgentInfo]:
        return [host.follow_up(args.ref, args.task)]

    return _followed(args, act, "followed up", f"follow-up {args.ref}")


def add_actions(add: Callable[[str, str, str], argparse.ArgumentParser], store_help: str) -> None:
    """The parsers of approve, deny, interrupt, close and follow-up (resume REF is resume's)."""
    beside = (
        "\n\nGoes to the store's running writer over its control socket; with none,\n"
        "opens the store itself (with the team it was run with)."
    )
    approve = add("approve", "approve a pending tool call", "Approve a tool call." + beside)
    approve.add_argument("request_id", metavar="ID", help="the request's id (retinue approvals)")
    approve.add_argument("--note", help="a note kept with the answer")
    deny = add(
        "deny", "deny a pending tool call", "Deny a tool call; the model gets the reason." + beside
    )
    deny.add_argument("request_id", metavar="ID", help="the request's id (retinue approvals)")
    deny.add_argument("--reason", required=True, help="why: the model reads it")
    interrupt = add(
        "interrupt",
        "interrupt an agent's turn",
        "Cancel an agent's queued or running turn." + beside,
    )
    close = add("close", "close an agent", "Close an agent: it takes no more turns." + beside)
    for parser, verb in ((interrupt, "interrupt"), (close, "close")):
        parser.add_argument("ref", metavar="REF", help="agent path (/root/review) or id")
        parser.add_argument("--tree", action="store_true", help=f"{verb} its whole live subtree")
    follow_up = add(
        "follow-up", "give an idle agent a new turn", "Queue a new turn for an idle agent." + beside
    )
    follow_up.add_argument("ref", metavar="REF", help="agent path (/root/review) or id")
    follow_up.add_argument("task", metavar="TASK", help="what it should do now")
    for parser in (approve, deny, follow_up):
        parser.add_argument("--json", action="store_true", help="print JSON events when following")
    for parser in (approve, deny, interrupt, close, follow_up):
        parser.add_argument("--store", help=store_help)
    approve.set_defaults(handler=cmd_approve)
    deny.set_defaults(handler=cmd_deny)
    interrupt.set_defaults(handler=cmd_interrupt)
    close.set_defaults(handler=cmd_close)
    follow_up.set_defaults(handler=cmd_follow_up)
