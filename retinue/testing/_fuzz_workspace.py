"""A workspace built to trip the workspace tools, and a canary outside it.

:func:`chaos_workspace` fills a folder's ``workspace/`` (a copy of a given
folder, or a few files) with what wedged or leaked before: a FIFO, symlink
loops, links pointing out of the workspace (to a folder and to a file holding
a canary text), a line that makes ``(a+)+$`` backtrack, a binary file, a file
past the read bound, and bytes that are not UTF-8. The canary and the
folder's host path must never show in a tool result
(:func:`~retinue.testing.invariants.check_invariants` with ``forbidden=``).
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_COPY_BYTES", "ChaosWorkspace", "chaos_workspace"]

MAX_COPY_BYTES = 64 * 1024 * 1024
"""The largest workspace :func:`chaos_workspace` copies (a fuzzing run must not fill a disk)."""

_NOTES = "# Notes\n\nTODO: check the payment rounding.\ndef charge(amount):\n    return amount\n"


@dataclass(frozen=True)
class ChaosWorkspace:
    """A workspace made by :func:`chaos_workspace`: its folder and what must never show."""

    path: Path
    forbidden: tuple[str, ...]
    """The canary (outside the workspace) and the host path of the folder holding both."""


def _size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            try:
                total += (Path(root) / name).lstat().st_size
            except OSError:
                continue
    return total


def _fixtures(ws: Path, canary_file: Path) -> None:
    """Add the hostile entries to the workspace ``ws``."""
    os.mkfifo(ws / "chaos_fifo")
    (ws / "chaos_loop").symlink_to("chaos_loop")
    loops = ws / "chaos_dir"
    loops.mkdir(exist_ok=True)
    (loops / "a").symlink_to("b")
    (loops / "b").symlink_to("a")
    (ws / "chaos_out").symlink_to(os.path.relpath(canary_file, ws))
    (ws / "chaos_outdir").symlink_to(os.path.relpath(canary_file.parent, ws))
    (ws / "chaos_backtrack.txt").write_text("a" * 23 + "!\n")
    (ws / "chaos_binary.bin").write_bytes(b"\x00\x01binary\x00" * 64)
    (ws / "chaos_big.txt").write_text("a long line of text\n" * 12_000)
    (ws / "chaos_unicode.txt").write_bytes("héllo 👀 مرحبا\n".encode() + b"\xff\xfe not utf-8\n")


def chaos_workspace(folder: str | os.PathLike[str], source: Path | None = None) -> ChaosWorkspace:
    """Make ``folder/workspace`` (a copy of ``source``, or a few files) with hostile entries.

    ``folder`` must exist; ``folder/outside/`` gets the canary file the
    workspace's links point at.

    Raises:
        ValueError: ``source`` is not a folder, or holds more than
            :data:`MAX_COPY_BYTES`.
        OSError: the folder cannot be written.
    """
    base = Path(folder).absolute()
    ws = base / "workspace"
    if source is not None:
        if not source.is_dir():
            raise ValueError(f"workspace {source} is not a folder")
        if _size(source) > MAX_COPY_BYTES:
            raise ValueError(
                f"workspace {source} holds more than {MAX_COPY_BYTES // 2**20} MiB; "
                "fuzz a smaller copy"
            )
        shutil.copytree(source, ws, symlinks=True)
    else:
        ws.mkdir()
        (ws / "notes.md").write_text(_NOTES)
    outside = base / "outside"
    outside.mkdir()
    canary = f"RETINUE-CANARY-{secrets.token_hex(8)}"
    canary_file = outside / "canary.txt"
    canary_file.write_text(f"{canary}\n")
    _fixtures(ws, canary_file)
    return ChaosWorkspace(ws, (canary, str(base), str(base.resolve())))
