"""Python runners for the CLI tests' team file (``runner = "runners.py:<name>"``).

``CLI_TEST_DELAY`` (seconds, default 0) makes every leaf sleep, interruptibly,
so a test can act while a run is in progress (so does a woken ``waking_lead``).
``CLI_TEST_FAIL`` names a task fragment whose leaves fail.
"""

from __future__ import annotations

import contextlib
import os

from retinue import Completion, CompletionStatus, Turn
from retinue.errors import DuplicateAgentPath, RetinueError

PLAN = {"lead": ["security", "style"], "security": ["secrets", "injection"], "style": ["naming"]}


def _delegate(turn: Turn, profile: str) -> str:
    kids = PLAN[profile]
    # Longer than a leaf sleeps: a reviewer that gave up first would fail a slow run.
    patience = float(os.environ.get("CLI_TEST_DELAY", "0")) + 60
    for kid in kids:
        with contextlib.suppress(DuplicateAgentPath):  # resumed: the child is there
            turn.spawn(kid, f"{turn.task} / {kid}", name=kid)
    outputs = []
    for kid in kids:
        while True:  # past its messages and interrupted turns, to the kid's settled result
            event = turn.wait(kid, timeout=patience)
            if isinstance(event, Completion) and event.status is not CompletionStatus.INTERRUPTED:
                break
        outputs.append(f"{kid}: {event.output or event.error}")
    return f"{profile} done; " + "; ".join(outputs)


def lead(turn: Turn) -> str:
    """Delegate to security and style, then summarise."""
    return _delegate(turn, "lead")


def reviewer(turn: Turn) -> str:
    """Delegate to this reviewer's specialists, then summarise."""
    profile = turn.agent.profile
    return _delegate(turn, profile)


def leaf(turn: Turn) -> str:
    """Sleep ``CLI_TEST_DELAY`` seconds (waking on interrupt), then answer or fail."""
    delay = float(os.environ.get("CLI_TEST_DELAY", "0"))
    if turn.cancelled.wait(delay):
        raise RetinueError("cancelled")
    fail = os.environ.get("CLI_TEST_FAIL")
    if fail and fail in turn.agent.path:
        raise ValueError(f"fanout_cap is 8 but {turn.agent.path} wanted 12")
    return f"checked {turn.agent.path}"


def waking_lead(turn: Turn) -> str:
    """Delegate to a worker and return; woken with its result, sleep ``CLI_TEST_DELAY``
    seconds (waking on interrupt), then summarise what the turn was handed."""
    if turn.reason == "spawn":
        turn.spawn("worker", f"{turn.task} / worker", name="worker")
        return "delegated"
    delay = float(os.environ.get("CLI_TEST_DELAY", "0"))
    if turn.cancelled.wait(delay):
        raise RetinueError("cancelled")
    return f"summary of {[m.content for m in turn.messages]}"


def quick(turn: Turn) -> str:
    """Answer at once."""
    return f"checked {turn.agent.path}"
