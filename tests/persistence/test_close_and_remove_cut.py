"""An agent closed and removed by one command stays closed in the store until its delete.

Retention can remove an agent in the very command that closes it (``close_tree``
with ``retain_closed_agents=1``). The removal's deletes are spread over later
transactions (compaction), so a crash can fall between the command's commit and
the deletes: the store must then hold the agent as the command left it, closed,
not as it was before the command (live, under a closed parent).
"""

from __future__ import annotations

import signal
from pathlib import Path

from retinue import AgentState, Profile, Runtime
from retinue.protocol.records import AgentRecord

from . import PROMPT_S, Child, decode_db

CLOSE_CUT_CHILD = r"""
import os, signal, sys
from retinue import Limits, Profile, Runtime
import retinue.persistence.writer as writer

folder = sys.argv[1]
def lead(turn):
    turn.run_many([("leaf", f"a{i}") for i in range(40)], timeout=60)
    return "lead"

profiles = [
    Profile("lead", subagents=["leaf"], runner=lead, wake_on_completion=False),
    Profile("leaf", runner=lambda turn: "leaf"),
]
rt = Runtime.open(
    folder, profiles=profiles, limits=Limits(retain_closed_agents=1, fanout_cap=48)
)
top = rt.spawn("lead", "go")
rt.wait(top.id, timeout=60)
commit = writer.Writer._commit

def cutting(self, writes, *, timed=False):
    if writes and all(value is None for _, _, value in writes):  # the first spread delete
        print("CUT", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return commit(self, writes, timed=timed)

writer.Writer._commit = cutting
rt.close_tree(top.id)
rt.shutdown()
"""


def test_a_crash_before_the_spread_delete_leaves_the_closed_agents_closed(
    tmp_path: Path,
) -> None:
    """Killed between ``close_tree``'s commit and its retention's deletes: every stored
    agent is closed, and the next open repairs nothing (before the fix, the 40 leaves
    were stored live under their closed lead and the open reported
    ``live_under_closed`` for each)."""
    folder = tmp_path / "store"
    with Child(CLOSE_CUT_CHILD, folder) as child:
        child.expect("CUT", timeout=PROMPT_S * 3)
        assert child.finish() == -signal.SIGKILL
    stored = list(decode_db(folder, "agents", AgentRecord).values())
    assert len(stored) == 41  # the lead and its 40 leaves: none deleted yet
    assert {r.state for r in stored} == {AgentState.CLOSED}
    profiles = [Profile("lead", runner=lambda turn: "lead"), Profile("leaf", runner=lambda t: "")]
    with Runtime.open(folder, profiles=profiles) as rt:
        assert [d.code for d in rt.diagnostics] == []
