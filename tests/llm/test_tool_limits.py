"""Tools that cannot wedge the process: errors, deadlines, non-regular files, links, the pool."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from retinue.llm import ToolBox, Workspace, tool
from retinue.llm.builtin_tools import builtin_tools
from retinue.llm.host_tools import host_tool_defs
from tests.conftest import wait_until


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


# -- bash's deadline --------------------------------------------------------------------


def bash_box(ws: Path) -> ToolBox:
    return ToolBox(builtin_tools(Workspace(ws), frozenset({"bash"})))


def bash(ws: Path, command: str, timeout_s: float, bound_s: float = 60.0) -> dict[str, Any]:
    """Run bash through the toolbox; fail (not hang) if it outlives ``bound_s``."""

    async def scenario() -> str:
        arguments = json.dumps({"command": command, "timeout_s": timeout_s})
        return await asyncio.wait_for(bash_box(ws).call("bash", arguments), bound_s)

    result: dict[str, Any] = json.loads(asyncio.run(scenario()))
    return result


def gone(pid: int) -> bool:
    """Whether process ``pid`` no longer runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize(
    "command",
    [
        "sleep 600 > log 2>&1",
        "exec >/dev/null 2>&1; sleep 600",
        "exec >/dev/null 2>&1; sleep 600 & echo $! > pid; wait",
    ],
)
def test_bash_timeout_holds_when_the_command_redirects_its_output(
    tmp_path: Path, command: str
) -> None:
    result = bash(tmp_path, command, timeout_s=1)
    assert result["timed_out"] is True
    assert result["exit_code"] is None
    assert "timeout" in result["error"]
    if (tmp_path / "pid").exists():
        pid = int((tmp_path / "pid").read_text())
        wait_until(lambda: gone(pid), timeout=30, what="the killed group's background sleep")


def test_bash_leaves_no_process_of_its_group_running(tmp_path: Path) -> None:
    result = bash(tmp_path, "sleep 600 >/dev/null 2>&1 & echo $! > pid", timeout_s=30)
    assert (result["exit_code"], result["timed_out"]) == (0, False)
    pid = int((tmp_path / "pid").read_text())
    wait_until(lambda: gone(pid), timeout=30, what="the background sleep")


def test_bash_returns_when_the_command_ends_even_if_a_child_holds_the_pipes(
    tmp_path: Path,
) -> None:
    result = bash(tmp_path, "echo started; sleep 600 & echo $! > pid", timeout_s=300, bound_s=60)
    assert (result["exit_code"], result["timed_out"]) == (0, False)
    assert result["stdout"] == "started\n"
    pid = int((tmp_path / "pid").read_text())
    wait_until(lambda: gone(pid), timeout=30, what="the background sleep")
