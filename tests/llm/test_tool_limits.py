"""Tools that cannot wedge the process: errors, deadlines, non-regular files, links, the pool."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support import wait_until

from retinue import Limits, Profile, Runtime
from retinue.errors import ConfigurationError, TurnInterrupted
from retinue.llm import ToolBox, Workspace, build_toolbox, tool
from retinue.llm.tools import _pool as tool_pool_module
from retinue.llm.tools._builtins import builtin_tools
from retinue.llm.tools._host import host_tool_defs
from retinue.llm.tools._pool import ToolPool, abandoned_tool_calls, tool_pool
from retinue.protocol.tools import MODIFY_TOOLS
from retinue.testing.leaks import Leaks


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


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_an_interrupted_turn_is_not_a_tool_error(timeout_s: float | None) -> None:
    """TurnInterrupted (a turn operation of an interrupted turn) ends the turn; it is not
    shown to the model as a tool failure, with or without a per-tool timeout."""

    @tool(timeout_s=timeout_s)
    async def coordinate() -> str:
        """Ask the supervisor something."""
        raise TurnInterrupted("this turn was interrupted; its calls are refused")

    with pytest.raises(TurnInterrupted):
        asyncio.run(host_box(coordinate).call("coordinate", "{}"))


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


def child_processes() -> set[int]:
    """This process's children (Linux)."""
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            found.update(int(pid) for pid in (task / "children").read_text().split())
    return found


@pytest.mark.parametrize("cancels", [1, 2])
@pytest.mark.parametrize("tool_name", ["bash", "grep"])
def test_a_cancelled_tool_process_is_seen_ending_before_the_cancel_goes_on(
    tmp_path: Path, tool_name: str, cancels: int
) -> None:
    """An interrupt cancels a running bash or grep call; a runtime's shutdown cancels it
    (again) and then closes the loop: the killed process's exit must be seen before that,
    not reported on stderr afterwards ("Loop ... that handles pid ... is closed")."""
    (tmp_path / "backtrack.txt").write_text("a" * 40 + "!\n")
    box = ToolBox(builtin_tools(Workspace(tmp_path), frozenset({"bash", "grep"})))
    arguments = {"bash": {"command": "sleep 600", "timeout_s": 300}, "grep": {"pattern": "(a+)+$"}}
    before = child_processes()

    async def scenario() -> None:
        call = asyncio.ensure_future(box.call(tool_name, json.dumps(arguments[tool_name])))
        await asyncio.to_thread(wait_until, lambda: child_processes() - before)
        await asyncio.sleep(0.3)  # past the start (asyncio's own, cancelled, leaks its pipes)
        for _ in range(cancels):
            call.cancel()
            await asyncio.sleep(0)
        with pytest.raises(asyncio.CancelledError):
            await call

    with Leaks() as leaks:
        asyncio.run(scenario())  # closes the loop at once, as a runtime's shutdown does
        # (the tool pool of a loop that is not a runtime's idles on: not this test's concern)
        assert [b for b in leaks.check() if b.invariant != "thread_left_behind"] == []


# -- non-regular files ----------------------------------------------------------------


def file_box(ws: Path, **options: Any) -> ToolBox:
    return ToolBox(builtin_tools(Workspace(ws), frozenset(MODIFY_TOOLS), **options))


def test_every_file_tool_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    box = file_box(tmp_path)
    for name, extra in [
        ("read_file", {}),
        ("edit_file", {"old_text": "a", "new_text": "b"}),
        ("write_file", {"content": "x"}),
    ]:
        result = call(box, name, path="pipe", **extra)
        assert set(result) == {"error"}, (name, result)
        assert "'pipe' is a FIFO" in result["error"], (name, result)
        assert str(tmp_path) not in result["error"]


def test_grep_and_find_pass_over_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "a.txt").write_text("needle\n")
    box = file_box(tmp_path)
    found = call(box, "grep", pattern="needle")
    assert found["matches"] == [{"path": "a.txt", "line": 1, "text": "needle"}]
    assert "error" in call(box, "grep", pattern="needle", path="pipe")
    assert call(box, "find", pattern="*")["paths"] == ["a.txt", "pipe"]


SEVEN_FIFOS = """
import asyncio, json, os, sys
from retinue.llm import ToolBox, Workspace
from retinue.llm.tools._builtins import builtin_tools

ws = sys.argv[1]
os.mkfifo(os.path.join(ws, "pipe"))
with open(os.path.join(ws, "ok.txt"), "w") as f:
    f.write("fine\\n")
box = ToolBox(builtin_tools(Workspace(ws), frozenset({"read_file"})))

async def main():
    calls = [box.call("read_file", json.dumps({"path": "pipe"})) for _ in range(7)]
    calls.append(box.call("read_file", json.dumps({"path": "ok.txt"})))
    for text in await asyncio.gather(*calls):
        print(text)

asyncio.run(main())
"""


