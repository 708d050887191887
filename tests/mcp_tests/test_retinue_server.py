"""retinue's own MCP server through the SDK's client, over stdio and streamable HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import TextContent, TextResourceContents
from support import reader_team, wait_until

from retinue import AgentState, Runtime
from retinue.mcp.options import listen_address

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "code_review" / "team.toml"
SERVERS = Path(__file__).parent / "servers"
ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": os.environ.get("PATH", "")}


def patient_team(tmp_path: Path) -> Path:
    team = tmp_path / "team.toml"
    team.write_text(f'name = "job"\n[agents.lead]\nrunner = "{SERVERS / "runners.py"}:patient"\n')
    return team


def stdio(store: Path, team: Path, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "retinue.cli", "mcp", "--store", str(store), "--team", str(team)],
        env={**ENV, **env},
        cwd=str(ROOT),
    )


async def call(client: Client, tool: str, **arguments: Any) -> tuple[bool, Any]:
    result = await client.call_tool(tool, arguments)
    text = text_of(result.content)
    return result.is_error, (text if result.is_error else json.loads(text))


def text_of(contents: Sequence[object]) -> str:
    """The text of a tool result's or a resource's first content, which must be text."""
    first = contents[0]
    assert isinstance(first, TextContent | TextResourceContents), first
    return first.text


@contextlib.asynccontextmanager
async def http_client(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    """A client of the streamable-HTTP server at ``url``."""
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        yield client


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_run_team_tree_inspect_wait_and_errors(tmp_path: Path, transport: str) -> None:
    """The same calls and answers over both transports, on the example team."""
    progress: list[tuple[float, float | None, str | None]] = []
    store = tmp_path / "s"
    if transport == "http":
        with http_serving(store, EXAMPLE) as (url, token):
            auth = {"Authorization": f"Bearer {token}"}
            anyio.run(_run_team_checks, lambda: http_client(url, auth), progress)
    else:
        stdio_client = lambda: Client(stdio(store, EXAMPLE), mode="legacy")  # noqa: E731
        anyio.run(_run_team_checks, stdio_client, progress)
    assert progress and all(total and total >= 1 for _, total, _ in progress)
    assert any(message and message.startswith("/root/review:") for _, _, message in progress)


async def _run_team_checks(
    connect: Callable[[], contextlib.AbstractAsyncContextManager[Client]],
    reports: list[tuple[float, float | None, str | None]],
) -> None:
    async with connect() as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {
            "run_team",
            "spawn",
            "wait",
            "send",
            "tree",
            "inspect",
            "interrupt",
            "close",
            "resume",
            "approvals",
            "approve",
            "deny",
        }
        error, started = await call(client, "run_team", task="review it", wait_s=0)
        assert not error and started["path"] == "/root/review"
        error, waited = await call(client, "wait", ref="/root/review", timeout_s=0)
        assert not error and waited["event"] == "timed_out"  # still running (it keeps going)

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            reports.append((progress, total, message))

        result = await client.call_tool(
            "wait", {"ref": "/root/review", "timeout_s": 120}, progress_callback=on_progress
        )
        done = json.loads(text_of(result.content))
        assert done["status"] == "completed" and "Summary of 3 subagent results" in done["output"]
        error, tree = await call(client, "tree")
        paths = [row["path"] for row in tree["agents"]]
        assert paths[0] == "/root/review" and "/root/review/security" in paths
        assert tree["count"] == len(paths) and all(
            r["state"] == "completed" for r in tree["agents"]
        )
        error, detail = await call(client, "inspect", ref="/root/review/security")
        assert not error and detail["info"]["profile"] == "security" and detail["transcript"]
        error, text = await call(client, "inspect", ref="/root/nope")
        assert error and "UnknownAgent: no live agent at /root/nope" in text
        error, text = await call(client, "wait", ref="/root/review", timeout_s=5)
        assert error and "NothingToWaitFor" in text
        error, text = await call(client, "wait", ref=5)
        assert error and "ref" in text
        error, text = await call(client, "spawn", profile="nobody", task="x")
        assert error and "UnknownProfile" in text
        resource = await client.read_resource("retinue://agent/root/review")
        assert json.loads(text_of(resource.contents))["info"]["path"] == "/root/review"
        tree_resource = await client.read_resource("retinue://tree")
        page = json.loads(text_of(tree_resource.contents))
        assert [a["path"] for a in page["agents"]] == sorted(paths)
        assert page["count"] == len(paths) and "next" not in page


def test_a_client_killed_mid_run_leaves_the_tree_for_the_next(tmp_path: Path) -> None:
    store, team = tmp_path / "s", patient_team(tmp_path)
    client = subprocess.Popen(
        [sys.executable, str(SERVERS / "client.py"), "stdio", str(store), str(team)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, **ENV},
    )
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == b"CALLING"
        wait_until(
            lambda: _state(store, "/root/job") is AgentState.RUNNING,
            timeout=60,
            what="/root/job running",
        )
        client.send_signal(signal.SIGKILL)
        client.wait(10)
        # Its server saw stdin close: it saved the run as interrupted and let the store go.
        wait_until(
            lambda: _state(store, "/root/job") is AgentState.INTERRUPTED,
            timeout=60,
            what="/root/job interrupted",
        )
    finally:
        if client.poll() is None:
            client.kill()
        client.wait(10)
        if client.stdout is not None:  # a pipe left open is a ResourceWarning (an error here)
            client.stdout.close()

    async def next_client() -> None:
        async with AsyncExitStack() as stack:
            for _ in range(100):  # the old server may still be releasing the store
                try:
                    new = await stack.enter_async_context(Client(stdio(store, team), mode="legacy"))
                    break
                except Exception:
                    await anyio.sleep(0.2)
            error, tree = await call(new, "tree")
            assert [(a["path"], a["state"]) for a in tree["agents"]] == [
                ("/root/job", "interrupted")
            ]
            error, _resumed = await call(new, "resume", ref="/root/job")
            assert not error
            error, first = await call(new, "wait", ref="/root/job", timeout_s=60)
            assert (first["status"], first["generation"]) == ("interrupted", 1)  # the crash's
            error, done = await call(new, "wait", ref="/root/job", timeout_s=60)
            assert done["status"] == "completed" and done["output"] == "resumed answer"

    anyio.run(next_client)


def _state(store: Path, path: str) -> AgentState | None:
    if not (store / "data.mdb").exists():
        return None
    try:
        with Runtime.open(store, readonly=True) as rt:
            return rt.get(path).state
    except Exception:
        return None


@contextlib.contextmanager
def http_serving(store: Path, team: Path, **env: str) -> Iterator[tuple[str, str]]:
    """``retinue mcp --http 127.0.0.1:0`` over ``store``; yield its URL and bearer token."""
    token = "test-token-123"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "retinue.cli",
            "mcp",
            "--store",
            str(store),
            "--team",
            str(team),
            "--http",
            "127.0.0.1:0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, **ENV, **env, "RETINUE_MCP_TOKEN": token},
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline().decode()
        match = re.search(r"serving (http://127\.0\.0\.1:\d+/mcp)", line)
        assert match, line
        yield match[1], token
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stderr is not None:
            process.stderr.close()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    store = tmp_path / "s"
    with http_serving(store, patient_team(tmp_path), PATIENT_S="4") as (url, token):
        yield url, token, store


def test_http_a_killed_client_leaves_the_run_and_its_answer(
    http_server: tuple[str, str, Path],
) -> None:
    url, token, store = http_server
    client = subprocess.Popen(
        [sys.executable, str(SERVERS / "client.py"), "http", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, **ENV, "TOKEN": token},
    )
    assert client.stdout is not None and client.stdout.readline().strip() == b"CALLING"
    wait_until(lambda: _state(store, "/root/job") is AgentState.RUNNING, timeout=60, what="running")
    client.send_signal(signal.SIGKILL)
    client.wait(10)
    client.stdout.close()  # checked above: a pipe left open is a ResourceWarning

    async def next_client(headers: dict[str, str]) -> Any:
        async with http_client(url, headers) as new:
            for _ in range(600):  # the run goes on without its client
                _error, tree = await call(new, "tree")
                if tree["agents"][0]["state"] == "completed":
                    return tree
                await anyio.sleep(0.1)
            return tree

    tree = anyio.run(next_client, {"Authorization": f"Bearer {token}"})
    rows = [(a["path"], a["state"], a["output"]) for a in tree["agents"]]
    assert rows == [("/root/job", "completed", "patient answer")]
    with pytest.raises(BaseException):  # noqa: B017 (no token: 401 before any MCP message)
        anyio.run(next_client, {})


@pytest.mark.parametrize(
    ("http", "host", "token", "message"),
    [
        ("0.0.0.0:8000", None, "t", "not a loopback address: pass --host 0.0.0.0"),
        ("8000", "0.0.0.0", None, "without a bearer token"),
        ("127.0.0.1:x", None, None, "give [HOST:]PORT"),
        ("127.0.0.1:70000", None, None, "not 0-65535"),
    ],
)
def test_non_loopback_needs_host_and_a_token(
    http: str, host: str | None, token: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        listen_address(http, host, token)
    assert listen_address("8765", None, None) == ("127.0.0.1", 8765)
    assert listen_address("8765", "10.0.0.5", "t") == ("10.0.0.5", 8765)


def test_approvals_are_listed_and_answered_over_mcp(tmp_path: Path) -> None:
    team = reader_team(tmp_path)

    async def go() -> None:
        async with Client(stdio(tmp_path / "s", team), mode="legacy") as client:
            error, started = await call(client, "run_team", task="read the notes", wait_s=0)
            assert not error and started["path"] == "/root/reader"
            listed: dict[str, Any] = {"count": 0}
            with anyio.fail_after(60):
                while not listed["count"]:
                    error, listed = await call(client, "approvals")
                    assert not error
                    await anyio.sleep(0.05)
            (request,) = listed["approvals"]
            assert (request["tool"], request["path"]) == ("read_file", "/root/reader")
            error, text = await call(client, "deny", request_id="nope", reason="no")
            assert error and "UnknownApproval" in text
            error, answered = await call(client, "approve", request_id=request["id"], note="ok")
            assert not error and answered == {"approved": request["id"]}
            error, text = await call(client, "approve", request_id=request["id"])
            assert error and "ApprovalAlreadyAnswered" in text
            error, done = await call(client, "wait", ref="/root/reader", timeout_s=60)
            assert not error and "ship on Tuesday" in done["output"]

    anyio.run(go)
