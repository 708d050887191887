"""The built-in workspace tools: read_file, list_dir, grep, find, write_file, edit_file, bash.

Every path goes through :class:`~retinue.llm.tools._workspace.Workspace`, so a tool
never reads or writes outside its folder, and no result shows a path outside
it. File work runs on the tool pool's threads (:mod:`retinue.llm.tools._pool`),
never the loop's shared default executor, so a big folder never stalls the
event loop that drives the other agents, and each file tool call is bounded by
``tool_timeout_s``. Only regular files are opened
(:mod:`retinue.llm.tools._files`): a FIFO or a device is refused before any
blocking open. Every result is bounded: files and outputs are cut at
``max_output_bytes`` with a visible marker, listings and matches at a count.

``bash`` lives in :mod:`retinue.llm.tools._bash`, ``grep`` (matching in a child
process under a deadline) in :mod:`retinue.llm.tools._grep`.
"""

from __future__ import annotations

import fnmatch
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from retinue.llm.tools._arguments import ToolDef, ToolError
from retinue.llm.tools._bash import DEFAULT_BASH_TIMEOUT_S, BashArgs, run_bash
from retinue.llm.tools._call import call_or_fresh
from retinue.llm.tools._files import check_regular, open_for_reading, write_regular
from retinue.llm.tools._grep import DEFAULT_GREP_TIMEOUT_S, MAX_SKIPPED, GrepArgs, run_grep
from retinue.llm.tools._pool import tool_pool
from retinue.llm.tools._workspace import Workspace
from retinue.protocol.effects import BUILTIN_EFFECTS, IDEMPOTENCY_ENV
from retinue.protocol.text import truncate_utf8

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_TOOL_TIMEOUT_S",
    "FILE_TOOLS",
    "GrepArgs",
    "builtin_tools",
]

DEFAULT_MAX_OUTPUT_BYTES = 32_768
"""Largest file content or command output one tool result carries (UTF-8 bytes)."""
DEFAULT_TOOL_TIMEOUT_S = 120.0
"""Seconds one file tool (or host tool) call may take before the model gets a timeout error."""
FILE_TOOLS = frozenset({"read_file", "list_dir", "grep", "find", "write_file", "edit_file"})
"""The built-in tools bounded by ``tool_timeout_s`` (``bash`` has its own ``timeout_s``)."""
MAX_ENTRIES = 1000
"""Most entries ``list_dir`` and ``find`` return."""
MAX_COUNT_BYTES = 16 * 1024 * 1024
"""``read_file`` stops counting a file's lines past this many bytes (``total_lines`` null)."""
_PIECE_BYTES = 1 << 20

_Path = Annotated[
    str,
    msgspec.Meta(description="A path relative to the workspace folder ('.' is the folder itself)."),
]


class ReadFileArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of read_file."""

    path: _Path
    offset: Annotated[int, msgspec.Meta(ge=1, description="First line to read (1-based).")] = 1
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000, description="Most lines to read.")] = 2000


class ListDirArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of list_dir."""

    path: _Path = "."


class FindArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of find."""

    pattern: Annotated[
        str,
        msgspec.Meta(
            description=(
                "A glob matched against each path relative to 'path' (e.g. 'src/*.py'); "
                "a pattern without '/' is matched against the name alone (e.g. '*.md')."
            )
        ),
    ]
    path: _Path = "."


class WriteFileArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of write_file."""

    path: _Path
    content: Annotated[str, msgspec.Meta(description="The whole new content of the file.")]


class EditFileArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of edit_file."""

    path: _Path
    old_text: Annotated[
        str, msgspec.Meta(min_length=1, description="Exact text to replace (must be unique).")
    ]
    new_text: Annotated[str, msgspec.Meta(description="The text to put in its place.")]
    replace_all: Annotated[
        bool, msgspec.Meta(description="Replace every occurrence instead of exactly one.")
    ] = False


def _is_binary(head: bytes) -> bool:
    """Return whether a file's first bytes look binary (a NUL byte)."""
    return b"\x00" in head


