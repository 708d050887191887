"""Python runners for the retinue-server tests' team (loaded by the team file)."""

from __future__ import annotations

import os
from typing import Any


def patient(turn: Any) -> str:
    """Wait PATIENT_S s (or until interrupted), then answer; a resumed turn answers at once."""
    if turn.reason == "resume":
        return "resumed answer"
    turn.cancelled.wait(float(os.environ.get("PATIENT_S", "60")))
    return "patient answer"


def released(turn: Any) -> str:
    """Answer once the file named by RELEASE_FILE exists (or when interrupted; 120 s at most)."""
    release = os.environ["RELEASE_FILE"]
    for _ in range(2400):
        if os.path.exists(release) or turn.cancelled.wait(0.05):
            break
    return "released answer"
