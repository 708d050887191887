"""The ``grep`` tool: Python regular expressions over the workspace, under a deadline.

A model's pattern can backtrack catastrophically: ``(a+)+$`` on a 28-character
line holds the GIL for seconds, each more character doubling it, and in the
runtime's process that freezes every thread. So the matching runs in a child
process (:mod:`retinue.llm.tools._grep_child`, the same ``re`` module, so the same
syntax), killed with its process group after ``grep_timeout_s`` or when the
call is cancelled (an interrupt, the tool timeout). The walk that picks the
files runs on a tool-pool thread in the runtime's process, confined by
:class:`~retinue.llm.tools._workspace.Workspace`: only regular files inside the
workspace are searched, links that loop are skipped and reported.

The price is one child process per call: about 15-25 ms here, against about
1 ms for a small in-process search.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
import stat
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec

from retinue.llm.tools import _grep_child as grep_child
from retinue.llm.tools._arguments import ToolError
from retinue.llm.tools._child_process import end, spawn
from retinue.llm.tools._workspace import Workspace

__all__ = [
    "DEFAULT_GREP_TIMEOUT_S",
    "MAX_GREP_ENTRIES",
    "MAX_GREP_FILE_BYTES",
    "MAX_LINE_CHARS",
    "MAX_SKIPPED",
    "GrepArgs",
    "run_grep",
]

DEFAULT_GREP_TIMEOUT_S = 30.0
"""Seconds the matching of one ``grep`` call may take before its process is killed."""
MAX_GREP_ENTRIES = 1000
"""Most matches one ``grep`` call returns."""
MAX_GREP_FILE_BYTES = 4 * 1024 * 1024
"""Files larger than this are not searched (each is listed in ``skipped``)."""
MAX_LINE_CHARS = 2000
"""A matched line longer than this is cut in ``grep`` results."""
MAX_SKIPPED = 100
"""Most entries of a result's ``skipped`` list (the rest are counted in ``skipped_more``)."""

_CHILD = Path(grep_child.__file__)
_KILL_WAIT_S = 5.0


class GrepArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of grep."""

    pattern: Annotated[str, msgspec.Meta(description="A Python regular expression.")]
    path: Annotated[
        str,
        msgspec.Meta(
            description="A path relative to the workspace folder ('.' is the folder itself)."
        ),
    ] = "."
    glob: (
        Annotated[
            str,
            msgspec.Meta(
                description="Only search files whose name matches this glob, e.g. '*.py'."
            ),
        ]
        | None
    ) = None
    ignore_case: bool = False
    max_results: Annotated[int, msgspec.Meta(ge=1, le=MAX_GREP_ENTRIES)] = 100


@dataclass
class _Plan:
    """What one grep searches: the pattern, the files (real, shown) and what was skipped."""

    pattern: str
    flags: int
    files: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)


def _plan(ws: Workspace, args: GrepArgs, stop: threading.Event) -> _Plan:
    """Check the pattern and pick the files (runs on a tool-pool thread)."""
    flags = re.IGNORECASE if args.ignore_case else 0
    try:
        re.compile(args.pattern, flags)
    except (re.error, OverflowError, RecursionError) as exc:
        raise ToolError(
            f"pattern {args.pattern!r} is not a valid regular expression: {exc}"
        ) from None
    plan = _Plan(args.pattern, int(flags))
    real = ws.resolve(args.path)
    if not real.exists():
        raise ToolError(f"{args.path!r} does not exist in the workspace")
    if not real.is_dir():
        if not stat.S_ISREG(real.stat().st_mode):
            raise ToolError(f"{args.path!r} is not a regular file or a folder")
        plan.files.append((str(real), ws.relative(real)))
        return plan
    for path in ws.walk(real, plan.skipped, stop):
        if args.glob is not None and not fnmatch.fnmatch(path.name, args.glob):
            continue
        try:
            status = path.stat()
            target = path.resolve(strict=True)
        except (OSError, RuntimeError):
            continue  # vanished, or a dangling link
        if not stat.S_ISREG(status.st_mode):
            continue  # folders, FIFOs, sockets, devices: never opened
        if status.st_size > MAX_GREP_FILE_BYTES:
            plan.skipped.append(
                {"path": ws.shown(path), "reason": f"over {MAX_GREP_FILE_BYTES} bytes"}
            )
            continue
        plan.files.append((str(target), ws.relative(target)))
    return plan


async def _search(plan: _Plan, args: GrepArgs, timeout_s: float) -> dict[str, Any]:
    """Run the matching in a child process; kill it at the deadline or on cancel."""
    if not sys.executable:
        raise ToolError("grep cannot run: the Python interpreter's path is unknown")
    request = json.dumps(
        {
            "pattern": plan.pattern,
            "flags": plan.flags,
            "files": plan.files,
            "max_results": args.max_results,
            "max_line_chars": MAX_LINE_CHARS,
            "max_file_bytes": MAX_GREP_FILE_BYTES,
        }
    ).encode()
    try:
        child = await spawn(
            [sys.executable, "-I", "-S", str(_CHILD)],
            cwd=None,
            env={},
            stdin=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise ToolError(f"grep could not start its search process: {exc.strerror}") from None
    process = child.process
    try:
        out, err = await asyncio.wait_for(process.communicate(request), timeout_s)
    except TimeoutError:
        raise ToolError(
            f"grep timed out after {timeout_s:g} s and was stopped: the pattern may "
            "backtrack catastrophically (nested repeats such as (a+)+); simplify it, "
            "or narrow path or glob"
        ) from None
    finally:
        await end(child, _KILL_WAIT_S)  # at once if it ended; at a deadline or a cancel, it ends
    if process.returncode != 0:
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        raise ToolError(f"grep's search process failed: {last[0][:300]}")
    found: dict[str, Any] = json.loads(out)
    return found


async def run_grep(
    ws: Workspace,
    args: GrepArgs,
    *,
    run_blocking: Any,
    timeout_s: float = DEFAULT_GREP_TIMEOUT_S,
) -> dict[str, Any]:
    """Search the workspace for ``args.pattern``; return matches, counts and what was skipped.

    ``run_blocking(fn, *args, stop=...)`` runs the file walk off the event loop
    (a :class:`~retinue.llm.tools._pool.ToolPool`'s ``run``).

    Raises:
        ToolError: a bad pattern or path, or the matching ran past ``timeout_s``.
        WorkspaceEscape: the path leaves the workspace.
        asyncio.CancelledError: the call was cancelled (the search process is killed).
    """
    stop = threading.Event()
    plan: _Plan = await run_blocking(_plan, ws, args, stop, stop=stop)
    found = await _search(plan, args, timeout_s) if plan.files else {}
    result: dict[str, Any] = {
        "matches": [
            {"path": shown, "line": number, "text": text}
            for shown, number, text in found.get("matches", [])
        ],
        "files_searched": int(found.get("searched", 0)),
        "truncated": bool(found.get("truncated", False)),
    }
    if plan.skipped:
        result["skipped"] = plan.skipped[:MAX_SKIPPED]
        if len(plan.skipped) > MAX_SKIPPED:
            result["skipped_more"] = len(plan.skipped) - MAX_SKIPPED
    return result