class _Files:
    """The file tools of one workspace (each method runs on a tool-pool thread)."""

    def __init__(self, workspace: Workspace, max_output_bytes: int) -> None:
        self.ws = workspace
        self.max_bytes = max_output_bytes

    def _existing(self, path: str) -> Path:
        real = self.ws.resolve(path)
        if not real.exists():
            raise ToolError(f"{path!r} does not exist in the workspace")
        return real

    def read_file(self, args: ReadFileArgs, stop: threading.Event) -> dict[str, Any]:
        real = self._existing(args.path)
        if real.is_dir():
            raise ToolError(f"{args.path!r} is a folder; use list_dir")
        end = args.offset + args.limit  # first line not wanted
        kept = bytearray()
        line = 1  # the line the next piece belongs to
        ended = True  # the last piece ended its line
        counted = True  # every line was counted (False: stopped early in a huge file)
        consumed = 0
        with open_for_reading(real, args.path) as handle:
            if _is_binary(handle.read(8192)):
                raise ToolError(f"{args.path!r} is a binary file")
            handle.seek(0)
            # Pieces, not lines: one enormous line never has to fit in memory.
            while (piece := handle.readline(_PIECE_BYTES)) and not stop.is_set():
                consumed += len(piece)
                if args.offset <= line < end and len(kept) <= self.max_bytes:
                    kept += piece
                ended = piece.endswith(b"\n")
                if ended:
                    line += 1
                if line >= end and consumed > MAX_COUNT_BYTES:
                    counted = False
                    break
        seen = line - 1 if ended else line  # lines met so far
        total = seen if counted else None
        last = min(end - 1, seen)
        content, cut = truncate_utf8(kept.decode("utf-8", "replace"), self.max_bytes)
        return {
            "path": self.ws.relative(real),
            "content": content,
            "first_line": args.offset,
            "last_line": last if last >= args.offset else None,
            "total_lines": total,
            "truncated": cut or not counted or last < seen,
        }

    def list_dir(self, args: ListDirArgs, stop: threading.Event) -> dict[str, Any]:
        real = self._existing(args.path)
        if not real.is_dir():
            raise ToolError(f"{args.path!r} is a file; use read_file")
        entries: list[dict[str, Any]] = []
        names = sorted(os.listdir(real))
        for name in names[:MAX_ENTRIES]:
            child = real / name
            if child.is_symlink():
                kind = "symlink"
            elif child.is_dir():
                kind = "dir"
            elif child.is_file():
                kind = "file"
            else:
                kind = "other"
            entry: dict[str, Any] = {"name": name, "type": kind}
            if kind == "file":
                entry["size"] = child.stat().st_size
            entries.append(entry)
        return {
            "path": self.ws.relative(real),
            "entries": entries,
            "truncated": len(names) > MAX_ENTRIES,
        }

    def find(self, args: FindArgs, stop: threading.Event) -> dict[str, Any]:
        real = self._existing(args.path)
        if not real.is_dir():
            raise ToolError(f"{args.path!r} is a file, not a folder to search")
        by_name = "/" not in args.pattern
        found: list[str] = []
        skipped: list[dict[str, str]] = []
        truncated = False
        for path in self.ws.walk(real, skipped, stop):
            rel_here = path.relative_to(real).as_posix()
            subject = path.name if by_name else rel_here
            if fnmatch.fnmatchcase(subject, args.pattern):
                if len(found) >= MAX_ENTRIES:
                    truncated = True
                    break
                shown = self.ws.shown(path)
                found.append(shown + "/" if path.is_dir() and not path.is_symlink() else shown)
        result: dict[str, Any] = {"paths": found, "truncated": truncated}
        if skipped:
            result["skipped"] = skipped[:MAX_SKIPPED]
        return result

    def write_file(self, args: WriteFileArgs, stop: threading.Event) -> dict[str, Any]:
        real = self.ws.resolve(args.path)
        if real.is_dir():
            raise ToolError(f"{args.path!r} is a folder")
        created = not real.exists()
        real.parent.mkdir(parents=True, exist_ok=True)
        data = args.content.encode("utf-8", "surrogatepass")
        write_regular(real, args.path, data)
        return {"path": self.ws.relative(real), "bytes": len(data), "created": created}

    def edit_file(self, args: EditFileArgs, stop: threading.Event) -> dict[str, Any]:
        real = self._existing(args.path)
        if real.is_dir():
            raise ToolError(f"{args.path!r} is a folder")
        check_regular(real, args.path)
        with open_for_reading(real, args.path) as handle:
            data = handle.read()
        if _is_binary(data[:8192]):
            raise ToolError(f"{args.path!r} is a binary file")
        text = data.decode("utf-8", "surrogateescape")
        count = text.count(args.old_text)
        if count == 0:
            raise ToolError(f"old_text was not found in {args.path!r}; read the file first")
        if count > 1 and not args.replace_all:
            raise ToolError(
                f"old_text occurs {count} times in {args.path!r}; include more context "
                "to make it unique, or set replace_all"
            )
        text = text.replace(args.old_text, args.new_text)
        write_regular(real, args.path, text.encode("utf-8", "surrogateescape"))
        return {"path": self.ws.relative(real), "replacements": count}


