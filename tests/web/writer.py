"""A writer process for the web view's tests: a model lead over a blocked worker and a hostile leaf.

``python writer.py STORE RELEASE`` opens STORE as its writer and spawns
``/root/review`` (the offline model ``retinue/scripted``), which delegates to
``worker`` (a Python runner that blocks until the file RELEASE exists) and
``hostile`` (whose output is HTML that must be shown as text). It prints
``ready`` once the lead is spawned, waits for the lead's completion, prints
``done`` and exits; it gives up after 120 s.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from retinue import Profile, Runtime, Turn

HOSTILE = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'


def worker(turn: Turn) -> str:
    """Block until the release file exists (or the turn is interrupted)."""
    release = Path(os.environ["RELEASE_FILE"])
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        if turn.cancelled.wait(0.05):
            return "cancelled"
    return "worker finished"


def hostile(turn: Turn) -> str:
    """Answer with markup that a careless page would run."""
    return HOSTILE


def main() -> None:
    """Run the tree and exit once the lead has settled."""
    store, release = sys.argv[1], sys.argv[2]
    os.environ["RELEASE_FILE"] = release
    profiles = [
        Profile("lead", subagents=["worker", "hostile"], model="retinue/scripted", tools="none"),
        Profile("worker", runner=worker),
        Profile("hostile", runner=hostile),
    ]
    with Runtime.open(store, profiles=profiles) as rt:
        lead = rt.spawn("lead", "review the change", name="review")
        print("ready", flush=True)
        rt.wait(lead.id, timeout=120)
        print("done", flush=True)


if __name__ == "__main__":
    main()
