"""Memory follows retention: a removed agent leaves nothing behind in the tree's indexes.

The soak (``python -m stress --only soak``) watches RSS over minutes; this pins
the cause it found: every delivered completion left an empty per-recipient
queue behind, one per agent that ever received a completion, for ever.
"""

from __future__ import annotations

from retinue.actors.tree import HOST_KEY, Tree
from retinue.protocol.messages import AgentState

from . import agent, completion


def test_removing_closed_agents_leaves_no_index_entry_behind() -> None:
    tree = Tree()
    lead = agent("lead1", "/root/lead", state=AgentState.CLOSED)
    kid = agent("kid1", "/root/lead/kid", "lead1", state=AgentState.CLOSED)
    done = completion(kid, 1, 1, recipient_id="lead1")
    tree.load([lead, kid], [], [done])
    assert set(tree.pending) == {HOST_KEY, "lead1"}
    tree.mark_delivered(tree.pending_for("lead1")[0])  # the lead received it
    assert set(tree.pending) == {HOST_KEY}
    tree.remove_agents(["kid1"])
    tree.remove_agents(["lead1"])
    assert tree.agents == {}
    assert set(tree.pending) == {HOST_KEY} and tree.pending[HOST_KEY] == {}
    assert tree.completions == {} and tree.undelivered == {} and tree.mailbox == {}
    assert tree.top_of == {} and set(tree.children) <= {HOST_KEY}


def test_a_rerouted_completion_leaves_no_empty_queue() -> None:
    tree = Tree()
    lead = agent("lead1", "/root/lead", state=AgentState.COMPLETED)
    kid = agent("kid1", "/root/lead/kid", "lead1", state=AgentState.COMPLETED)
    tree.load([lead, kid], [], [completion(kid, 1, 1, recipient_id="lead1")])
    tree.reroute(tree.pending_for("lead1")[0], None)  # to the host
    assert set(tree.pending) == {HOST_KEY}
    assert [c.completion.agent_id for c in tree.pending_for(None)] == ["kid1"]
