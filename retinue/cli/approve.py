"""Approvals on the command line: ``retinue approvals`` and the answers of a run in progress.

``retinue approvals`` lists the pending requests of a store, read-only, beside
its running writer. ``run`` and ``resume`` answer their trees' requests as
they come (:class:`Approver`): ``--approve TOOL`` approves a tool's calls,
``--deny-unlisted`` denies the rest; on a terminal the others are asked about
(tool, arguments, path: approve, or deny with a reason); off a terminal they
wait (``--json`` shows them as events) until something answers them.
"""

from __future__ import annotations

import argparse
import json
import select
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

import msgspec

from retinue.cli.common import OK, reader, store_path
from retinue.cli.render import View, clip, in_tree
from retinue.errors import ApprovalAlreadyAnswered, UnknownApproval
from retinue.protocol.messages import ApprovalRequested, Event
from retinue.protocol.supervision import ApprovalRequest
from retinue.protocol.text import safe_terminal_text
from retinue.protocol.tools import covers

if TYPE_CHECKING:
    from retinue.runtime import Runtime

__all__ = ["Approver", "approver_for", "cmd_approvals", "describe"]

UNLISTED = "denied by --deny-unlisted: this tool was not named with --approve"
"""The reason of a request ``--deny-unlisted`` denies."""


def describe(request: ApprovalRequest) -> str:
    """One line for a request: its id, tool, path and (cut) arguments."""
    return f"{request.id}  {request.tool}  {request.path}  {clip(request.arguments, 200)}"


def cmd_approvals(args: argparse.Namespace) -> int:
    """``retinue approvals``: the pending approval requests, read-only."""
    store = store_path(args.store, must_exist=True)
    rt = reader(store)
    try:
        pending = rt.approvals()
    finally:
        rt.shutdown()
    if args.json:
        for request in pending:
            sys.stdout.write(msgspec.json.encode(request).decode() + "\n")
        return OK
    if not pending:
        print(f"{store}: no approval is pending")
        return OK
    print(f"{store}: {len(pending)} pending approval{'s' if len(pending) != 1 else ''}")
    for request in pending:
        print(safe_terminal_text(describe(request), 400))
    print(
        f"answer: retinue approve ID [--note TEXT] --store {store}, or retinue deny ID "
        f"--reason TEXT --store {store} (through the running writer, or in this process "
        "if none runs)"
    )
    return OK


@dataclass
class Approver:
    """Answers the approval requests of a run's trees as they come.

    ``approve`` names the tools whose calls are approved; ``deny_unlisted``
    denies every other call; ``ask`` asks the rest on the terminal
    (``stdin``/``out``); a request none of them answers waits.
    """

    rt: Runtime
    roots: Sequence[str]
    approve: frozenset[str] = frozenset()
    deny_unlisted: bool = False
    ask: bool = False
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    out: TextIO = field(default_factory=lambda: sys.stdout)
    handled: set[str] = field(default_factory=set)
    dirty: bool = True  # look at the store's pending requests on the next tick

    def tick(self, batch: Sequence[Event], view: View, stop: threading.Event) -> None:
        """Answer what the run can answer now (called by the follow loop between draws)."""
        if any(isinstance(e, ApprovalRequested) for e in batch):
            self.dirty = True
        if not self.dirty:
            return
        self.dirty = False
        for request in self.rt.approvals():
            if request.id in self.handled or not in_tree(request.path, self.roots):
                continue
            if not self._answer(request, view, stop):
                self.dirty = True  # asked on the terminal and not answered: ask again
                return

    def _answer(self, request: ApprovalRequest, view: View, stop: threading.Event) -> bool:
        """Answer one request; return False if it stays unanswered (waits)."""
        if covers(request.tool, self.approve):  # an MCP tool by name or <server>.*
            return self._send(request, True, "approved by --approve")
        if self.deny_unlisted:
            return self._send(request, False, UNLISTED)
        if not self.ask:
            self.handled.add(request.id)  # off a terminal: it waits, shown once
            return True
        view.stop()
        try:
            verdict = self._prompt(request, stop)
        finally:
            view.start(getattr(view, "title", ""))
        if verdict is None:
            return False
        approved, text = verdict
        return self._send(request, approved, text)

    @property
    def terminal(self) -> TextIO:
        """Where the questions are written: ``out`` itself, never rich's proxy of it.

        A live table redirects ``sys.stdout`` through rich, which reads a line
        written without its newline (the prompt) as markup: ``[y]`` and
        ``[n]`` were eaten (``approve? es / o:``). The questions are asked with
        the live table stopped, so they go to the terminal as they are.
        """
        out = self.out
        proxied = getattr(out, "rich_proxied_file", None)
        return proxied if proxied is not None else out

    def _prompt(self, request: ApprovalRequest, stop: threading.Event) -> tuple[bool, str] | None:
        """Ask on the terminal: approve, or deny with a reason (None: Ctrl-C or no answer)."""
        out = self.terminal
        print(file=out)
        print(f"approval needed: {request.tool} by {request.path}", file=out)
        try:
            shown = json.dumps(json.loads(request.arguments), indent=2, ensure_ascii=False)
        except ValueError:
            shown = request.arguments
        print(safe_terminal_text(shown, 4000), file=out)
        line = self._read_line("approve? [y]es / [n]o: ", stop)
        if line is None:
            return None
        if line.strip().lower() in ("y", "yes"):
            return True, "approved on the terminal"
        reason = self._read_line("reason for the denial: ", stop)
        if reason is None:
            return None
        return False, reason.strip() or "denied on the terminal"

    def _read_line(self, prompt: str, stop: threading.Event) -> str | None:
        """Read one line from ``stdin``, giving up once ``stop`` is set (Ctrl-C) or at EOF."""
        out = self.terminal
        out.write(prompt)
        out.flush()
        while not stop.is_set():
            ready, _, _ = select.select([self.stdin], [], [], 0.1)
            if ready:
                line = self.stdin.readline()
                return line if line else None
        return None

    def _send(self, request: ApprovalRequest, approved: bool, text: str) -> bool:
        self.handled.add(request.id)
        try:
            if approved:
                self.rt.approve(request.id, note=text)
            else:
                self.rt.deny(request.id, reason=text)
        except (UnknownApproval, ApprovalAlreadyAnswered):
            pass  # answered meanwhile (or its turn ended): nothing to do
        return True


def approver_for(rt: Runtime, roots: Sequence[str], args: argparse.Namespace) -> Approver:
    """The approver of a run from its options: asks on a terminal unless ``--json``."""
    on_terminal = sys.stdin.isatty() and sys.stdout.isatty() and not getattr(args, "json", False)
    return Approver(
        rt,
        roots,
        approve=frozenset(getattr(args, "approve", None) or ()),
        deny_unlisted=bool(getattr(args, "deny_unlisted", False)),
        ask=on_terminal,
    )