def _os_error(name: str, args: Any, exc: OSError) -> ToolError:
    """Describe an OS error by the model's own path, never the host's."""
    path = getattr(args, "path", ".")
    reason = exc.strerror or type(exc).__name__
    return ToolError(f"{name} {path!r}: {reason}")


_TOOLS: dict[str, tuple[type[msgspec.Struct], str]] = {
    "read_file": (
        ReadFileArgs,
        "Read a text file of the workspace, by lines (offset is 1-based).",
    ),
    "list_dir": (
        ListDirArgs,
        "List a folder of the workspace: each entry's name, type and size.",
    ),
    "grep": (
        GrepArgs,
        "Search the text files under a workspace path for a regular expression; "
        "returns matching lines with their path and line number.",
    ),
    "find": (FindArgs, "Find files and folders under a workspace path by glob pattern."),
    "write_file": (
        WriteFileArgs,
        "Create or overwrite a file of the workspace with the given content "
        "(missing folders are created).",
    ),
    "edit_file": (
        EditFileArgs,
        "Replace an exact, unique piece of text in a workspace file "
        "(or every occurrence with replace_all).",
    ),
    "bash": (BashArgs, ""),  # described with its bounds in builtin_tools
}
"""Each built-in tool's arguments and description, in preset order."""


def builtin_tools(
    workspace: Workspace,
    names: frozenset[str],
    *,
    bash_timeout_s: float = DEFAULT_BASH_TIMEOUT_S,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    bash_env: Mapping[str, str] | None = None,
    tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
    grep_timeout_s: float = DEFAULT_GREP_TIMEOUT_S,
) -> list[ToolDef]:
    """Return the built-in tools among ``names``, confined to ``workspace``, in preset order.

    ``bash_env`` adds variables to bash's small environment (which also holds
    the call's idempotency key, ``RETINUE_IDEMPOTENCY_KEY``). Each file tool
    call is bounded by ``tool_timeout_s`` (bash by its own ``timeout_s``,
    default ``bash_timeout_s``); grep's matching by ``grep_timeout_s`` too.
    """
    files = _Files(workspace, max_output_bytes)

    def threaded(name: str, fn: Callable[[Any, threading.Event], dict[str, Any]]) -> Any:
        def guarded(args: Any, stop: threading.Event) -> dict[str, Any]:
            try:
                return fn(args, stop)
            except OSError as exc:
                raise _os_error(name, args, exc) from None

        async def run(args: Any) -> dict[str, Any]:
            stop = threading.Event()
            return await tool_pool().run(guarded, args, stop, stop=stop)

        return run

    async def grep(args: GrepArgs) -> dict[str, Any]:
        try:
            return await run_grep(
                workspace, args, run_blocking=tool_pool().run, timeout_s=grep_timeout_s
            )
        except OSError as exc:
            raise _os_error("grep", args, exc) from None

    async def bash(args: BashArgs) -> dict[str, Any]:
        key = call_or_fresh("bash").idempotency_key  # the call's own: stable across its runs
        return await run_bash(
            workspace,
            args,
            default_timeout_s=bash_timeout_s,
            max_output_bytes=max_output_bytes,
            env={**(bash_env or {}), IDEMPOTENCY_ENV: key},
        )

    handlers: dict[str, Any] = {
        "read_file": threaded("read_file", files.read_file),
        "list_dir": threaded("list_dir", files.list_dir),
        "grep": grep,
        "find": threaded("find", files.find),
        "write_file": threaded("write_file", files.write_file),
        "edit_file": threaded("edit_file", files.edit_file),
        "bash": bash,
    }
    bash_text = (
        f"Run a bash command in the workspace folder; killed after timeout_s seconds "
        f"(default {bash_timeout_s:g}); stdout and stderr are each cut to "
        f"{max_output_bytes} bytes."
    )
    every = [
        ToolDef(
            name,
            bash_text if name == "bash" else text,
            args,
            handlers[name],
            timeout_s=tool_timeout_s if name in FILE_TOOLS else None,
            effect=BUILTIN_EFFECTS[name],
        )
        for name, (args, text) in _TOOLS.items()
    ]
    return [tool for tool in every if tool.name in names]
