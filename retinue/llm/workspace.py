"""The workspace folder built-in tools are confined to, and the rule that keeps them there.

A path a model gives is relative to the workspace. It is refused when it is
absolute, when any of its parts is ``..``, or when, with every symlink
resolved, it lands outside the workspace (a symlink pointing out). Symlinks
that stay inside are followed. The check is made before each use; a process
that swaps a folder for a symlink between the check and the use can still
race it, so the workspace is a guard-rail for a model, not a sandbox for
hostile local processes (and ``bash`` is never confined by it).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from retinue.errors import ConfigurationError
from retinue.llm.arguments import ToolError

__all__ = ["Workspace", "WorkspaceEscape"]


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
        real = (self.root / pure).resolve(strict=False)
        if not self.contains(real):
            raise WorkspaceEscape(
                f"path {path!r} resolves outside the workspace (a symlink points out)"
            )
        return real

    def relative(self, real: Path) -> str:
        """Return ``real`` (inside the workspace) as the model sees it: relative, with ``/``."""
        rel = real.relative_to(self.root).as_posix()
        return rel if rel else "."
