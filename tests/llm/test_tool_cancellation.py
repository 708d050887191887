"""A tool that raises ``CancelledError`` while nobody cancelled its call failed: the model gets
the error as the call's result and the turn goes on. A call the turn's cancel reaches still
ends with ``CancelledError`` (the turn is interrupted)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from llm.conftest import SETTLE_S, stub_runner, tool_call, tool_messages
from retinue import CompletionStatus, Limits, Profile, Runtime
from retinue.llm import ToolBox, tool
from retinue.llm.tools._host import host_tool_defs
from retinue.testing import OpenAIStub, StubReply


@tool
async def flaky_fetch(url: str) -> str:
    """Fetch a page (its client gives up with a CancelledError of its own)."""
    await asyncio.sleep(0)
    raise asyncio.CancelledError(f"the client gave up on {url}")


@tool
def sync_fetch(url: str) -> str:
    """Fetch a page on a pool thread (its client raises CancelledError)."""
    raise asyncio.CancelledError(f"the client gave up on {url}")


@tool(timeout_s=30)
async def bounded_fetch(url: str) -> str:
    """A bounded call whose own sub-task is cancelled under it."""
    inner = asyncio.ensure_future(asyncio.sleep(30))
    inner.cancel()
    await inner
    return url


def box(default_timeout_s: float | None = None) -> ToolBox:
    defs = host_tool_defs([flaky_fetch, sync_fetch, bounded_fetch]).values()
    return ToolBox([d.definition(default_timeout_s) for d in defs])


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_tools_own_cancelled_error_is_its_error_result(timeout: float | None) -> None:
    tools = box(timeout)
    arguments = json.dumps({"url": "u"})
    results = {n: json.loads(asyncio.run(tools.call(n, arguments))) for n in tools.names}
    assert results == {
        "flaky_fetch": {"error": "flaky_fetch failed: CancelledError: the client gave up on u"},
        "sync_fetch": {"error": "sync_fetch failed: CancelledError: the client gave up on u"},
        "bounded_fetch": {"error": "bounded_fetch failed: CancelledError"},
    }


def test_a_call_whose_task_is_cancelled_still_raises_cancelled_error() -> None:
    started = asyncio.Event()

    @tool(timeout_s=30)
    async def slow(x: int) -> int:
        """Wait until cancelled."""
        started.set()
        await asyncio.sleep(30)
        return x

    tools = ToolBox([d.definition() for d in host_tool_defs([slow]).values()])

    async def scenario() -> None:
        call = asyncio.ensure_future(tools.call("slow", '{"x": 1}'))
        await started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(scenario())


def test_the_model_sees_a_host_tools_cancelled_error_and_the_turn_goes_on(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    replies = [tool_call("flaky_fetch", {"url": "https://example.test"}), DONE]
    stub.handler = lambda r: StubReply(message=replies[min(r.number, len(replies)) - 1])
    runner = stub_runner(stub, host_tools={"flaky_fetch": flaky_fetch})
    profiles = [Profile("fetcher", tools=["flaky_fetch"], runner=runner)]
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=Limits(wait_default_s=30)) as rt:
        done = rt.wait(rt.spawn("fetcher", "fetch it").id, timeout=SETTLE_S)
    assert (done.status, done.output) == (CompletionStatus.COMPLETED, "noted: the fetch failed")
    (result,) = tool_messages(stub.requests[-1].messages)
    assert json.loads(result["content"]) == {
        "error": "flaky_fetch failed: CancelledError: the client gave up on https://example.test"
    }


DONE: dict[str, Any] = {"role": "assistant", "content": "noted: the fetch failed"}
