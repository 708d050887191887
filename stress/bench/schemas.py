"""Tool-schema bytes per model call for the example team's lead, a reviewer and a leaf.

The code-review team (``examples/code_review/team.toml``) runs against an
:class:`~retinue.testing.OpenAIStub` on 127.0.0.1 (litellm's OpenAI path; the
stub answers as the offline model does: leads delegate, leaves read the
workspace), and every request's ``tools`` are measured as compact JSON, the
coordinator tools apart from the workspace tools. An agent that may spawn
nothing is offered ``send_message`` alone of the coordinator tools; before
issue 21 it was also offered ``wait_agent``, ``list_agents``,
``interrupt_agent`` and ``close_agent``, whose schemas are the same for every
agent: the "before" figures add those four, as the lead's requests carry them,
to each leaf request. No timing here: the figures are exact.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from retinue import Runtime, Team
from retinue.protocol.tools import COORDINATOR_TOOLS, SPAWN_TOOLS
from retinue.testing import OpenAIStub
from stress.parts import Options, Part, Result

__all__ = ["run"]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "code_review" / "team.toml"
LEAF_BEFORE = tuple(t for t in COORDINATOR_TOOLS if t not in (*SPAWN_TOOLS, "send_message"))
"""What a leaf was offered before beside send_message: wait, list, interrupt, close."""


def _bytes(tools: list[dict[str, Any]]) -> int:
    return len(json.dumps(tools, separators=(",", ":"), ensure_ascii=False).encode())


def _requests(stub: OpenAIStub) -> list[dict[str, Any]]:
    """Run the example team against ``stub`` once; return the request bodies."""
    text = EXAMPLE.read_text(encoding="utf-8").replace(
        'model = "retinue/scripted"', f'model = "openai/stub-model"\napi_base = "{stub.url}"'
    )
    team = Team.from_toml(text, source=EXAMPLE)
    previous = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = "x"  # the stub takes any key; litellm wants one
    try:
        with tempfile.TemporaryDirectory() as tmp, Runtime.open(Path(tmp) / "s", team=team) as rt:
            done = rt.wait(rt.spawn(team.lead, "review the change", name="review").id, 600)
            assert done.status == "completed", done
    finally:
        if previous is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = previous
    return [request.body for request in stub.requests]


def run() -> dict[str, Any]:
    """Measure every request of one run of the example team; return the row."""
    team = Team.from_toml(EXAMPLE.read_text(encoding="utf-8"), source=EXAMPLE)
    by_instructions = {spec.instructions.strip(): name for name, spec in team.agents.items()}
    with OpenAIStub() as stub:
        bodies = _requests(stub)
    per_agent: dict[str, list[list[dict[str, Any]]]] = {}
    for body in bodies:
        name = by_instructions[body["messages"][0]["content"].strip()]
        per_agent.setdefault(name, []).append(list(body.get("tools") or []))
    lead_tools = {t["function"]["name"]: t for t in per_agent[team.lead][0]}
    leaf = per_agent["secrets"][0]  # send_message first, then the workspace tools
    before = [leaf[0], *(lead_tools[name] for name in LEAF_BEFORE), *leaf[1:]]
    extra = _bytes(before) - _bytes(leaf)  # the four schemas a leaf no longer gets, per call
    row: dict[str, Any] = {"model_calls": len(bodies)}
    for label, name in (("lead", team.lead), ("reviewer", "security"), ("leaf", "secrets")):
        tools = per_agent[name][0]
        coordinator = [t for t in tools if t["function"]["name"] in COORDINATOR_TOOLS]
        row[f"{label}_calls"] = len(per_agent[name])
        row[f"{label}_coordinator_tools"] = len(coordinator)
        row[f"{label}_coordinator_schema_bytes_per_call"] = _bytes(coordinator)
        row[f"{label}_all_tool_schema_bytes_per_call"] = _bytes(tools)
    row["leaf_coordinator_schema_bytes_per_call_before"] = (
        row["leaf_coordinator_schema_bytes_per_call"] + extra
    )
    spawning = {n for n, spec in team.agents.items() if spec.subagents}
    leaf_calls = sum(len(calls) for n, calls in per_agent.items() if n not in spawning)
    sent = sum(_bytes(tools) for calls in per_agent.values() for tools in calls)
    row["run_tool_schema_bytes"] = sent
    row["run_tool_schema_bytes_before"] = sent + leaf_calls * extra
    row["run_saving"] = f"{1 - sent / row['run_tool_schema_bytes_before']:.0%}"
    return row


def _part(options: Options) -> Result:
    title = "tool-schema bytes per model call, example code-review team (before: issue 21's)"
    return Result.row(title, run())


PART = Part("tool_schemas", _part)
