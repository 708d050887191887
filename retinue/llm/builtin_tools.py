"""The built-in workspace tools: read_file, list_dir, grep, find, write_file, edit_file, bash.

Every path goes through :class:`~retinue.llm.workspace.Workspace`, so a tool
never reads or writes outside its folder. File work runs in a worker thread
(``asyncio.to_thread``), so a big folder never stalls the event loop that
drives the other agents. Every result is bounded: files and outputs are cut at
``max_output_bytes`` with a visible marker, listings and matches at a count.

``bash`` lives in :mod:`retinue.llm.bash_tool`.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from retinue.llm.arguments import ToolDef, ToolError
from retinue.llm.bash_tool import DEFAULT_BASH_TIMEOUT_S, BashArgs, run_bash
from retinue.llm.workspace import Workspace
from retinue.protocol.text import truncate_utf8

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "builtin_tools"]

DEFAULT_MAX_OUTPUT_BYTES = 32_768
"""Largest file content or command output one tool result carries (UTF-8 bytes)."""
MAX_ENTRIES = 1000
"""Most entries ``list_dir`` and ``find`` return."""
MAX_GREP_FILE_BYTES = 4 * 1024 * 1024
"""Files larger than this are skipped by ``grep``."""
MAX_COUNT_BYTES = 16 * 1024 * 1024
"""``read_file`` stops counting a file's lines past this many bytes (``total_lines`` null)."""
_PIECE_BYTES = 1 << 20
MAX_LINE_CHARS = 2000
"""A matched line longer than this is cut in ``grep`` results."""
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules"})

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


class GrepArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of grep."""

    pattern: Annotated[str, msgspec.Meta(description="A Python regular expression.")]
    path: _Path = "."
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
    max_results: Annotated[int, msgspec.Meta(ge=1, le=MAX_ENTRIES)] = 100


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
    """The file tools of one workspace (each method runs in a worker thread)."""

    def __init__(self, workspace: Workspace, max_output_bytes: int) -> None:
        self.ws = workspace
        self.max_bytes = max_output_bytes

    def _existing(self, path: str) -> Path:
        real = self.ws.resolve(path)
        if not real.exists():
            raise ToolError(f"{path!r} does not exist in the workspace")
        return real

    def read_file(self, args: ReadFileArgs) -> dict[str, Any]:
        real = self._existing(args.path)
        if real.is_dir():
            raise ToolError(f"{args.path!r} is a folder; use list_dir")
        end = args.offset + args.limit  # first line not wanted
        kept = bytearray()
        line = 1  # the line the next piece belongs to
        ended = True  # the last piece ended its line
        counted = True  # every line was counted (False: stopped early in a huge file)
        consumed = 0
        with real.open("rb") as handle:
            if _is_binary(handle.read(8192)):
                raise ToolError(f"{args.path!r} is a binary file")
            handle.seek(0)
            # Pieces, not lines: one enormous line never has to fit in memory.
            while piece := handle.readline(_PIECE_BYTES):
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

    def list_dir(self, args: ListDirArgs) -> dict[str, Any]:
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

    def _walk(self, top: Path) -> Iterator[Path]:
        """Yield the files and folders below ``top`` that stay in the workspace, sorted."""
        for folder, dirs, files in os.walk(top, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            base = Path(folder)
            for name in dirs:
                yield base / name
            for name in sorted(files):
                path = base / name
                if path.is_symlink() and not self.ws.contains(path.resolve()):
                    continue  # a symlink pointing out of the workspace: never followed
                yield path

    def grep(self, args: GrepArgs) -> dict[str, Any]:
        try:
            regex = re.compile(args.pattern, re.IGNORECASE if args.ignore_case else 0)
        except re.error as exc:
            raise ToolError(
                f"pattern {args.pattern!r} is not a valid regular expression: {exc}"
            ) from None
        real = self._existing(args.path)
        candidates = [real] if real.is_file() else (p for p in self._walk(real) if p.is_file())
        matches: list[dict[str, Any]] = []
        searched = 0
        truncated = False
        for file in candidates:
            if args.glob is not None and not fnmatch.fnmatch(file.name, args.glob):
                continue
            try:
                if file.stat().st_size > MAX_GREP_FILE_BYTES:
                    continue
                data = file.read_bytes()
            except OSError:
                continue
            if _is_binary(data[:8192]):
                continue
            searched += 1
            rel = self.ws.relative(file.resolve())
            for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if regex.search(line):
                    if len(matches) >= args.max_results:
                        truncated = True
                        break
                    matches.append({"path": rel, "line": number, "text": line[:MAX_LINE_CHARS]})
            if truncated:
                break
        return {"matches": matches, "files_searched": searched, "truncated": truncated}

    def find(self, args: FindArgs) -> dict[str, Any]:
        real = self._existing(args.path)
        if not real.is_dir():
            raise ToolError(f"{args.path!r} is a file, not a folder to search")
        by_name = "/" not in args.pattern
        found: list[str] = []
        truncated = False
        for path in self._walk(real):
            rel_here = path.relative_to(real).as_posix()
            subject = path.name if by_name else rel_here
            if fnmatch.fnmatchcase(subject, args.pattern):
                if len(found) >= MAX_ENTRIES:
                    truncated = True
                    break
                shown = self.ws.relative(real / rel_here)
                found.append(shown + "/" if path.is_dir() and not path.is_symlink() else shown)
        return {"paths": found, "truncated": truncated}

    def write_file(self, args: WriteFileArgs) -> dict[str, Any]:
        real = self.ws.resolve(args.path)
        if real.is_dir():
            raise ToolError(f"{args.path!r} is a folder")
        created = not real.exists()
        real.parent.mkdir(parents=True, exist_ok=True)
        data = args.content.encode("utf-8", "surrogatepass")
        real.write_bytes(data)
        return {"path": self.ws.relative(real), "bytes": len(data), "created": created}

    def edit_file(self, args: EditFileArgs) -> dict[str, Any]:
        real = self._existing(args.path)
        if real.is_dir():
            raise ToolError(f"{args.path!r} is a folder")
        data = real.read_bytes()
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
        real.write_bytes(text.encode("utf-8", "surrogateescape"))
        return {"path": self.ws.relative(real), "replacements": count}


def builtin_tools(
    workspace: Workspace,
    names: frozenset[str],
    *,
    bash_timeout_s: float = DEFAULT_BASH_TIMEOUT_S,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    bash_env: Mapping[str, str] | None = None,
) -> list[ToolDef]:
    """Return the built-in tools among ``names``, confined to ``workspace``, in preset order.

    ``bash_env`` adds variables to bash's small environment.
    """
    files = _Files(workspace, max_output_bytes)

    def threaded(fn: Callable[[Any], dict[str, Any]]) -> Callable[[Any], Any]:
        async def run(args: Any) -> dict[str, Any]:
            return await asyncio.to_thread(fn, args)

        return run

    async def bash(args: BashArgs) -> dict[str, Any]:
        return await run_bash(
            workspace,
            args,
            default_timeout_s=bash_timeout_s,
            max_output_bytes=max_output_bytes,
            env=bash_env,
        )

    every = [
        ToolDef(
            "read_file",
            "Read a text file of the workspace, by lines (offset is 1-based).",
            ReadFileArgs,
            threaded(files.read_file),
        ),
        ToolDef(
            "list_dir",
            "List a folder of the workspace: each entry's name, type and size.",
            ListDirArgs,
            threaded(files.list_dir),
        ),
        ToolDef(
            "grep",
            "Search the text files under a workspace path for a regular expression; "
            "returns matching lines with their path and line number.",
            GrepArgs,
            threaded(files.grep),
        ),
        ToolDef(
            "find",
            "Find files and folders under a workspace path by glob pattern.",
            FindArgs,
            threaded(files.find),
        ),
        ToolDef(
            "write_file",
            "Create or overwrite a file of the workspace with the given content "
            "(missing folders are created).",
            WriteFileArgs,
            threaded(files.write_file),
        ),
        ToolDef(
            "edit_file",
            "Replace an exact, unique piece of text in a workspace file "
            "(or every occurrence with replace_all).",
            EditFileArgs,
            threaded(files.edit_file),
        ),
        ToolDef(
            "bash",
            f"Run a bash command in the workspace folder; killed after timeout_s seconds "
            f"(default {bash_timeout_s:g}); stdout and stderr are each cut to "
            f"{max_output_bytes} bytes.",
            BashArgs,
            bash,
        ),
    ]
    return [tool for tool in every if tool.name in names]
