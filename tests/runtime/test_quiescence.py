"""``rt.wait_idle`` / ``await rt.settled()``: block until nothing runs, instead of polling."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from support import PROMPT_S

from retinue import Event, Profile, Runtime, Turn, TurnSettled, WaitTimeout
from retinue.testing import Gate, echo


def _lead(turn: Turn) -> str:
    results = turn.run_many([("leaf", "a"), ("leaf", "b")], timeout=PROMPT_S)
    return ",".join(r.output or "" for r in results if not isinstance(r, Exception))


def test_wait_idle_returns_once_a_whole_tree_settled_and_its_events_were_delivered(
    tmp_path: Path,
) -> None:
    seen: list[Event] = []
    profiles = [Profile("lead", subagents=["leaf"], runner=_lead), Profile("leaf", runner=echo)]
    with Runtime.open(tmp_path / "s", profiles=profiles) as rt:
        rt.subscribe(seen.append)
        for i in range(5):
            rt.spawn("lead", f"tree {i}", name=f"t{i}")
        rt.wait_idle(timeout=PROMPT_S)
        agents = rt.agents()
        assert len(agents) == 15
        assert all(a.state.settled for a in agents)
        settled = [e for e in seen if isinstance(e, TurnSettled)]
        assert len(settled) == 15  # every event was handed to the subscriber first


def test_wait_idle_times_out_while_a_turn_runs_and_the_turn_keeps_running(
    tmp_path: Path, gate: Gate
) -> None:
    with Runtime.open(tmp_path / "s", profiles=[Profile("p", runner=gate)]) as rt:
        agent = rt.spawn("p", "held")
        with pytest.raises(WaitTimeout, match="did not go idle"):
            rt.wait_idle(timeout=0.2)
        assert rt.get(agent.id).state.busy
        gate.release()
        rt.wait_idle(timeout=PROMPT_S)
        assert rt.get(agent.id).output == "released:held"


def test_an_abandoned_runner_keeps_the_runtime_busy_until_it_returns(
    tmp_path: Path, make_gate: Callable[..., Gate]
) -> None:
    stubborn = make_gate(honour_cancel=False)
    with Runtime.open(tmp_path / "s", profiles=[Profile("p", runner=stubborn)]) as rt:
        agent = rt.spawn("p", "stubborn")
        stubborn.wait_started(1)
        rt.interrupt(agent.id)
        assert rt.abandoned_runners == 1
        with pytest.raises(WaitTimeout):
            rt.wait_idle(timeout=0.2)
        stubborn.release()
        rt.wait_idle(timeout=PROMPT_S)
        assert rt.abandoned_runners == 0


def test_settled_is_the_async_twin(tmp_path: Path) -> None:
    release = threading.Event()

    async def slow(turn: Turn) -> str:
        while not release.is_set():
            await asyncio.sleep(0.01)
        return "slow done"

    with Runtime.open(tmp_path / "s", profiles=[Profile("p", runner=slow)]) as rt:

        async def scenario() -> str:
            agent = await rt.spawn_async("p", "x")
            with pytest.raises(WaitTimeout):
                await rt.settled(timeout=0.1)
            release.set()
            await rt.settled(timeout=PROMPT_S)
            return (await rt.get_async(agent.id)).output or ""

        assert asyncio.run(scenario()) == "slow done"


def test_wait_idle_on_an_idle_runtime_returns_at_once(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "s", profiles=[Profile("p", runner=echo)]) as rt:
        rt.wait_idle(timeout=PROMPT_S)


def test_a_read_only_runtime_is_always_idle(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "s", profiles=[Profile("p", runner=echo)]) as rt:
        rt.wait(rt.spawn("p", "x").id, timeout=PROMPT_S)
    with Runtime.open(tmp_path / "s", readonly=True) as reader:
        reader.wait_idle(timeout=PROMPT_S)
