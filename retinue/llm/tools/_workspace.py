"""The workspace folder built-in tools are confined to, and the rule that keeps them there.

A path a model gives is relative to the workspace. It is refused when it is
absolute, when any of its parts is ``..``, or when, with every symlink
resolved, it lands outside the workspace (a symlink pointing out). Symlinks
that stay inside are followed. The check is made before each use; a process
that swaps a folder for a symlink between the check and the use can still
race it, so the workspace is a guard-rail for a model, not a sandbox for
hostile local processes (and ``bash`` is never confined by it).

A path that cannot be resolved (a symlink loop) is refused by name, and
:meth:`Workspace.walk` skips such links (and links pointing out) instead of
failing the whole search, reporting each by its path relative to the
workspace: no message ever shows the host's path of the folder.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from retinue.errors import ConfigurationError
from retinue.llm.tools._arguments import ToolError

__all__ = ["SKIP_DIRS", "Workspace", "WorkspaceEscape"]

SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules"})
"""Folders :meth:`Workspace.walk` never enters (version control, caches, dependencies)."""


class WorkspaceEscape(ToolError):
    """A path leaves the workspace (absolute, ``..``, or a symlink pointing out)."""


class Workspace:
    """A folder the built-in tools may read (and, with ``"modify"``, write) below."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Confine tools to ``root`` (resolved once, symlinks included).

        Raises:
            ConfigurationError: ``root`` does not exist or is not a folder.
        """
        path = Path(root)
        if not path.is_dir():
            raise ConfigurationError(f"workspace {str(path)!r} is not an existing folder")
        self.root = path.resolve(strict=True)

    def __repr__(self) -> str:
        """Show the root."""
        return f"Workspace({str(self.root)!r})"

    def contains(self, real: Path) -> bool:
        """Return whether the fully resolved path ``real`` is the root or below it."""
        return real == self.root or self.root in real.parents

    def resolve(self, path: str) -> Path:
        """Return the real path a model's relative ``path`` names inside the workspace.

        ``""`` and ``"."`` name the workspace itself. The path need not exist.

        Raises:
            WorkspaceEscape: absolute, has a ``..`` part, holds a NUL, or
                resolves (through symlinks) outside the workspace.
            ToolError: a symlink on the path loops (it cannot be resolved).
        """
        if "\x00" in path:
            raise WorkspaceEscape(f"path {path!r} holds a NUL character")
        pure = PurePosixPath(path.replace("\\", "/"))
        if pure.is_absolute() or path.startswith("~") or (len(path) > 1 and path[1] == ":"):
            raise WorkspaceEscape(
                f"path {path!r} is absolute; give a path relative to the workspace"
            )
        if ".." in pure.parts:
            raise WorkspaceEscape(f"path {path!r} leaves the workspace through '..'")
        try:
            real = (self.root / pure).resolve(strict=False)
        except (RuntimeError, OSError):  # RuntimeError: a symlink loop (Python 3.11)
            raise ToolError(
                f"path {path!r} cannot be resolved: a symlink on it loops or is unreadable"
            ) from None
        if not self.contains(real):
            raise WorkspaceEscape(
                f"path {path!r} resolves outside the workspace (a symlink points out)"
            )
        return real

    def relative(self, real: Path) -> str:
        """Return ``real`` (inside the workspace) as the model sees it: relative, with ``/``."""
        rel = real.relative_to(self.root).as_posix()
        return rel if rel else "."

    def walk(
        self,
        top: Path,
        skipped: list[dict[str, str]],
        stop: threading.Event | None = None,
    ) -> Iterator[Path]:
        """Yield the folders and files below ``top`` (a real path inside), sorted, top down.

        Symlinks are not followed into folders; a symlink that points out of
        the workspace is left out, and one that cannot be resolved (a loop)
        or a folder that cannot be listed is left out and added to
        ``skipped`` as ``{"path": <relative>, "reason": ...}``. :data:`SKIP_DIRS`
        are not entered. The walk ends early once ``stop`` is set.
        """

        def unlisted(error: OSError) -> None:
            where = Path(error.filename) if error.filename else top
            skipped.append(
                {"path": self.shown(where), "reason": f"cannot be listed: {error.strerror}"}
            )

        for folder, dirs, files in os.walk(top, onerror=unlisted, followlinks=False):
            if stop is not None and stop.is_set():
                return
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            base = Path(folder)
            for name in dirs:
                yield base / name
            for name in sorted(files):
                path = base / name
                if path.is_symlink() and not self._link_inside(path, skipped):
                    continue
                yield path

    def _link_inside(self, link: Path, skipped: list[dict[str, str]]) -> bool:
        """Whether symlink ``link`` resolves inside; a loop is noted in ``skipped``."""
        try:
            return self.contains(link.resolve(strict=False))
        except (RuntimeError, OSError):
            skipped.append(
                {"path": self.shown(link), "reason": "a symlink that cannot be resolved (a loop)"}
            )
            return False

    def shown(self, path: Path) -> str:
        """Return ``path`` (lexically below the root, links unresolved) as the model sees it."""
        try:
            rel = path.relative_to(self.root).as_posix()
        except ValueError:
            return "?"
        return rel if rel else "."
