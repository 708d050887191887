"""Live tool and model call events: in each turn, after its turn_started and before its settle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llm.conftest import SETTLE_S
from retinue import (
    Event,
    ModelCallFinished,
    ModelDelta,
    Runtime,
    ToolCallFinished,
    ToolCallStarted,
    TurnSettled,
    TurnStarted,
)

pytestmark = pytest.mark.usefixtures("litellm")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "code_review" / "team.toml"
LIVE = (ToolCallStarted, ToolCallFinished, ModelCallFinished, ModelDelta)


def turns_of(events: list[Event]) -> dict[tuple[str, int], list[Event]]:
    """Each turn's live events, checking that every one lies inside its agent's open turn."""
    open_turn: dict[str, int] = {}
    turns: dict[tuple[str, int], list[Event]] = {}
    for event in events:
        agent = event.agent_id
        if isinstance(event, TurnStarted):
            assert agent not in open_turn, f"{event.path}: a turn started inside another"
            open_turn[agent] = event.generation
            turns[(agent, event.generation)] = []
        elif isinstance(event, TurnSettled):
            assert open_turn.pop(agent, None) == event.generation, f"{event.path}: unstarted settle"
        elif isinstance(event, LIVE):
            assert agent in open_turn, f"{event.path}: {type(event).__name__} outside a turn"
            turns[(agent, open_turn[agent])].append(event)
    assert not open_turn, "every turn settled"
    return turns


def check_tool_pairs(live: list[Event]) -> None:
    """Every tool call of a turn started once and finished once, in that order."""
    started: dict[str, int] = {}
    for index, event in enumerate(live):
        if isinstance(event, ToolCallStarted):
            assert event.call_id not in started
            started[event.call_id] = index
        elif isinstance(event, ToolCallFinished):
            assert started.pop(event.call_id) < index
    assert not started, f"tool calls that never finished: {started}"


def test_the_events_of_a_run_arrive_in_turn_order(tmp_path: Path) -> None:
    seen: list[Event] = []
    with Runtime.open(tmp_path / "store", team=EXAMPLE) as rt, rt.stream() as stream:
        lead = rt.spawn("lead", "review the change", name="review")
        rt.wait(lead.id, timeout=SETTLE_S)
        rt.follow_up(lead.id, "and once more, briefly")
        rt.wait(lead.id, timeout=SETTLE_S)
        rt.wait_idle(timeout=SETTLE_S)
        agents = rt.agents()
        last = (lead.id, 2)  # the follow-up's settle ends the run
        for event in stream:
            seen.append(event)
            if isinstance(event, TurnSettled) and (event.agent_id, event.generation) == last:
                break
    turns = turns_of(seen)
    assert len(turns) == len(agents) + 1  # every agent's turn, and the lead's follow-up
    for (agent, _), live in turns.items():
        calls = [e for e in live if isinstance(e, ModelCallFinished)]
        assert calls, f"{agent}: a model turn with no model call"
        assert all(c.model == "retinue/scripted" for c in calls)
        check_tool_pairs(live)
        # A tool call is started after the model call that asked for it.
        first_tool = next((i for i, e in enumerate(live) if isinstance(e, ToolCallStarted)), None)
        if first_tool is not None:
            assert isinstance(live[first_tool - 1], ModelCallFinished | ToolCallStarted)
    tools = {e.tool for e in seen if isinstance(e, ToolCallFinished)}
    assert {"spawn_subagents", "list_dir"} <= tools
    # The tokens the events report are the ones the agents were charged with.
    reported = sum(
        e.prompt_tokens + e.completion_tokens for e in seen if isinstance(e, ModelCallFinished)
    )
    assert reported == sum(a.usage.total_tokens for a in agents)


def test_nothing_is_built_while_nobody_listens(tmp_path: Path, monkeypatch: Any) -> None:
    built: list[str] = []

    def counting(**fields: Any) -> Any:
        built.append(fields["tool"])
        return ToolCallStarted(**fields)

    monkeypatch.setattr("retinue.actors.events._observer.ToolCallStarted", counting)
    with Runtime.open(tmp_path / "store", team=EXAMPLE) as rt:
        lead = rt.spawn("lead", "review", name="review")
        rt.wait(lead.id, timeout=SETTLE_S)
        assert built == []
        seen: list[Event] = []
        rt.subscribe(seen.append)
        rt.follow_up(lead.id, "again")
        rt.wait(lead.id, timeout=SETTLE_S)
        rt.wait_idle(timeout=SETTLE_S)
    assert built and len(built) == len([e for e in seen if isinstance(e, ToolCallStarted)])
