"""Python runners of ``act_team.toml``: a lead over a quick worker and a slow one.

The lead spawns ``q`` (answers at once) and ``s`` (runs until the file
``$ACT_RELEASE`` exists, or it is interrupted), then waits for ``s`` past its
interrupted turns, so the CLI's actions can act on the tree while it runs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from retinue import Completion, CompletionStatus, Turn
from retinue.errors import RetinueError


def lead(turn: Turn) -> str:
    """Spawn ``q`` and ``s``; wait for ``s`` to complete."""
    turn.spawn("quick", "answer", name="q")
    turn.spawn("slow", "hold", name="s")
    while True:
        event = turn.wait("s", timeout=120)
        if isinstance(event, Completion) and event.status is CompletionStatus.COMPLETED:
            return f"lead done: {event.output}"


def quick(turn: Turn) -> str:
    """Answer with the task at once."""
    return f"quick: {turn.task}"


def slow(turn: Turn) -> str:
    """Run until ``$ACT_RELEASE`` exists (at most two minutes) or the turn is interrupted."""
    release = Path(os.environ["ACT_RELEASE"])
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        if turn.cancelled.wait(0.05):
            raise RetinueError("cancelled")
    return "released"