def test_seven_fifo_reads_wedge_nothing_and_the_process_exits(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SEVEN_FIFOS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == 8
    assert all("is a FIFO" in r["error"] for r in results[:7])
    assert results[7]["content"] == "fine\n"


# -- symlinks that cannot be resolved ---------------------------------------------------


@pytest.fixture
def looped(tmp_path: Path) -> Path:
    """A workspace with a two-link loop and a self-loop deep inside, and real files."""
    ws = tmp_path / "ws"
    (ws / "src" / "deep").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("needle = 1\n")
    (ws / "notes.md").write_text("a needle here\n")
    os.symlink("b", ws / "src" / "deep" / "a")
    os.symlink("a", ws / "src" / "deep" / "b")
    os.symlink("self", ws / "self")
    return ws


def no_host_path(result: dict[str, Any], ws: Path) -> None:
    text = json.dumps(result)
    assert str(ws) not in text and str(ws.parent) not in text, text


def test_grep_skips_a_symlink_loop_and_names_it_relative(looped: Path) -> None:
    result = call(file_box(looped), "grep", pattern="needle")
    assert {m["path"] for m in result["matches"]} == {"notes.md", "src/app.py"}
    skipped = {s["path"] for s in result["skipped"]}
    assert skipped == {"self", "src/deep/a", "src/deep/b"}
    assert all("loop" in s["reason"] for s in result["skipped"])
    no_host_path(result, looped)


def test_find_skips_a_symlink_loop_and_names_it_relative(looped: Path) -> None:
    result = call(file_box(looped), "find", pattern="*.py")
    assert result["paths"] == ["src/app.py"]
    assert {s["path"] for s in result["skipped"]} == {"self", "src/deep/a", "src/deep/b"}
    no_host_path(result, looped)


@pytest.mark.parametrize("name", ["read_file", "list_dir", "grep", "find", "edit_file"])
def test_a_looping_path_is_refused_by_its_relative_name(looped: Path, name: str) -> None:
    extra: dict[str, Any] = {
        "grep": {"pattern": "x"},
        "find": {"pattern": "*"},
        "edit_file": {"old_text": "a", "new_text": "b"},
    }.get(name, {})
    result = call(file_box(looped), name, path="src/deep/a", **extra)
    assert set(result) == {"error"}
    assert "'src/deep/a' cannot be resolved" in result["error"]
    no_host_path(result, looped)


@pytest.mark.parametrize("name", ["read_file", "list_dir", "write_file", "grep", "find"])
def test_an_os_error_names_the_model_path_not_the_host_path(tmp_path: Path, name: str) -> None:
    long_name = "n" * 300  # past NAME_MAX: the OS refuses it with ENAMETOOLONG
    extra: dict[str, Any] = {
        "grep": {"pattern": "x"},
        "find": {"pattern": "*"},
        "write_file": {"content": "x"},
    }.get(name, {})
    result = call(file_box(tmp_path), name, path=long_name, **extra)
    assert set(result) == {"error"}
    assert "too long" in result["error"].lower()
    no_host_path(result, tmp_path)


# -- grep: a pattern cannot freeze the process ------------------------------------------

EVIL = "(a+)+$"
EVIL_LINE = "a" * 40 + "!"  # 2**40 backtracking steps: never ends in Python's re


def grep_children() -> list[int]:
    """Process ids of this process's live children running the grep engine."""
    found: list[int] = []
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except FileNotFoundError:
                continue
            if b"grep_child.py" in cmdline and not gone(int(pid)):
                found.append(int(pid))
    return found


def test_grep_with_a_catastrophic_pattern_times_out_with_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "evil.txt").write_text(EVIL_LINE + "\n")
    result = call(file_box(tmp_path, grep_timeout_s=1), "grep", pattern=EVIL)
    assert set(result) == {"error"}
    assert result["error"].startswith("grep timed out after 1 s")
    assert "simplify" in result["error"]
    wait_until(lambda: not grep_children(), timeout=30, what="the killed grep process")


def test_cancelling_a_grep_kills_its_search(tmp_path: Path) -> None:
    (tmp_path / "evil.txt").write_text(EVIL_LINE + "\n")
    box = file_box(tmp_path, grep_timeout_s=600)

    async def scenario() -> None:
        task = asyncio.create_task(box.call("grep", json.dumps({"pattern": EVIL})))
        await asyncio.to_thread(wait_until, grep_children, timeout=30, what="the search")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    wait_until(lambda: not grep_children(), timeout=30, what="the cancelled grep process")


