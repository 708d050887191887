"""What an operator looks for first: the whole tree, failed and waiting agents, a dead writer,
trace ids; and the command line that turns actions on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient
from support import wait_until

from retinue import AgentState, ArgumentTypeError, InvalidArgument, Profile, Runtime
from retinue.persistence.lock import LOCK_FILE
from retinue.testing import Gate, echo
from retinue.web import LiveTree, WebOptions, create_app
from retinue.web.liveness import WriterStatus, writer_status
from retinue.web.snapshot import build
from retinue.web.tokens import TOKEN_HEADER
from retinue.web.traces import check_trace_url, trace_id_of, trace_link
from web.conftest import ROOT, Writer
from web.test_live import _info

FAST = WebOptions(min_interval_s=0.02, max_interval_s=0.5, heartbeat_s=0.5)
CLIUTIL = ROOT / "tests" / "cliutil"


@pytest.fixture
def view(tmp_path: Path, gate: Gate) -> Iterator[tuple[TestClient, Runtime]]:
    """A tree of five under /root/ops (a failed leaf among them) beside /root/solo, served
    with ``expand_rows=6``."""

    def fail(turn: Any) -> str:
        raise ValueError("broken on purpose")

    rt = Runtime.open(
        tmp_path / "store",
        profiles=[
            Profile("lead", subagents=["mid"], runner=gate),
            Profile("mid", subagents=["leaf", "bad"], runner=gate),
            Profile("leaf", runner=gate),
            Profile("bad", runner=fail),
            Profile("solo", runner=echo),
        ],
    )
    rt.spawn("lead", "lead", name="ops")
    rt.spawn("mid", "mid", name="alpha", parent="/root/ops")
    rt.spawn("mid", "mid", name="beta", parent="/root/ops")
    rt.spawn("leaf", "leaf", name="one", parent="/root/ops/alpha")
    rt.spawn("bad", "bad", name="two", parent="/root/ops/alpha")
    rt.wait(rt.spawn("solo", "solo", name="solo").id, timeout=30)
    rt.close("/root/solo")
    wait_until(lambda: rt.get("/root/ops/alpha/two").state is AgentState.FAILED)
    live = LiveTree(rt, WebOptions(min_interval_s=0.02, expand_rows=6))
    live.start()
    try:
        with TestClient(create_app(live), base_url="http://127.0.0.1") as client:
            wait_until(lambda: client.get("/api/summary").json()["agents"] == 6)
            yield client, rt
    finally:
        gate.release()
        live.stop()
        rt.shutdown()


def test_a_small_tree_comes_whole_in_tree_order(view: tuple[TestClient, Runtime]) -> None:
    client, _ = view
    tree = client.get("/api/tree").json()
    assert (tree["shown"], tree["limit"]) == (5, 6)  # the closed one is not shown
    paths = [r["path"] for r in tree["rows"]]
    assert paths == [
        "/root/ops",
        "/root/ops/alpha",
        "/root/ops/alpha/one",
        "/root/ops/alpha/two",
        "/root/ops/beta",
    ]
    every = client.get("/api/tree?closed=1").json()
    assert every["shown"] == 6 and every["rows"][-1]["path"] == "/root/solo"


def test_a_tree_past_the_bound_comes_a_page_at_a_time(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "store", profiles=[Profile("p", runner=echo)]) as rt:
        for n in range(4):
            rt.spawn("p", "t", name=f"a{n}")
        live = LiveTree(rt, WebOptions(min_interval_s=0.02, expand_rows=3))
        live.start()
        try:
            with TestClient(create_app(live), base_url="http://127.0.0.1") as client:
                wait_until(lambda: client.get("/api/summary").json()["agents"] == 4)
                tree = client.get("/api/tree").json()
                assert tree == {**tree, "rows": None, "shown": 4, "limit": 3}
                assert client.get("/api/summary").json()["expand_rows"] == 3
        finally:
            live.stop()


def test_failed_and_waiting_agents_mark_every_parent_above(
    view: tuple[TestClient, Runtime],
) -> None:
    client, _ = view
    rows = {r["path"]: r for r in client.get("/api/tree").json()["rows"]}
    marks = {path: (r["failed_below"], r["waiting_below"]) for path, r in rows.items()}
    assert marks == {
        "/root/ops": (1, 0),
        "/root/ops/alpha": (1, 0),
        "/root/ops/alpha/one": (0, 0),
        "/root/ops/alpha/two": (0, 0),
        "/root/ops/beta": (0, 0),
    }
    # Waiting agents (awaiting approval) are counted apart, at every level.
    agents = [
        _info("a", "/root/a", 1.0, "running"),
        _info("b", "/root/a/b", 2.0, "running"),
        _info("c", "/root/a/b/c", 3.0, "awaiting_approval"),
        _info("d", "/root/a/b/d", 4.0, "failed"),
        _info("e", "/root/a/e", 5.0, "awaiting_approval"),
    ]
    snap = build(agents, 1, 0.0, {})
    below = {i: (r["failed_below"], r["waiting_below"]) for i, r in snap.rows.items()}
    assert below == {"a": (1, 2), "b": (1, 1), "c": (0, 0), "d": (0, 0), "e": (0, 0)}
    # A change deep down changes the rows above it (so the page gets them).
    later = build(
        [*agents[:3], _info("d", "/root/a/b/d", 4.0, "completed"), agents[4]], 2, 0.0, {}, snap
    )
    assert later.rows["a"] is not snap.rows["a"] and later.rows["a"]["failed_below"] == 0
    assert later.rows["e"] is snap.rows["e"]


def test_search_by_path_or_profile_and_filter_by_state(view: tuple[TestClient, Runtime]) -> None:
    client, _ = view

    def found(query: str) -> list[str]:
        answer = client.get("/api/search?" + query)
        assert answer.status_code == 200, answer.text
        return [r["path"] for r in answer.json()["rows"]]

    assert found("state=failed") == ["/root/ops/alpha/two"]
    assert found("state=running") == [
        "/root/ops",
        "/root/ops/alpha",
        "/root/ops/alpha/one",
        "/root/ops/beta",
    ]
    assert found("q=MID") == ["/root/ops/alpha", "/root/ops/beta"]  # the profile
    assert found("q=alpha&state=running") == ["/root/ops/alpha", "/root/ops/alpha/one"]
    assert found("q=solo") == ["/root/solo"]
    assert found("state=interrupted") == []
    for query, text in (("state=sleepy", "state must be one of"), ("", "q or state is required")):
        answer = client.get("/api/search?" + query)
        assert answer.status_code == 400 and text in answer.json()["error"]
    summary = client.get("/api/summary").json()
    assert summary["states"] == {"running": 4, "failed": 1, "closed": 1}
    assert summary["writer"] == "in-process"


def test_writer_status_reads_the_lock_file(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    assert writer_status(folder) == WriterStatus(False, None)  # no lock file
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    (folder / LOCK_FILE).write_text(dead.stdout.strip())  # a writer killed before it closed
    status = writer_status(folder)
    assert not status.alive and status.pid == int(dead.stdout)
    assert "exited without closing it" in status.describe()
    with Runtime.open(tmp_path / "live", profiles=[Profile("p", runner=echo)]):
        live = writer_status(tmp_path / "live")
        assert live.alive and live.pid == os.getpid()
    closed = writer_status(tmp_path / "live")  # a clean close empties the lock file
    assert not closed.alive and closed.pid is None
    assert closed.describe() == "no process writes this store (its writer closed it)"


def test_a_dead_writer_shows_and_its_running_agents_stay_as_they_were(writer: Writer) -> None:
    rt = Runtime.open(writer.store, readonly=True)
    live = LiveTree(rt, FAST)
    live.start()
    try:
        with TestClient(create_app(live), base_url="http://127.0.0.1") as client:

            def summary() -> dict[str, Any]:
                answer: dict[str, Any] = client.get("/api/summary").json()
                return answer

            # The writer imports litellm before its lead's first model call: seconds, more
            # on a loaded machine.
            wait_until(
                lambda: summary()["states"].get("running") == 2,
                timeout=120,
                what="the lead and its worker running",
            )
            alive = summary()
            assert (alive["writer"], alive["writer_pid"]) == ("live", writer.proc.pid)
            writer.kill()
            dead = wait_until(
                lambda: (s := summary())["writer"] == "stopped" and s,
                timeout=30,
                what="the view to see the writer gone",
            )
            assert dead["writer_pid"] == writer.proc.pid
            assert "exited without closing it" in dead["writer_text"]
            assert dead["stopped_at"] is not None and dead["stopped_at"] <= time.time()
            assert dead["states"]["running"] == 2  # as the store keeps them
    finally:
        live.stop()
        rt.shutdown()


def test_trace_urls_are_checked() -> None:
    good = "http://127.0.0.1:16686/trace/{trace_id}"
    assert check_trace_url(f"  {good} ") == good and check_trace_url(None) is None
    for bad, text in (
        ("http://127.0.0.1:16686/trace/", "no {trace_id}"),
        ("javascript:alert(1)//{trace_id}", "http(s) address"),
        ("ftp://host/{trace_id}", "http(s) address"),
        ("http://host/{trace_id}/{span_id}", "the only placeholder"),
        ("http://host/a b/{trace_id}", "space"),
        ("http://host:99999/{trace_id}", "not an address"),
    ):
        with pytest.raises(InvalidArgument, match=re.escape(text)):
            check_trace_url(bad)
    with pytest.raises(ArgumentTypeError):
        check_trace_url(7)
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert trace_id_of(trace) == "0af7651916cd43dd8448eb211c80319c"
    assert trace_id_of("00-" + "0" * 32 + "-b7ad6b7169203331-01") is None
    assert trace_id_of("garbage") is None and trace_id_of(None) is None
    assert trace_link(good, "abc") == "http://127.0.0.1:16686/trace/abc"
    assert trace_link(None, "abc") is None and trace_link(good, None) is None


def test_an_agents_detail_shows_its_trace_id_linked(tmp_path: Path) -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="needs the OpenTelemetry SDK")
    provider = sdk.TracerProvider()
    template = "http://127.0.0.1:16686/trace/{trace_id}"
    with Runtime.open(
        tmp_path / "store", profiles=[Profile("p", runner=echo)], tracer_provider=provider
    ) as rt:
        agent = rt.spawn("p", "t", name="traced")
        rt.wait(agent.id, timeout=30)
        trace = rt.inspect(agent.id).trace
        assert trace is not None
        trace_id = trace.split("-")[1]
        live = LiveTree(rt, FAST)
        live.start()
        try:
            app = create_app(live, trace_url=template)
            with TestClient(app, base_url="http://127.0.0.1") as client:
                detail = client.get(f"/api/agent?id={agent.id}").json()
                assert detail["trace_id"] == trace_id
                assert detail["trace_url"] == f"http://127.0.0.1:16686/trace/{trace_id}"
            with TestClient(create_app(live), base_url="http://127.0.0.1") as client:
                detail = client.get(f"/api/agent?id={agent.id}").json()
                assert (detail["trace_id"], detail["trace_url"]) == (trace_id, None)
        finally:
            live.stop()
    provider.shutdown()
    with pytest.raises(InvalidArgument, match="trace URL"):
        create_app(live, trace_url="http://host/")


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(CLIUTIL), env.get("PYTHONPATH", "")])
    return env


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retinue.cli", *args],
        capture_output=True,
        text=True,
        env=_env(**env),
        timeout=120,
        check=False,
    )


def test_the_view_options_are_checked_before_anything_starts(tmp_path: Path) -> None:
    team = str(CLIUTIL / "team.toml")
    store = str(tmp_path / "store")
    bad_url = _cli(
        "run", team, "task", "--store", store, "--web", "--trace-url", "ftp://x/{trace_id}"
    )
    assert bad_url.returncode == 2 and "--trace-url" in bad_url.stderr
    no_web = _cli("run", team, "task", "--store", store, "--actions")
    assert no_web.returncode == 2 and "add --web" in no_web.stderr
    assert not Path(store).exists()
    Path(store).mkdir()
    web = _cli("web", "--store", store, "--trace-url", "http://host/")
    assert web.returncode == 2 and "{trace_id}" in web.stderr


def test_retinue_run_web_actions_act_on_the_run_in_process(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "retinue.cli",
            "run",
            str(CLIUTIL / "team.toml"),
            "review it",
            "--store",
            str(tmp_path / "store"),
            "--web",
            "127.0.0.1:0",
            "--actions",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(CLI_TEST_DELAY="120"),
    )
    try:
        assert proc.stderr is not None
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if found := re.search(r"live view at (http://127\.0\.0\.1:\d+/); actions on", line):
                url = found.group(1)
            assert line or proc.poll() is None, "the run ended before its view started"
        assert url is not None
        wait_until(
            lambda: httpx.get(url + "api/summary", timeout=10).json()["states"].get("running") == 6,
            timeout=60,
        )
        token = re.search(r'token" content="([^"]+)"', httpx.get(url, timeout=10).text)
        assert token is not None
        answer = httpx.post(
            url + "api/actions/interrupt_tree",
            json={"agent": "/root/review"},
            headers={TOKEN_HEADER: token.group(1), "origin": url.rstrip("/")},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["done"] == "interrupted the tree: 6 live agents, 6 now interrupted"
        out, err = proc.communicate(timeout=120)  # the run ends with its tree
        final = json.loads(out.strip().splitlines()[-1])
        assert final["event"] == "run_finished" and final["states"] == {"interrupted": 6}, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_fork_shows_its_origin_in_the_tree_and_the_detail(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "store", profiles=[Profile("p", runner=echo)]) as rt:
        rt.wait(rt.spawn("p", "t", name="a").id)
        fork = rt.fork("/root/a")
        live = LiveTree(rt, WebOptions(min_interval_s=0.02))
        live.start()
        try:
            with TestClient(create_app(live), base_url="http://127.0.0.1") as client:
                wait_until(lambda: client.get("/api/summary").json()["agents"] == 2)
                rows = {r["path"]: r for r in client.get("/api/tree").json()["rows"]}
                assert rows["/root/a"]["forked_from"] is None
                origin = {"path": "/root/a", "generation": 1}
                assert rows["/root/a_fork1"]["forked_from"] == origin
                detail = client.get(f"/api/agent?id={fork.path}").json()
                assert detail["forked_from"] == origin
        finally:
            live.stop()
