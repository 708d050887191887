"""Read commands: ``tree``, ``inspect``, ``backup`` (read-only, beside a writer), ``compact``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from retinue.cli.common import OK, UsageError, open_store, reader, store_path
from retinue.cli.render import clip, ordered, plain_row, table, usage_of
from retinue.errors import UnknownAgent
from retinue.protocol.details import InDoubtCall
from retinue.protocol.text import safe_terminal_text

__all__ = ["cmd_backup", "cmd_compact", "cmd_inspect", "cmd_tree"]


def cmd_tree(args: argparse.Namespace) -> int:
    """``retinue tree``: every agent by path, read-only."""
    store = store_path(args.store or args.store_pos, must_exist=True)
    rt = reader(store)
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
    rt = reader(store)  # one consistent snapshot, read-only: safe beside the store's writer
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
            "in_doubt": msgspec.to_builtins(detail.in_doubt),
        }
        print(json.dumps(payload))
        return OK
    tokens, cost = usage_of(info)
    attempt = f", attempt {info.attempt}" if info.attempt > 1 else ""
    rows = [
        ("path", info.path),
        ("id", info.id),
        ("profile", info.profile),
        ("state", f"{info.state.value} (generation {info.generation}{attempt})"),
        ("task", info.task),
        ("output", info.output if info.output is not None else "-"),
        ("error", info.error if info.error is not None else "-"),
        ("usage", f"{tokens:,} tokens, ${cost:.4f}" if tokens else "-"),
        ("unread", f"{len(unread)} messages"),
    ]
    if info.last_error is not None:  # a restart policy ran it again (or will)
        rows.insert(-2, ("restarted", info.last_error))
    if info.restart_due_at is not None:
        rows.insert(-2, ("next run", _due(info.restart_due_at)))
    for key, value in rows:
        print(f"{key:<9} {safe_terminal_text(value, 4000)}")
    for message in unread:
        print(f"  from {message.sender} ({message.kind}): {clip(message.content, 200)}")
    print(f"pending   {len(pending)} completions of children not yet received")
    for completion in pending:
        print(f"  {completion.path} g{completion.generation} {completion.status.value}")
    _print_in_doubt(detail.in_doubt)
    print(f"transcript {len(transcript)} latest messages" if transcript else "transcript -")
    for entry in transcript:
        print(f"  {_entry_line(entry)}")
    return OK


def _print_in_doubt(calls: Sequence[InDoubtCall]) -> None:
    """The agent's tool calls in doubt: each may or may not have taken effect."""
    if not calls:
        return
    print(f"in doubt  {len(calls)} tool calls (running when the turn stopped; no result)")
    for call in calls:
        asked = ", awaiting approval" if call.awaiting_approval else ""
        line = (
            f"  {call.tool} [{call.effect}] key {call.idempotency_key} "
            f"attempt {call.attempt}{asked}: {clip(call.arguments, 120)}"
        )
        print(safe_terminal_text(line, 400))


def _due(at: float) -> str:
    """When a pending restart runs: ``in 3.2s (at 14:05:07)``."""
    clock = time.strftime("%H:%M:%S", time.localtime(at))
    return f"in {max(0.0, at - time.time()):.1f}s (at {clock})"


def _entry_line(entry: dict[str, Any]) -> str:
    """One line for a transcript message: role, text and the tools it called."""
    role = str(entry.get("role", "?"))
    text = entry.get("content")
    calls = entry.get("tool_calls") or []
    parts = [str(text)] if text else []
    for call in calls:
        parts.append(f"-> {call.get('name', '?')}({call.get('arguments', '')})")
    return f"{role}: {clip(' '.join(parts), 200)}"


def cmd_backup(args: argparse.Namespace) -> int:
    """``retinue backup DEST``: a compacted copy, read beside any running writer."""
    store = store_path(args.store, must_exist=True)
    dest = Path(args.dest)
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"backup destination {dest} is a file; give a folder")
    rt = reader(store)
    try:
        copy = rt.backup(dest)
        count = sum(rt.agent_counts().by_state.values())
    finally:
        rt.shutdown()
    print(f"backed up {store} ({count} agents) to {copy}; open it with --store {copy}")
    return OK


def cmd_compact(args: argparse.Namespace) -> int:
    """``retinue compact [--reclaim]``: remove what retention no longer keeps; free the file."""
    store = store_path(args.store or args.store_pos, must_exist=True)
    rt = open_store(store, profiles=[], runner=lambda turn: "")
    try:
        result = rt.compact(reclaim=args.reclaim)
    finally:
        rt.shutdown()
    print(
        f"compacted {store}: removed {result.agents} closed agents, {result.messages} read "
        f"messages and {result.completions} delivered completions"
    )
    if args.reclaim:
        print(
            f"reclaimed {result.reclaimed_bytes} bytes: the file went from "
            f"{result.file_bytes_before} to {result.file_bytes_after} bytes"
        )
    return OK
