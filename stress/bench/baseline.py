"""A baseline build of retinue to measure against in the same run: an older commit's tree.

``with baseline_checkout("2222abf") as folder:`` extracts that commit's files
(``git archive``, no worktree, nothing written to the repository) into a
temporary folder and yields it, or None when there is no git or no such
commit (a checkout without history, an installed package): the parts then
say "baseline not available" instead of a ratio.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["BASELINE_COMMIT", "baseline_checkout"]

ROOT = Path(__file__).resolve().parents[2]

BASELINE_COMMIT = "2222abf"
"""main before issue 21 (where its figures were measured)."""


@contextlib.contextmanager
def baseline_checkout(commit: str = BASELINE_COMMIT) -> Iterator[Path | None]:
    """Yield a temporary folder holding ``commit``'s tree, or None if git cannot give it."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix=f"retinue-{commit}-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp)
