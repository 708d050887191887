"""A settle's last model step is written with the settle's own record write.

The step's usage (the agent's, its tree's) and the turn's end land in one
record write (``ModelState.last_step`` leaves them to ``Lifecycle.settle``):
what is stored is what two writes stored, for a top-level agent and for a
child whose tree total is its top agent's.
"""

from __future__ import annotations

from pathlib import Path

from retinue import AgentState, Profile, Runtime, Usage
from retinue.llm import SCRIPTED_MODEL
from retinue.testing import Gate

PROMPT_S = 20.0


def test_a_top_agents_last_step_is_stored_with_its_settle(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    profiles = [Profile("m", model=SCRIPTED_MODEL)]
    with Runtime.open(folder, profiles=profiles) as rt:
        done = rt.run("m", "say hi", name="a", timeout=PROMPT_S)
        live = rt.get(done.agent_id)
    assert live.state is AgentState.COMPLETED
    assert live.usage.total_tokens > 0
    assert live.tree_usage == live.usage
    with Runtime.open(folder, profiles=profiles) as rt:
        stored = rt.get(done.agent_id)
        assert (stored.usage, stored.tree_usage, stored.output) == (
            live.usage,
            live.usage,
            done.output,
        )
        assert stored.in_doubt == 0
        assert stored.updated_at == live.updated_at


def test_a_childs_last_step_adds_to_its_top_agents_tree(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    gate = Gate()
    profiles = [Profile("lead", runner=gate, subagents=["m"]), Profile("m", model=SCRIPTED_MODEL)]
    with Runtime.open(folder, profiles=profiles) as rt:
        lead = rt.spawn("lead", "hold", name="lead")
        child = rt.spawn("m", "say hi", name="c", parent=lead.path)
        done = rt.wait(child.id, timeout=PROMPT_S)
        spent = rt.get(child.id).usage
        assert spent.total_tokens > 0
        assert rt.get(lead.id).tree_usage == spent
        assert rt.get(lead.id).usage == Usage()
        gate.release()
        rt.wait(lead.id, timeout=PROMPT_S)
    with Runtime.open(folder, profiles=profiles) as rt:
        assert rt.get(child.id).usage == spent
        assert rt.get(child.id).output == done.output
        assert rt.get(lead.id).tree_usage == spent
