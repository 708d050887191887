"""``retinue mcp``'s defects fixed: a wait whose client died, validate-then-act, bounded schemas,
a paged ``retinue://tree``, an unknown agent's resource, and the handshake before litellm."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_tests.test_retinue_server import (
    ENV,
    ROOT,
    SERVERS,
    call,
    http_client,
    stdio,
    text_of,
)
from retinue import Profile, Runtime

TOKEN = "fix-token-123"


def team_file(tmp_path: Path, runner: str = "released", extra: str = "") -> Path:
    team = tmp_path / "team.toml"
    body = f'name = "job"\n[agents.lead]\nrunner = "{SERVERS / "runners.py"}:{runner}"\n{extra}'
    team.write_text(body)
    return team


@contextlib.contextmanager
def serving(tmp_path: Path, team: Path, **env: str) -> Iterator[tuple[str, Path]]:
    """``retinue mcp --http 127.0.0.1:0`` with its stderr in a file; yield its URL and the file."""
    log = tmp_path / "server.err"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "retinue.cli", "mcp", "--store", str(tmp_path / "s")),
                *("--team", str(team), "--http", "127.0.0.1:0"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=ROOT,
            env={**os.environ, **ENV, **env, "RETINUE_MCP_TOKEN": TOKEN},
        )
    try:
        deadline = time.monotonic() + 60
        found = None
        while found is None and time.monotonic() < deadline and process.poll() is None:
            found = re.search(r"serving (http://127\.0\.0\.1:\d+/mcp)", log.read_text())
            time.sleep(0.05)
        assert found, log.read_text()
        yield found[1], log
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def client(url: str) -> contextlib.AbstractAsyncContextManager[Client]:
    return http_client(url, {"Authorization": f"Bearer {TOKEN}"})


def test_a_completion_taken_for_a_killed_client_goes_to_the_next_wait(tmp_path: Path) -> None:
    release = tmp_path / "release"
    with serving(tmp_path, team_file(tmp_path), RELEASE_FILE=str(release)) as (url, _log):

        async def start() -> None:
            async with client(url) as first:
                error, started = await call(first, "run_team", task="wait", wait_s=0)
                assert not error and started["path"] == "/root/job", started

        anyio.run(start)
        waiter = subprocess.Popen(
            [sys.executable, str(SERVERS / "client.py"), "wait", url, "/root/job"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            env={**os.environ, **ENV, "TOKEN": TOKEN},
        )
        try:
            assert waiter.stdout is not None
            # Two progress reports: the server's wait on /root/job is blocked well before.
            for _ in range(2):
                assert waiter.stdout.readline().strip() == b"PROGRESS"
            # No cancel: its connection just closes. Whether or not the server sees that
            # before the answer, the answer's lease is kept until the session confirms it
            # (it never will), and the next wait on /root/job takes it back.
            waiter.send_signal(signal.SIGKILL)
            waiter.wait(10)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait(10)
            if waiter.stdout is not None:
                waiter.stdout.close()
        release.touch()  # the run answers only now, after its waiter died

        async def next_wait() -> Any:
            async with client(url) as second:
                return await call(second, "wait", ref="/root/job", timeout_s=60)

        error, done = anyio.run(next_wait)
    assert not error, done
    assert (done["status"], done["output"]) == ("completed", "released answer")


def test_run_team_checks_every_argument_before_it_starts_the_lead(tmp_path: Path) -> None:
    team = team_file(tmp_path, extra="[limits]\nwait_max_s = 600\n")

    async def go() -> None:
        async with Client(
            stdio(tmp_path / "s", team, RELEASE_FILE=str(tmp_path / "r")), mode="legacy"
        ) as c:
            tools = {t.name: t.input_schema for t in (await c.list_tools()).tools}
            assert tools["run_team"]["properties"]["wait_s"]["maximum"] == 600
            timeout = tools["wait"]["properties"]["timeout_s"]
            assert any(t.get("maximum") == 600 for t in timeout.get("anyOf", [timeout]))
            assert tools["send"]["properties"]["message"]["maxLength"] == 16_384
            name = tools["run_team"]["properties"]["name"]
            assert any(t.get("maxLength") == 40 for t in name.get("anyOf", [name]))
            for arguments in (
                {"task": "x", "wait_s": 7200},
                {"task": "x", "wait_s": -1},
                {"task": "x", "agent": "nobody", "wait_s": 1},
                {"task": "x", "name": "Bad Name"},
            ):
                error, text = await call(c, "run_team", **arguments)
                assert error, (arguments, text)
            error, text = await call(c, "run_team", task="x", wait_s=7200)
            assert "600" in text
            error, text = await call(c, "wait", ref="/root/job", timeout_s=7200)
            assert error
            error, tree = await call(c, "tree")
            assert tree == {"agents": [], "count": 0}  # nothing started

    anyio.run(go)


def test_the_tree_resource_is_paged_like_the_tree_tool(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with Runtime.open(store, profiles=[Profile("lead", runner=lambda turn: "ok")]) as rt:
        for n in range(250):
            rt.spawn("lead", "task", name=f"a{n:03}")
        rt.wait_idle(120)
    team = team_file(tmp_path, runner="patient")

    async def go() -> None:
        async with Client(stdio(store, team), mode="legacy") as c:
            first = json.loads(text_of((await c.read_resource("retinue://tree")).contents))
            assert len(first["agents"]) == 200 and first["count"] == 250
            assert first["next"] == "retinue://tree?offset=200&limit=200"
            second = json.loads(text_of((await c.read_resource(first["next"])).contents))
            assert second["agents"][0]["path"] == "/root/a200"
            assert len(second["agents"]) == 50 and "next" not in second
            small = json.loads(text_of((await c.read_resource("retinue://tree?limit=5")).contents))
            assert len(small["agents"]) == 5 and small["next_offset"] == 5
            with pytest.raises(MCPError, match="limit must be a whole number from 1 to 500"):
                await c.read_resource("retinue://tree?limit=100000")
            error, page = await call(c, "tree", offset=240, limit=100)
            assert not error and len(page["agents"]) == 10 and page["count"] == 250

    anyio.run(go)


def test_an_unknown_agents_resource_says_why_without_a_traceback(tmp_path: Path) -> None:
    team = team_file(tmp_path, runner="patient")
    with serving(tmp_path, team) as (url, log):

        async def go() -> None:
            async with client(url) as c:
                with pytest.raises(MCPError) as read:
                    await c.read_resource("retinue://agent/root/nope")
                assert "UnknownAgent: no live agent at /root/nope" in str(read.value)

        anyio.run(go)
    assert "Traceback" not in log.read_text()


def test_the_handshake_is_answered_before_litellm_is_imported(tmp_path: Path) -> None:
    """A team with a model: its runtime imports litellm when it opens, after the handshake."""
    team = tmp_path / "team.toml"
    team.write_text('name = "job"\n[agents.lead]\nmodel = "retinue/scripted"\n')
    log = tmp_path / "imports.log"
    server = subprocess.Popen(
        [
            *(sys.executable, str(SERVERS / "watch_imports.py"), "mcp"),
            *("--store", str(tmp_path / "s"), "--team", str(team)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, **ENV, "IMPORT_LOG": str(log), "PYTHONPATH": str(ROOT)},
    )
    assert server.stdin is not None and server.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert server.stdin is not None
        server.stdin.write(json.dumps(message).encode() + b"\n")
        server.stdin.flush()

    def answer(number: int) -> dict[str, Any]:
        assert server.stdout is not None
        while True:
            message: dict[str, Any] = json.loads(server.stdout.readline())
            if message.get("id") == number:
                return message

    try:
        params = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        assert answer(1)["result"]["serverInfo"]["name"] == "retinue"
        with log.open("a", encoding="utf-8") as noted:
            noted.write("answered\n")
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        call_tree = {"name": "tree", "arguments": {}}
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call_tree})
        tree = json.loads(answer(2)["result"]["content"][0]["text"])
        assert tree == {"agents": [], "count": 0}  # the runtime opened (litellm imported)
    finally:
        server.stdin.close()
        server.wait(60)
        server.stdout.close()
    assert log.read_text().splitlines() == ["answered", "import litellm"]


def test_a_lease_a_dead_server_left_is_given_back_at_the_next_open(tmp_path: Path) -> None:
    """A server killed after its wait took a completion and before the client had it: the
    lease stays in the store, and the next server gives the completion to the next wait."""
    store = tmp_path / "s"
    with Runtime.open(store, profiles=[Profile("lead", runner=lambda turn: "first answer")]) as rt:
        info = rt.spawn("lead", "task", name="job")
        taken = rt.wait(info.id, 60, lease="retinue-mcp:left-by-a-dead-server")
        assert taken.output == "first answer"
        other = rt.spawn("lead", "task", name="other")
        rt.wait(other.id, 60, lease="someone-else")  # not ours: kept

    async def go() -> None:
        async with Client(stdio(store, team_file(tmp_path, runner="patient")), mode="legacy") as c:
            error, done = await call(c, "wait", ref="/root/job", timeout_s=30)
            assert not error and done["output"] == "first answer", done

    anyio.run(go)
    with Runtime.open(store, profiles=[Profile("lead", runner=lambda turn: "")]) as rt:
        assert list(rt.leases()) == ["someone-else"]


def test_a_store_another_writer_holds_is_refused_before_the_handshake(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with Runtime.open(store, profiles=[Profile("lead", runner=lambda turn: "")]):
        refused = subprocess.run(
            [sys.executable, "-m", "retinue.cli", "mcp", "--store", str(store)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, **ENV},
            timeout=60,
        )
    assert refused.returncode == 2 and refused.stdout == ""
    assert f"StoreLocked: store {store} is open for writing by pid {os.getpid()}" in refused.stderr


def test_a_lease_bound_too_small_for_the_servers_waits_is_refused_as_it_opens(
    tmp_path: Path,
) -> None:
    """Every wait the server serves takes a lease ``retinue-mcp:`` + uuid, bounded as a dedup
    key: with a smaller ``dedup_key_max_length`` each would fail with DedupKeyTooLong, so the
    open says it once, and leaves the store to the next opener."""
    from retinue import ConfigurationError, Limits
    from retinue.mcp.opening import LEASE_LENGTH
    from retinue.mcp.serve import _opener

    store = tmp_path / "s"
    with pytest.raises(ConfigurationError, match=f"at least {LEASE_LENGTH}"):
        _opener(store, None, Limits(dedup_key_max_length=LEASE_LENGTH - 1))()
    with _opener(store, None, Limits(dedup_key_max_length=LEASE_LENGTH))() as rt:
        assert rt.limits.dedup_key_max_length == LEASE_LENGTH