FROZEN_GREP = """
import asyncio, json, sys
from pathlib import Path
from retinue.llm import ToolBox, Workspace
from retinue.llm.tools._builtins import builtin_tools

ws = Path(sys.argv[1])
(ws / "evil.txt").write_text("a" * 40 + "!\\n")
box = ToolBox(builtin_tools(Workspace(ws), frozenset({"grep"}), grep_timeout_s=3))

async def main():
    ticks = 0
    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1
    beat = asyncio.create_task(ticker())
    text = await box.call("grep", json.dumps({"pattern": "(a+)+$"}))
    beat.cancel()
    print(json.dumps({"result": json.loads(text), "ticks": ticks}))

asyncio.run(main())
"""


def test_a_catastrophic_grep_never_freezes_the_event_loop(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FROZEN_GREP, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["result"]["error"].startswith("grep timed out after 3 s")
    assert report["ticks"] > 0  # the loop kept running while the pattern backtracked


def test_grep_keeps_python_regex_syntax(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f(x):\n    return x  # TODO(me)\nclass G: pass\n")
    box = file_box(tmp_path)
    named = call(box, "grep", pattern=r"(?P<kw>def|class)\s+(?P=kw)?\w+")
    assert [m["line"] for m in named["matches"]] == [1, 3]
    look = call(box, "grep", pattern=r"(?<=# )TODO(?=\()")
    assert look["matches"] == [{"path": "a.py", "line": 2, "text": "    return x  # TODO(me)"}]
    assert call(box, "grep", pattern="CLASS", ignore_case=True)["files_searched"] == 1


# -- per-tool timeouts and the tool pool --------------------------------------------------


def test_a_sync_host_tool_past_its_timeout_is_abandoned_and_counted() -> None:
    release = threading.Event()

    @tool(timeout_s=0.5)
    def stuck() -> str:
        """Block until released."""
        release.wait(60)
        return "late"

    box = host_box(stuck)

    async def scenario() -> None:
        pool = tool_pool()
        text = await box.call("stuck", "{}")
        assert json.loads(text) == {"error": "tool stuck timed out after 0.5 s"}
        assert pool.abandoned == 1
        assert abandoned_tool_calls(asyncio.get_running_loop()) == 1
        release.set()
        await asyncio.to_thread(wait_until, lambda: pool.abandoned == 0, timeout=30)

    asyncio.run(scenario())


def test_an_async_host_tool_past_its_timeout_is_cancelled() -> None:
    seen: list[str] = []

    @tool
    async def slow() -> str:
        """Sleep."""
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "late"

    box = ToolBox([host_tool_defs([slow])["slow"].definition(0.2)])

    async def scenario() -> None:
        text = await box.call("slow", "{}")
        assert json.loads(text) == {"error": "tool slow timed out after 0.2 s"}
        await asyncio.sleep(0)
        assert seen == ["cancelled"]

    asyncio.run(scenario())


def test_a_tool_that_ignores_its_cancellation_cannot_hold_the_turn() -> None:
    release = asyncio.Event()

    @tool(timeout_s=0.2)
    async def stubborn() -> str:
        """Refuse to stop."""
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.05)
        return "done"

    box = host_box(stubborn)

    async def scenario() -> None:
        text = await box.call("stubborn", "{}")
        assert json.loads(text) == {"error": "tool stubborn timed out after 0.2 s"}
        release.set()
        await asyncio.sleep(0.2)

    asyncio.run(scenario())


def test_a_call_finding_the_pool_full_waits_then_times_out(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    release = threading.Event()

    @tool(timeout_s=0.2)
    def hog() -> str:
        """Hold a pool thread."""
        release.wait(60)
        return "late"

    tools = [
        *builtin_tools(Workspace(tmp_path), frozenset({"read_file"}), tool_timeout_s=0.5),
        host_tool_defs([hog])["hog"].definition(),
    ]
    box = ToolBox(tools)

    async def scenario() -> None:
        pool = tool_pool()
        pool.max_threads = 1
        assert "timed out" in json.loads(await box.call("hog", "{}"))["error"]
        waited = json.loads(await box.call("read_file", json.dumps({"path": "a.txt"})))
        assert waited == {"error": "tool read_file timed out after 0.5 s"}
        assert (pool.threads, pool.waiting, pool.abandoned) == (1, 0, 1)
        release.set()
        await asyncio.to_thread(wait_until, lambda: pool.abandoned == 0, timeout=30)
        read = json.loads(await box.call("read_file", json.dumps({"path": "a.txt"})))
        assert read["content"] == "hello\n"  # the freed thread serves the next call

    asyncio.run(scenario())


def test_the_pool_never_holds_more_threads_than_its_bound() -> None:
    release = threading.Event()
    peak: list[int] = []

    @tool(timeout_s=30)
    def busy(i: int) -> int:
        """Wait a little."""
        release.wait(30)
        return i

    box = host_box(busy)

    async def scenario() -> None:
        pool = tool_pool()
        pool.max_threads = 3
        calls = [asyncio.create_task(box.call("busy", json.dumps({"i": i}))) for i in range(12)]
        await asyncio.to_thread(wait_until, lambda: pool.threads == 3 and pool.waiting == 9)
        peak.append(pool.threads)
        release.set()
        results = [json.loads(t) for t in await asyncio.gather(*calls)]
        assert [r["result"] for r in results] == list(range(12))
        peak.append(pool.threads)

    asyncio.run(scenario())
    assert max(peak) == 3


def test_build_toolbox_bounds_host_tools_without_their_own_timeout() -> None:
    @tool
    def sleepy() -> str:
        """Sleep."""
        time.sleep(5)
        return "late"

    @tool(timeout_s=20)
    def patient() -> str:
        """Sleep a little."""
        time.sleep(0.5)
        return "in time"

    turn = SimpleNamespace(
        profile=Profile("probe"), limits=Limits(), agent=SimpleNamespace(depth=1)
    )
    box = build_toolbox(
        turn, tools=["sleepy", "patient"], host_tools=[sleepy, patient], tool_timeout_s=0.25
    )
    assert call(box, "sleepy") == {"error": "tool sleepy timed out after 0.25 s"}
    assert call(box, "patient") == {"result": "in time"}


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "5"])
def test_timeouts_must_be_positive_numbers(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="timeout_s must be a positive number"):
        tool(timeout_s=bad)(lambda: None)
    turn = SimpleNamespace(
        profile=Profile("probe"), limits=Limits(), agent=SimpleNamespace(depth=1)
    )
    with pytest.raises(ConfigurationError, match="tool_timeout_s must be a positive number"):
        build_toolbox(turn, tool_timeout_s=bad)


