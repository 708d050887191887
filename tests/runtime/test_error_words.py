"""Errors speak with one voice: the same words for the same thing, and the agent's path."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from support import PROMPT_S

from retinue import (
    ActiveDescendants,
    AgentBusy,
    AgentClosed,
    Profile,
    Runtime,
    Turn,
    WaitTimeout,
)
from retinue.testing import Gate, echo


def test_a_host_wait_and_a_turn_wait_time_out_in_the_same_words(tmp_path: Path) -> None:
    gate = Gate()
    said: list[WaitTimeout] = []

    def lead(turn: Turn) -> str:
        child = turn.spawn("slow", "x", name="kid")
        try:
            turn.wait(child.id, timeout=0.05)
        except WaitTimeout as exc:
            said.append(exc)
        return "done"

    profiles = [Profile("lead", subagents=["slow"], runner=lead), Profile("slow", runner=gate)]
    with Runtime.open(tmp_path / "s", profiles=profiles) as rt:
        lead_info = rt.spawn("lead", "go", name="lead")
        rt.wait(lead_info.id, timeout=PROMPT_S)
        with pytest.raises(WaitTimeout) as host:
            rt.wait("/root/lead/kid", timeout=0.05)
        gate.release()
    (turn,) = said
    assert str(turn) == "nothing came from /root/lead/kid within 0.05 s; it keeps running"
    assert str(host.value) == str(turn)
    assert turn.path == host.value.path == "/root/lead/kid"


def test_agent_state_errors_name_the_agent_by_path_and_keep_it_when_pickled(
    tmp_path: Path,
) -> None:
    gate = Gate()
    profiles = [Profile("p", subagents=["p2"], runner=gate), Profile("p2", runner=echo)]
    with Runtime.open(tmp_path / "s", profiles=profiles) as rt:
        busy = rt.spawn("p", "x", name="busy")
        with pytest.raises(AgentBusy) as caught_busy:
            rt.follow_up(busy.id, "again")
        rt.spawn("p2", "child", name="kid", parent=busy.id)
        with pytest.raises(ActiveDescendants) as caught_kids:
            rt.close(busy.id)
        gate.release()
        rt.close_tree(busy.id)
        with pytest.raises(AgentClosed) as caught_closed:
            rt.close(busy.id)
    for caught in (caught_busy, caught_kids, caught_closed):
        error = caught.value
        assert error.path == "/root/busy", error
        again = pickle.loads(pickle.dumps(error))
        assert (type(again), str(again), again.path) == (type(error), str(error), error.path)
    assert str(caught_closed.value) == "/root/busy is closed"
