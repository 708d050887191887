"""The real server: uvicorn on 127.0.0.1, a live stream, stopping, bad addresses, the CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import wait_until

from retinue import ArgumentTypeError, InvalidArgument, Profile, Runtime
from retinue.testing import Gate
from retinue.web import WebOptions, parse_address, serve
from web.conftest import ROOT

CLIUTIL = ROOT / "tests" / "cliutil"


def _events(response: httpx.Response) -> Any:
    """Yield (event, data) pairs from a live server-sent event stream."""
    kind = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: ") and kind is not None:
            yield kind, json.loads(line[6:])
            kind = None


def test_uvicorn_serves_a_live_stream_on_loopback(tmp_path: Path, gate: Gate) -> None:
    profiles = [Profile("worker", runner=gate)]
    with Runtime.open(tmp_path / "store", profiles=profiles) as rt:
        web = serve(rt, port=0, options=WebOptions(min_interval_s=0.02, heartbeat_s=0.5))
        try:
            assert web.host == "127.0.0.1" and web.url == f"http://127.0.0.1:{web.port}/"
            assert httpx.get(web.url, timeout=10).status_code == 200
            with httpx.stream("GET", web.url + "api/events", timeout=10) as response:
                stream = _events(response)
                kind, hello = next(stream)
                assert kind == "hello"
                # Nagle is off on the server's side of every connection: without it each
                # response waited ~40 ms for the client's delayed ACK (headers and body
                # are written apart).
                connections = list(web._server.server_state.connections)
                assert connections
                for connection in connections:
                    sock = connection.transport.get_extra_info("socket")
                    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
                info = rt.spawn("worker", "check", name="check")
                seen: dict[str, str] = {}
                for kind, data in stream:
                    if kind == "update":
                        seen.update({r["path"]: r["state"] for r in data["rows"]})
                    if seen.get("/root/check") == "running":
                        break
                gate.release()
                for kind, data in stream:
                    if kind == "update":
                        seen.update({r["path"]: r["state"] for r in data["rows"]})
                    if seen.get("/root/check") == "completed":
                        break
                assert data["version"] > hello["version"]
            assert rt.get(info.id).state == "completed"
        finally:
            web.stop()
        web.stop()  # idempotent
        with pytest.raises(httpx.ConnectError):
            httpx.get(web.url, timeout=2)


def test_bad_addresses_are_refused_with_a_reason(tmp_path: Path) -> None:
    assert parse_address("127.0.0.1:9000") == ("127.0.0.1", 9000)
    assert parse_address(":9000") == ("127.0.0.1", 9000)
    assert parse_address("9000") == ("127.0.0.1", 9000)
    assert parse_address("localhost") == ("localhost", 8321)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    with pytest.raises(InvalidArgument, match="the port must be a number"):
        parse_address("127.0.0.1:http")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        with Runtime.open(tmp_path / "store", profiles=[Profile("p", runner=lambda t: "")]) as rt:
            with pytest.raises(
                InvalidArgument, match=r"cannot listen on 127\.0\.0\.1:.*another --port"
            ):
                serve(rt, port=busy.getsockname()[1])
            with pytest.raises(InvalidArgument, match="between 0 and 65535"):
                serve(rt, port=70000)
            with pytest.raises(ArgumentTypeError):
                serve(rt, port="80")  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument, match="host is blank"):
                serve(rt, host=" ")
    finally:
        busy.close()


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(CLIUTIL), env.get("PYTHONPATH", "")])
    return env


def _url(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if found := re.search(r"(http://127\.0\.0\.1:\d+/)", line):
            return found.group(1)
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no URL printed; exit {proc.poll()}")


def test_retinue_run_web_serves_the_run_it_draws(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "retinue.cli",
            "run",
            str(CLIUTIL / "team.toml"),
            "review it",
            "--store",
            str(store),
            "--web",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(CLI_TEST_DELAY="3"),
    )
    try:
        url = _url(proc)

        def paths() -> set[str]:
            top = httpx.get(url + "api/children", timeout=10).json()["rows"]
            found = {r["path"] for r in top}
            for row in top:
                kids = httpx.get(url + f"api/children?parent={row['id']}", timeout=10).json()
                found |= {r["path"] for r in kids["rows"]}
            return found

        wanted = {"/root/review", "/root/review/security", "/root/review/style"}
        wait_until(lambda: wanted <= paths(), what="the run's agents in its live view")
        summary = httpx.get(url + "api/summary", timeout=10).json()
        assert summary["readonly"] is False and summary["events"] is True
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        with pytest.raises(httpx.ConnectError):  # the view ends with the run
            httpx.get(url, timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_retinue_web_serves_a_store_until_interrupted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Runtime.open(store, profiles=[Profile("p", runner=lambda t: "ok")]) as rt:
        rt.wait(rt.spawn("p", "task", name="one").id, timeout=30)
    proc = subprocess.Popen(
        [sys.executable, "-m", "retinue.cli", "web", "--store", str(store), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        url = _url(proc)
        rows = httpx.get(url + "api/children", timeout=10).json()["rows"]
        assert [(r["path"], r["state"]) for r in rows] == [("/root/one", "completed")]
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    missing = subprocess.run(
        [sys.executable, "-m", "retinue.cli", "web", "--store", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert missing.returncode == 2 and "no retinue store at" in missing.stderr
