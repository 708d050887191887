"""Tools that cannot wedge the process: errors, deadlines, non-regular files, links, the pool."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from retinue.llm import ToolBox, tool
from retinue.llm.host_tools import host_tool_defs


def host_box(*fns: Any, **options: Any) -> ToolBox:
    return ToolBox([t.definition() for t in host_tool_defs(list(fns)).values()], **options)


def call(box: ToolBox, name: str, **arguments: Any) -> dict[str, Any]:
    text = asyncio.run(box.call(name, json.dumps(arguments)))
    result: dict[str, Any] = json.loads(text)
    return result


# -- BaseException from a host tool -----------------------------------------------------


@pytest.mark.parametrize("kind", [SystemExit, KeyboardInterrupt])
def test_a_sync_host_tool_raising_a_base_exception_is_a_tool_error(kind: type) -> None:
    @tool
    def quit_now() -> str:
        """Leave."""
        raise kind(3)

    result = call(host_box(quit_now), "quit_now")
    assert result == {"error": f"quit_now failed: {kind.__name__}: 3"}


@pytest.mark.parametrize("kind", [SystemExit, KeyboardInterrupt])
def test_an_async_host_tool_raising_a_base_exception_is_a_tool_error(kind: type) -> None:
    @tool
    async def quit_now() -> str:
        """Leave."""
        raise kind()

    result = call(host_box(quit_now), "quit_now")
    assert result == {"error": f"quit_now failed: {kind.__name__}"}


def test_cancellation_still_propagates_through_a_tool_call() -> None:
    started = asyncio.Event()

    @tool
    async def forever() -> str:
        """Never answer."""
        started.set()
        await asyncio.sleep(3600)
        return "no"

    box = host_box(forever)

    async def scenario() -> None:
        task = asyncio.create_task(box.call("forever", "{}"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
