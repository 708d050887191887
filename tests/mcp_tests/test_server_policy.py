"""``retinue mcp --http``'s server policy: every loopback alias, a wildcard bind, the bearer token.

Servers bind loopback aliases or the wildcard ``0.0.0.0``; every connection goes to a
loopback address.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from mcp_tests.test_retinue_server import ENV, ROOT, call, http_client, patient_team

EVIL = "evil.example"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "policy-test", "version": "1"},
    },
}


@contextlib.contextmanager
def mcp_http(
    tmp_path: Path, address: str, *options: str, token: str | None = None
) -> Iterator[tuple[str, str]]:
    """``retinue mcp --http ADDRESS``; yield the URL it prints and a loopback URL to reach it."""
    env = {**os.environ, **ENV}
    env.pop("RETINUE_MCP_TOKEN", None)
    if token is not None:
        env["RETINUE_MCP_TOKEN"] = token
    command = [sys.executable, "-m", "retinue.cli", "mcp", "--store", str(tmp_path / "s")]
    command += ["--team", str(patient_team(tmp_path)), "--http", address, *options]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=env
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline().decode()
        found = re.search(r"serving (http://(\[[^\]]+\]|[^:/]+):(\d+)/mcp)", line)
        assert found, line
        host = found[2].strip("[]")
        connect = "127.0.0.1" if host in ("0.0.0.0", "localhost", "mcp.test") else host
        shown = f"[{connect}]" if ":" in connect else connect
        yield found[1], f"http://{shown}:{found[3]}/mcp"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stderr is not None:
            process.stderr.close()


def initialize(url: str, **headers: str) -> httpx.Response:
    """One raw MCP initialize request, as a browser's page or a client would send it."""
    sent = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        **headers,
    }
    return httpx.post(url, content=json.dumps(INITIALIZE), headers=sent, timeout=30)


@pytest.mark.parametrize("address", ["[::1]:0", "127.0.0.2:0", "127.0.0.1:0", "localhost:0"])
def test_every_loopback_alias_refuses_a_foreign_host_and_origin(
    tmp_path: Path, address: str
) -> None:
    with mcp_http(tmp_path, address) as (printed, url):
        bound = address.rpartition(":")[0].strip("[]")
        expected = "127.0.0.1" if bound == "localhost" else bound
        assert printed.startswith(f"http://{'[::1]' if expected == '::1' else expected}:")
        assert initialize(url).status_code == 200
        assert initialize(url, host="127.0.0.9").status_code == 200  # another loopback alias
        refused = initialize(url, host=EVIL)
        assert refused.status_code == 421, refused.text
        assert "DNS rebinding" in refused.json()["error"]
        crossed = initialize(url, origin=f"http://{EVIL}")
        assert crossed.status_code == 403, crossed.text
        assert initialize(url, origin="http://localhost:6274").status_code == 200  # Inspector


def test_the_bearer_scheme_is_case_insensitive(tmp_path: Path) -> None:
    with mcp_http(tmp_path, "[::1]:0", token="s3cret-token") as (_printed, url):
        assert initialize(url).status_code == 401
        assert initialize(url, authorization="Bearer wrong").status_code == 401
        assert initialize(url, authorization="bearer s3cret-token").status_code == 200
        assert initialize(url, authorization="BEARER s3cret-token").status_code == 200

        async def session() -> None:
            async with http_client(url, {"Authorization": "bearer s3cret-token"}) as client:
                error, tree = await call(client, "tree")
                assert not error and tree == {"agents": [], "count": 0}

        anyio.run(session)


def test_a_wildcard_bind_needs_a_token_and_allowed_hosts(tmp_path: Path) -> None:
    def refused(*options: str, token: str | None = None) -> str:
        env = {**os.environ, **ENV}
        env.pop("RETINUE_MCP_TOKEN", None)
        if token is not None:
            env["RETINUE_MCP_TOKEN"] = token
        done = subprocess.run(
            [sys.executable, "-m", "retinue.cli", "mcp", "--store", str(tmp_path / "s"), *options],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        return done.stderr

    assert "without a bearer token" in refused("--http", "0.0.0.0:0", "--host", "0.0.0.0")
    assert "--allowed-host NAME" in refused("--http", "0", "--host", "0.0.0.0", token="t0ken")
    options = ("--host", "0.0.0.0", "--allowed-host", "mcp.test")
    with mcp_http(tmp_path, "0", *options, token="s3cret-token") as (printed, url):
        assert re.fullmatch(r"http://mcp\.test:\d+/mcp", printed), printed
        auth = {"authorization": "Bearer s3cret-token"}
        assert initialize(url, **auth).status_code == 200
        assert initialize(url, host="mcp.test", **auth).status_code == 200
        assert initialize(url, host=EVIL, **auth).status_code == 421
        assert initialize(url, origin=f"http://{EVIL}", **auth).status_code == 403
        assert initialize(url).status_code == 401


def test_the_token_option_without_the_environment(tmp_path: Path) -> None:
    with mcp_http(tmp_path, "127.0.0.1:0", "--token", "0ption-token") as (_printed, url):
        assert initialize(url).status_code == 401
        assert initialize(url, authorization="Bearer 0ption-token").status_code == 200
