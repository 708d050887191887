"""A host wait on an interrupted lead whose children's completions are pending for it.

An interrupted agent is never woken by its children's completions (a wake
follows only a turn that ended on its own), so once the host has received the
lead's own completions nothing will come: the wait must raise
``NothingToWaitFor`` at once, as the README promises, instead of blocking
until its timeout. The service soak met it after every kill: the restore
leaves each tree in flight as an interrupted lead with its interrupted
children's completions pending for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import OpenRuntime, wait_settled, wait_until

from retinue import AgentState, NothingToWaitFor, Profile, Runtime, Turn
from retinue.testing import Gate

PATIENCE_S = 30.0  # a hang guard: the fixed wait answers at once


def _team(gate: Gate) -> list[Profile]:
    def lead(turn: Turn) -> str:
        for i in range(2):
            turn.spawn("leaf", f"part {i}")
        turn.cancelled.wait(PATIENCE_S)
        return "lead"

    return [Profile("lead", subagents=["leaf"], runner=lead), Profile("leaf", runner=gate)]


def test_an_interrupted_lead_with_children_still_running_has_nothing_to_wait_for(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime(_team(gate))
    lead = rt.spawn("lead", "job")
    gate.wait_started(2)
    rt.interrupt(lead.id)
    assert rt.wait(lead.id, timeout=PATIENCE_S).status == "interrupted"
    gate.release()  # the children settle: their completions are pending for the lead
    for child in rt.agents():
        if child.profile == "leaf":
            wait_settled(rt, child.id)
    assert rt.get(lead.id).state is AgentState.INTERRUPTED
    with pytest.raises(NothingToWaitFor):
        rt.wait(lead.id, timeout=PATIENCE_S)


def test_after_a_reopen_an_interrupted_tree_has_nothing_more_to_wait_for(
    store_path: Path, gate: Gate
) -> None:
    rt = Runtime.open(store_path, profiles=_team(gate))
    lead = rt.spawn("lead", "job")
    gate.wait_started(2)
    rt.shutdown()  # the lead and its children were running: they come back interrupted
    rt = Runtime.open(store_path, profiles=_team(gate))
    try:
        wait_until(lambda: rt.get(lead.id).state is AgentState.INTERRUPTED)
        assert rt.wait(lead.id, timeout=PATIENCE_S).status == "interrupted"
        with pytest.raises(NothingToWaitFor):
            rt.wait(lead.id, timeout=PATIENCE_S)
    finally:
        rt.shutdown()


def test_after_a_reopen_a_completed_lead_is_not_woken_and_not_waited_for(
    store_path: Path, gate: Gate
) -> None:
    def lead(turn: Turn) -> str:
        for i in range(2):
            turn.spawn("leaf", f"part {i}")
        return "lead"  # settles at once; its children keep running

    team = [Profile("lead", subagents=["leaf"], runner=lead), Profile("leaf", runner=gate)]
    rt = Runtime.open(store_path, profiles=team)
    first = rt.spawn("lead", "job")
    assert rt.wait(first.id, timeout=PATIENCE_S).status == "completed"
    gate.wait_started(2)
    rt.shutdown()  # the children come back interrupted, their completions pending for the lead
    rt = Runtime.open(store_path, profiles=team)
    try:
        assert rt.get(first.id).state is AgentState.COMPLETED  # recovery wakes nobody
        with pytest.raises(NothingToWaitFor):
            rt.wait(first.id, timeout=PATIENCE_S)
    finally:
        rt.shutdown()
