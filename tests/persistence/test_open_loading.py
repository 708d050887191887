"""An open fills the tree in one pass per index family, with what one put at a time gives.

``Tree.load`` indexes restored agents and completions in plain containers
first and hands them to the journaled ones in one step
(:mod:`retinue.actors.tree._loading`); the tree it makes must be the tree
``put_agent`` and ``add_completion`` make one record at a time, journaled
containers included (a plain set or dict would escape the journal).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from retinue.actors import JDict, JSet
from retinue.actors.tree import HOST_KEY, Tree
from retinue.protocol.messages import AgentState
from retinue.protocol.records import AgentRecord, CompletionRecord

from . import agent, completion

STATES = [
    AgentState.COMPLETED,
    AgentState.CLOSED,
    AgentState.FAILED,
    AgentState.INTERRUPTED,
    AgentState.RUNNING,
    AgentState.RESTARTING,
]


@st.composite
def forests(draw: st.DrawFn) -> tuple[list[AgentRecord], list[CompletionRecord]]:
    """Agents (parents before children) and their completions, some undelivered."""
    count = draw(st.integers(1, 14))
    agents: list[AgentRecord] = []
    for index in range(count):
        parent = draw(st.none() | st.sampled_from(agents)) if agents else None
        path = f"/root/a{index}" if parent is None else f"{parent.path}/a{index}"
        key = draw(st.none() | st.sampled_from(["k1", "k2"]))
        agents.append(
            agent(
                f"id{index}",
                path,
                None if parent is None else parent.id,
                state=draw(st.sampled_from(STATES)),
                profile=draw(st.sampled_from(["lead", "leaf"])),
                idempotency_key=key,
                generation=3,
            )
        )
    done: list[CompletionRecord] = []
    for seq, record in enumerate(draw(st.lists(st.sampled_from(agents), max_size=10)), 1):
        recipient = None if record.parent_id is None else record.parent_id
        generation = draw(st.integers(1, 3))
        done.append(
            completion(
                record, generation, seq, recipient_id=recipient, delivered=draw(st.booleans())
            )
        )
    return agents, done


def _one_at_a_time(agents: list[AgentRecord], done: list[CompletionRecord]) -> Tree:
    tree = Tree()
    tree.keys_stale = True
    for record in agents:
        tree.put_agent(record, persist=False)
    for done_record in done:
        tree.add_completion(done_record, persist=False)
    return tree


def _picture(tree: Tree) -> dict[str, Any]:
    """Every agent and completion index, order kept where the order means something."""
    return {
        "agents": dict(tree.agents),
        "state_counts": dict(tree.state_counts),
        "live_profiles": dict(tree.live_profiles),
        "live_paths": dict(tree.live_paths),
        "children": {key: set(kids) for key, kids in tree.children.items()},
        "top_of": dict(tree.top_of),
        "tree_count": dict(tree.tree_count),
        "spawn_keys": dict(tree.spawn_keys),
        "live_count": tree.live_count,
        "completions": {key: list(known.items()) for key, known in tree.completions.items()},
        "pending": {key: list(queue.items()) for key, queue in tree.pending.items()},
        "undelivered": dict(tree.undelivered),
    }


@settings(max_examples=80, derandomize=True, deadline=None)
@given(forests())
def test_a_loaded_tree_is_the_tree_one_put_at_a_time_makes(
    forest: tuple[list[AgentRecord], list[CompletionRecord]],
) -> None:
    agents, done = forest
    loaded = Tree()
    loaded.load(agents, [], done)
    assert _picture(loaded) == _picture(_one_at_a_time(agents, done))
    # Journaled containers all the way down: a command's change to them can be undone.
    assert all(type(kids) is JSet for kids in loaded.children.values())
    assert all(type(known) is JDict for known in loaded.completions.values())
    assert all(type(queue) is JDict for queue in loaded.pending.values())
    assert loaded.writes == []  # nothing was running with inputs: nothing to rewrite


def test_a_loaded_tree_undoes_a_failed_command_exactly() -> None:
    lead = agent("lead1", "/root/lead", state=AgentState.COMPLETED)
    kid = agent("kid1", "/root/lead/kid", "lead1", state=AgentState.COMPLETED)
    tree = Tree()
    tree.load([lead, kid], [], [completion(kid, 1, 1, recipient_id="lead1")])
    before = _picture(tree)
    journal = tree.journal
    journal.begin("Close")
    tree.put_agent(agent("kid2", "/root/lead/kid2", "lead1", state=AgentState.RUNNING))
    tree.put_agent(agent("kid1", "/root/lead/kid", "lead1", state=AgentState.CLOSED))
    tree.mark_delivered(tree.pending_for("lead1")[0])
    assert _picture(tree) != before
    journal.roll_back()
    assert _picture(tree) == before
    assert set(tree.pending) == {HOST_KEY, "lead1"}