def test_the_tool_pool_threads_end_with_their_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shut-down runtime leaves no idle tool thread behind (they used to idle on for
    IDLE_S): the runtime's loop closes its pool."""
    monkeypatch.setattr(tool_pool_module, "IDLE_S", 3600.0)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")

    def tool_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "retinue-tool" and t.is_alive()}

    before = tool_threads()
    leaf = Profile("leaf", model="retinue/scripted", tools="read")
    rt = Runtime.open(tmp_path / "store", profiles=[leaf], workspace=workspace)
    try:
        info = rt.spawn("leaf", "read the files")
        assert rt.wait(info.id, timeout=60).output
        mine = tool_threads() - before
        assert mine  # list_dir and read_file ran on the pool
    finally:
        rt.shutdown()
    wait_until(lambda: not any(t.is_alive() for t in mine), what="the tool threads to end")


def test_the_pool_bound_must_be_a_positive_integer() -> None:
    with pytest.raises(ConfigurationError, match="max_threads"):
        ToolPool(0)
    with pytest.raises(ConfigurationError, match="max_threads"):
        ToolPool(2).max_threads = -1


STUCK_FOREVER = """
import asyncio, json, threading
from retinue.llm import ToolBox, tool
from retinue.llm.tools._pool import tool_pool

@tool(timeout_s=0.5)
def wedged() -> str:
    \"\"\"Never return.\"\"\"
    threading.Event().wait()
    return "never"

box = ToolBox([wedged.definition()])

async def main():
    text = await box.call("wedged", "{}")
    print(json.dumps({"result": json.loads(text), "abandoned": tool_pool().abandoned}))

asyncio.run(main())
"""


def test_a_tool_call_stuck_for_good_is_abandoned_and_the_process_still_exits() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STUCK_FOREVER],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report == {"result": {"error": "tool wedged timed out after 0.5 s"}, "abandoned": 1}


def test_a_tool_result_with_a_lone_surrogate_is_kept_escaped() -> None:
    @tool
    def half_emoji() -> str:
        """Return half an emoji."""
        return "smile \ud83d please"

    text = asyncio.run(host_box(half_emoji).call("half_emoji", "{}"))
    text.encode("utf-8")  # storable as it is
    assert json.loads(text) == {"result": "smile \ud83d please"}
