"""``Runtime.fork``: a running agent's last settled generation, the caps, names, the bound.

Python runners on a real store; the model path (transcripts as of a
generation, a crash and reopen) is in ``tests/llm/test_fork.py``.
"""

from __future__ import annotations

import asyncio

import pytest
from support import OpenRuntime, act, wait_settled

from retinue import (
    AgentLimitExceeded,
    AgentState,
    ArgumentTypeError,
    DuplicateAgentPath,
    FanoutLimitExceeded,
    GenerationNotKept,
    InvalidArgument,
    NotPermitted,
    Profile,
    Runtime,
    Turn,
)
from retinue.testing import Gate


def team(gate: Gate) -> list[Profile]:
    """lead -> mid -> leaf, and deep -> leaf; one runner: ``chain:a,b`` runs a child of
    profile ``a`` (named ``a``) with ``chain:b``, ``block`` blocks on ``gate``, anything
    else answers ``done:<task>``."""

    def worker(turn: Turn) -> str:
        if turn.task == "block":
            return gate(turn)
        if turn.task.startswith("chain:") and turn.task != "chain:":
            first, *rest = turn.task.removeprefix("chain:").split(",")
            child = turn.run(first, "chain:" + ",".join(rest), name=first, timeout=10)
            return f"{turn.agent.profile}<{child.output}>"
        return f"done:{turn.task}"

    return [
        Profile("lead", subagents=["mid", "deep"], runner=worker),
        Profile("deep", subagents=["leaf"], runner=worker),
        Profile("mid", subagents=["leaf"], runner=worker),
        Profile("leaf", runner=worker),
    ]


def count(rt: Runtime) -> int:
    """The runtime's live agents."""
    return len(rt.agents())


def test_a_running_agent_is_forked_as_of_its_last_settled_generation(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime(team(gate))
    w = rt.spawn("leaf", "one", name="w")
    wait_settled(rt, w.id)
    rt.follow_up(w.id, "block")
    gate.wait_started(1)
    assert rt.get(w.id).state is AgentState.RUNNING
    fork = rt.fork("/root/w")
    assert (fork.path, fork.state, fork.generation, fork.task, fork.output) == (
        "/root/w_fork1",
        AgentState.COMPLETED,
        1,
        "one",
        "done:one",
    )
    assert fork.forked_from is not None
    assert (fork.forked_from.path, fork.forked_from.generation) == ("/root/w", 1)
    with pytest.raises(GenerationNotKept, match="has not settled"):
        rt.fork("/root/w", at=2)
    with pytest.raises(InvalidArgument, match="fork one of 1 to 2"):
        rt.fork("/root/w", at=3)
    with pytest.raises(InvalidArgument):
        rt.fork("/root/w", at=0)
    with pytest.raises(ArgumentTypeError):
        rt.fork("/root/w", at="1")  # type: ignore[arg-type]
    gate.release()
    wait_settled(rt, w.id, 2)
    assert rt.get(fork.id).generation == 1, "the fork shares nothing with its origin"
    # The copy carries on from its own generation; its origin does not move.
    again = act(rt, fork.id, "two")
    assert (again.generation, again.output) == (2, "done:two")
    assert rt.get(w.id).output == "released:block"


def test_forks_count_against_the_caps_as_spawns(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime(team(gate), fanout_cap=2, max_agents=7)
    top = rt.spawn("lead", "chain:mid,leaf", name="top")
    assert rt.wait(top.id).output == "lead<mid<done:chain:>>"
    rt.wait(rt.spawn("deep", "x", name="deep", parent="/root/top").id)
    before = [a.path for a in rt.agents()]
    assert before == ["/root/top", "/root/top/mid", "/root/top/mid/leaf", "/root/top/deep"]
    with pytest.raises(NotPermitted):  # deep may not spawn mid
        rt.fork("/root/top/mid", parent="/root/top/deep")
    with pytest.raises(FanoutLimitExceeded):  # a third child of top
        rt.fork("/root/top/mid")
    assert rt.fork("/root/top/mid", parent="/root").path == "/root/mid_fork1"  # 6 of 7
    with pytest.raises(AgentLimitExceeded):
        rt.fork("/root/top")  # 4 more
    assert rt.fork("/root/top", tree=False).path == "/root/top_fork1"  # 7 of 7
    with pytest.raises(AgentLimitExceeded):
        rt.fork("/root/top/mid/leaf", parent="/root")
    assert [a.path for a in rt.agents()] == [
        *before,
        "/root/mid_fork1",
        "/root/mid_fork1/leaf",
        "/root/top_fork1",
    ], "a refused fork changes nothing"


def test_names_and_parents(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime(team(gate))
    top = rt.spawn("lead", "chain:mid", name="top")
    rt.wait(top.id)
    assert rt.fork("/root/top/mid").path == "/root/top/mid_fork1"
    assert rt.fork("/root/top/mid").path == "/root/top/mid_fork2"
    assert rt.fork("/root/top/mid", parent="/root").path == "/root/mid_fork1"
    assert rt.fork("/root/top", name="again", tree=False).path == "/root/again"
    assert [a.path for a in rt.agents() if a.path.startswith("/root/again/")] == []
    with pytest.raises(DuplicateAgentPath):
        rt.fork("/root/top", name="again")
    forked = asyncio.run(rt.fork_async("/root/again", name="third"))
    assert forked.forked_from is not None and forked.forked_from.path == "/root/again"


def test_only_the_newest_generations_are_kept(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime(team(gate), fork_generations=2)
    w = rt.spawn("leaf", "g1", name="w")
    wait_settled(rt, w.id)
    for n in (2, 3, 4):
        act(rt, w.id, f"g{n}")
    with pytest.raises(GenerationNotKept, match="newest 2 settled generations"):
        rt.fork("/root/w", at=2)
    kept = rt.fork("/root/w", at=3)
    assert (kept.generation, kept.task, kept.output) == (3, "g3", "done:g3")
    # A fork's own past starts at the generation it was forked as of.
    with pytest.raises(GenerationNotKept, match="from before it was forked"):
        rt.fork(kept.id, at=2)
