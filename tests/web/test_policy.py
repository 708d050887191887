"""The web view's server policy on a real uvicorn: every loopback alias, a wildcard bind, tokens.

Servers bind loopback aliases or the wildcard ``0.0.0.0``; every connection goes to a
loopback address.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from retinue import InvalidArgument, Profile, Runtime
from retinue.web import WebServer, serve
from web.conftest import ROOT

EVIL = "evil.example"


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    with Runtime.open(tmp_path / "store", profiles=[Profile("p", runner=lambda t: "ok")]) as opened:
        yield opened


def _get(web: WebServer, path: str = "api/summary", **headers: str) -> httpx.Response:
    connect = "127.0.0.1" if web.host in ("0.0.0.0", "localhost") else web.host
    shown = f"[{connect}]" if ":" in connect else connect
    return httpx.get(f"http://{shown}:{web.port}/{path}", headers=headers, timeout=10)


@pytest.mark.parametrize("bound", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_every_loopback_alias_refuses_a_foreign_host_and_origin(rt: Runtime, bound: str) -> None:
    with serve(rt, bound, 0) as web:
        shown = f"[{web.host}]" if ":" in web.host else web.host
        assert web.url == f"http://{shown}:{web.port}/"  # the address really bound
        assert _get(web).status_code == 200
        assert _get(web, host=f"localhost:{web.port}").status_code == 200
        assert _get(web, host="127.0.0.9").status_code == 200  # another loopback alias
        refused = _get(web, host=EVIL)
        assert refused.status_code == 421 and "DNS rebinding" in refused.json()["error"]
        assert _get(web, host=f"{EVIL}:{web.port}").status_code == 421
        # A page of another site that reached the server under a good Host.
        crossed = _get(web, origin=f"http://{EVIL}")
        assert crossed.status_code == 403, crossed.text
        assert _get(web, origin=f"http://localhost:{web.port}").status_code == 200


def test_a_wildcard_bind_needs_a_token_and_allowed_hosts(rt: Runtime) -> None:
    with pytest.raises(InvalidArgument, match="without a bearer token"):
        serve(rt, "0.0.0.0", 0)
    with pytest.raises(InvalidArgument, match="--allowed-host NAME"):
        serve(rt, "0.0.0.0", 0, token="s3cret-token")
    with serve(rt, "0.0.0.0", 0, token="s3cret-token", allowed_hosts=["retinue.test"]) as web:
        assert web.url == f"http://retinue.test:{web.port}/"
        auth = {"authorization": "Bearer s3cret-token"}
        assert _get(web, **auth).status_code == 200
        assert _get(web, host=f"retinue.test:{web.port}", **auth).status_code == 200
        assert _get(web, host=EVIL, **auth).status_code == 421
        assert _get(web, origin=f"http://{EVIL}", **auth).status_code == 403
        assert _get(web, authorization="bearer s3cret-token").status_code == 200  # RFC 9110
        missing = _get(web)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert _get(web, authorization="Bearer wrong").status_code == 401


def test_a_browser_gets_its_token_once_as_a_cookie(rt: Runtime) -> None:
    with serve(rt, "127.0.0.1", 0, token="s3cret-token") as web:
        assert httpx.get(web.url, timeout=10).status_code == 401
        with httpx.Client(base_url=web.url, timeout=10) as browser:
            opened = browser.get("/?token=s3cret-token&x=1", follow_redirects=False)
            assert opened.status_code == 303 and opened.headers["location"] == "/?x=1"
            cookie = opened.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
            assert "s3cret-token" not in cookie  # a session value, not the token itself
            assert browser.get("/").status_code == 200  # the cookie carries the token
            assert browser.get("/api/summary").status_code == 200
        assert httpx.get(web.url + "?token=wrong", timeout=10).status_code == 401
        forged = {f"retinue_token_{web.port}": "s3cret-token"}
        assert httpx.get(web.url, cookies=forged, timeout=10).status_code == 401
        away = httpx.get(f"{web.url}/evil.example?token=s3cret-token", timeout=10)
        assert away.headers["location"] == "/evil.example"  # never //evil.example


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("RETINUE_WEB_TOKEN", None)
    env.update(extra)
    return env


def _store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    with Runtime.open(store, profiles=[Profile("p", runner=lambda t: "ok")]) as opened:
        opened.wait(opened.spawn("p", "task", name="one").id, timeout=30)
    return store


def test_retinue_web_on_every_interface_refuses_without_a_token(tmp_path: Path) -> None:
    store = _store(tmp_path)
    refused = subprocess.run(
        [sys.executable, "-m", "retinue.cli", "web", "--store", str(store), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert refused.returncode == 2
    assert "without a bearer token: set $RETINUE_WEB_TOKEN or --token" in refused.stderr


@pytest.mark.parametrize("how", ["env", "option"])
def test_retinue_web_on_every_interface_with_a_token(tmp_path: Path, how: str) -> None:
    store = _store(tmp_path)
    command = [sys.executable, "-m", "retinue.cli", "web", "--store", str(store)]
    command += ["--host", "0.0.0.0", "--port", "0", "--allowed-host", "retinue.test"]
    env = _env(RETINUE_WEB_TOKEN="s3cret-token") if how == "env" else _env()
    if how == "option":
        command += ["--token", "s3cret-token"]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"at (http://retinue\.test:(\d+)/) \(listening on 0\.0\.0\.0:\d+", line)
        assert found, line
        port = found[2]
        url = f"http://127.0.0.1:{port}/api/children"
        auth = {"authorization": "bearer s3cret-token"}
        rows = httpx.get(url, headers=auth, timeout=10).json()["rows"]
        assert [r["path"] for r in rows] == ["/root/one"]
        assert httpx.get(url, headers={**auth, "host": EVIL}, timeout=10).status_code == 421
        assert httpx.get(url, timeout=10).status_code == 401
    finally:
        proc.terminate()
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
