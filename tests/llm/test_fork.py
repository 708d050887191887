"""Fork a 3-level tree of model agents as of each of its generations, live and after a crash.

The tree runs on the offline scripted model through litellm's real call path:
``/root/lead`` delegates to ``mid``, which delegates to ``leaf``. Then ``mid``
and ``lead`` get a follow-up each (generation 2). Every agent is snapshotted
(record and stored transcript) as each of its generations settles; a fork as
of generation N must reproduce, for every agent of the subtree, the snapshot
it had when the origin's generation N ended, and leave the origin untouched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from persistence import Child
from support import wait_settled

from llm.conftest import SETTLE_S
from retinue import (
    AgentInfo,
    AgentLimitExceeded,
    AgentState,
    Limits,
    Profile,
    Runtime,
)
from retinue.llm import SCRIPTED_MODEL

pytestmark = pytest.mark.usefixtures("litellm")

Snapshot = dict[str, Any]


def team() -> list[Profile]:
    """lead -> mid -> leaf on the scripted model; nobody is woken by a completion."""
    return [
        Profile("lead", subagents=["mid"], model=SCRIPTED_MODEL, wake_on_completion=False),
        Profile("mid", subagents=["leaf"], model=SCRIPTED_MODEL, wake_on_completion=False),
        Profile("leaf", model=SCRIPTED_MODEL),
    ]


def snapshot(rt: Runtime, ref: str) -> Snapshot:
    """What a fork as of now must copy of one agent: its settled record and transcript."""
    detail = rt.inspect(ref, transcript_tail=1000)
    info = detail.info
    return {
        "profile": info.profile,
        "state": str(info.state),
        "generation": info.generation,
        "task": info.task,
        "output": info.output,
        "error": info.error,
        "transcript": [[m.role, m.content, m.generation] for m in detail.transcript],
    }


def relative(info: AgentInfo, root: str) -> str:
    """``info``'s path below ``root`` ("" for the root itself)."""
    return info.path[len(root) :]


def subtree(rt: Runtime, root: str) -> dict[str, Snapshot]:
    """Every live agent at or below ``root``, by path relative to it."""
    return {
        relative(a, root): snapshot(rt, a.id)
        for a in rt.agents()
        if a.path == root or a.path.startswith(root + "/")
    }


def build(rt: Runtime) -> dict[int, dict[str, Snapshot]]:
    """Run the tree's two generations; return the lead's subtree as each of them ended."""
    lead = rt.spawn("lead", "plan A", name="lead")
    wait_settled(rt, lead.id, 1, SETTLE_S)
    (mid,) = [a for a in rt.agents() if a.profile == "mid"]
    (leaf,) = [a for a in rt.agents() if a.profile == "leaf"]
    wait_settled(rt, leaf.id, 1, SETTLE_S)
    asof = {1: subtree(rt, lead.path)}
    queued = rt.follow_up(mid.id, "plan B")
    wait_settled(rt, mid.id, queued.generation, SETTLE_S)
    queued = rt.follow_up(lead.id, "plan C")
    wait_settled(rt, lead.id, queued.generation, SETTLE_S)
    asof[2] = subtree(rt, lead.path)
    return asof


def check_fork(rt: Runtime, fork: AgentInfo, at: int, expected: dict[str, Snapshot]) -> None:
    """The fork's subtree is ``expected`` (the origin's as of ``at``), usage from nothing."""
    assert fork.forked_from is not None
    assert (fork.forked_from.path, fork.forked_from.generation) == ("/root/lead", at)
    got = subtree(rt, fork.path)
    assert got == expected
    for agent in rt.agents():
        if agent.path.startswith(fork.path):
            assert agent.usage.total_tokens == 0  # budgets count from the fork
            assert agent.forked_from is not None and agent.state.settled


def test_fork_at_each_generation_of_a_three_level_tree(llm_runtime: Any) -> None:
    rt = llm_runtime(team(), max_agents=12)
    asof = build(rt)
    # Generation 1 of the lead ended before mid's and lead's second turns: a fork as of
    # then has each agent's first generation and transcript, none of the later messages.
    assert asof[1]["/mid"]["generation"] == 1 and asof[2]["/mid"]["generation"] == 2
    assert len(asof[2][""]["transcript"]) > len(asof[1][""]["transcript"])
    live = len(rt.agents())
    forks = {at: rt.fork("/root/lead", at=at) for at in (1, 2)}
    assert [f.path for f in forks.values()] == ["/root/lead_fork1", "/root/lead_fork2"]
    for at, fork in forks.items():
        check_fork(rt, fork, at, asof[at])
    now = rt.fork("/root/lead", name="now")  # at=None: as it is now
    check_fork(rt, now, 2, asof[2])
    assert subtree(rt, "/root/lead") == asof[2], "the origin is untouched"
    assert len(rt.agents()) == live + 9  # three subtrees of three
    # The caps count a fork as spawns: one more subtree of three passes max_agents 12.
    with pytest.raises(AgentLimitExceeded):
        rt.fork("/root/lead")
    assert len(rt.agents()) == live + 9, "a refused fork changes nothing"
    # A copy carries on differently; its origin does not move.
    mid = rt.get("/root/lead_fork1/mid")
    queued = rt.follow_up(mid.id, "plan D")
    carried = wait_settled(rt, mid.id, queued.generation, SETTLE_S)
    assert (carried.generation, carried.task) == (2, "plan D")
    assert (
        snapshot(rt, mid.id)["transcript"][: len(asof[1]["/mid"]["transcript"])]
        == (asof[1]["/mid"]["transcript"])
    )
    assert subtree(rt, "/root/lead") == asof[2]


CRASH_CHILD = r"""
import json, sys, threading
sys.path[:0] = ["tests"]
from llm.test_fork import build, team
from retinue import Limits, Profile, Runtime

hold = threading.Event()

def blocking(turn):
    sys.stdout.write("BLOCKED\n")
    sys.stdout.flush()
    hold.wait()
    return "never"

rt = Runtime.open(
    sys.argv[1],
    profiles=[*team(), Profile("blocker", runner=blocking)],
    limits=Limits(wait_default_s=60.0),
)
asof = build(rt)
with open(sys.argv[2], "w") as out:
    json.dump(asof, out)
sys.stdout.write("ASOF\n")
sys.stdout.flush()
rt.spawn("blocker", "never ends", name="blocker")
hold.wait()  # killed here, a turn running
"""


def test_fork_after_a_crash_and_reopen(tmp_path: Path) -> None:
    store = tmp_path / "store"
    written = tmp_path / "asof.json"
    with Child(CRASH_CHILD, store, written) as child:
        child.expect("ASOF", timeout=SETTLE_S)
        child.expect("BLOCKED", timeout=SETTLE_S)
        child.kill()
    asof = {int(k): v for k, v in json.loads(written.read_text()).items()}
    profiles = [*team(), Profile("blocker", runner=lambda turn: "again")]
    with Runtime.open(store, profiles=profiles, limits=Limits(max_agents=20)) as rt:
        for at in (1, 2):
            check_fork(rt, rt.fork("/root/lead", at=at), at, asof[at])
        assert subtree(rt, "/root/lead") == asof[2]
        # The turn running at the crash is lost: a fork copies it as it settled then.
        blocker = rt.get("/root/blocker")
        assert blocker.state is AgentState.INTERRUPTED
        copy = rt.fork("/root/blocker")
        assert (copy.state, copy.task, copy.generation) == (blocker.state, "never ends", 1)
