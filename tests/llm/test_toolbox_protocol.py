"""Every toolbox a model turn sees satisfies ``ToolBoxProtocol`` (issue 28).

retinue's own ``ToolBox`` does; a host's ``toolbox=`` builder's result (only
``schemas()`` and ``await call(name, arguments)``) is adapted once, where the
runner is built, so the session holds one kind of toolbox and asks nothing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from retinue.llm import LiteLLMRunner, ToolBox, ToolBoxProtocol, build_toolbox, tool
from retinue.llm.tools import PlainToolBox, as_toolbox, current_call
from retinue.protocol.effects import ToolCall


@tool(effect="read")
def look(path: str) -> str:
    """Look at a path."""
    return f"seen {path}"


class Plain:
    """A host's own toolbox: its schemas and its calls, nothing else."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, ToolCall | None]] = []

    def schemas(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "echo", "parameters": {}}}]

    async def call(self, name: str, arguments: str) -> str:
        self.seen.append((name, arguments, current_call()))
        if arguments == "bad":
            return json.dumps({"error": "bad \ud800 input"})
        return json.dumps({"echo": arguments})


def test_retinues_toolbox_is_one_and_is_taken_as_it_is() -> None:
    box: ToolBoxProtocol = ToolBox([look.definition()])  # type-checked
    assert as_toolbox(box) is box
    assert (box.effect("look"), box.kind("look"), box.granted) == (
        "read",
        "function",
        {"look": "look"},
    )


def test_a_hosts_toolbox_is_adapted_as_the_session_always_treated_it() -> None:
    plain = Plain()
    box = as_toolbox(plain)
    assert isinstance(box, PlainToolBox)
    assert box.granted == {"echo": "echo"}  # its schemas' names stand for themselves
    assert (box.effect("echo"), box.kind("echo")) == ("unsafe", "function")
    call = ToolCall(idempotency_key="k", attempt=2, in_doubt=True)
    assert asyncio.run(box.run("echo", "hi", call)) == ('{"echo": "hi"}', None)
    result, error = asyncio.run(box.run("echo", "bad"))
    assert error == "bad \\ud800 input"  # read from its result, made storable
    assert "\\ud800" in result
    assert plain.seen == [("echo", "hi", call), ("echo", "bad", None)]


def test_the_runner_adapts_a_builders_toolbox_once_where_it_is_built(tmp_path: Path) -> None:
    plain = Plain()

    def build(turn: Any, **settings: Any) -> Any:  # a host's builder, its own toolbox
        return plain

    runner = LiteLLMRunner("retinue/scripted", toolbox=build)
    box = runner.toolbox_builder(None, tools=None)
    assert isinstance(box, PlainToolBox) and box.box is plain
    assert LiteLLMRunner("retinue/scripted").toolbox_builder is build_toolbox


def test_the_session_asks_no_toolbox_what_it_is() -> None:
    import retinue.llm.turn._session as session

    source = Path(session.__file__).read_text(encoding="utf-8")
    assert "isinstance(toolbox" not in source
