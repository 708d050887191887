"""The CLI's actions beside a running ``retinue run`` (a child process), and without one.

Each action is its own ``retinue`` process; beside the run it goes through the
store's control socket (the run holds the store's writer lock, so nothing else
could act on it), without a writer it opens the store itself.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cliutil import command, env, retinue_cli, tree_json
from support import reader_team

HERE = Path(__file__).parent
ACT_TEAM = HERE / "act_team.toml"


def _until(predicate: Callable[[], Any], what: str, run: subprocess.Popen[str]) -> Any:
    """Poll ``predicate`` (a hang guard of 60 s, never a timing assertion)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert run.poll() is None, run.communicate()
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"never saw {what}")


def _states(store: Path) -> dict[str, tuple[str, int]]:
    if not (store / "data.mdb").exists():
        return {}
    return {a["path"]: (a["state"], a["generation"]) for a in tree_json(store)}


def _act(*args: str | Path) -> str:
    done = retinue_cli(*args, timeout=120)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


@pytest.fixture
def act_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, Path]]:
    store, release = tmp_path / "s", tmp_path / "release"
    run = subprocess.Popen(
        command("run", ACT_TEAM, "go", "--store", store, "--name", "lead", "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env(ACT_RELEASE=str(release)),
    )
    try:
        yield run, store, release
    finally:
        release.touch()
        if run.poll() is None:
            try:
                run.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                run.kill()
                run.communicate()


def test_every_agent_action_beside_a_running_run(
    act_run: tuple[subprocess.Popen[str], Path, Path],
) -> None:
    run, store, release = act_run
    _until(
        lambda: (
            _states(store).get("/root/lead/q") == ("completed", 1)
            and _states(store).get("/root/lead/s", ("",))[0] == "running"
        ),
        "q completed and s running",
        run,
    )
    said = _act("follow-up", "/root/lead/q", "again", "--store", store)
    assert said.startswith("followed up /root/lead/q")
    _until(lambda: _states(store)["/root/lead/q"] == ("completed", 2), "q's second turn", run)

    assert _act("interrupt", "/root/lead/s", "--store", store).startswith(
        "interrupted /root/lead/s"
    )
    _until(lambda: _states(store)["/root/lead/s"][0] == "interrupted", "s interrupted", run)
    assert _act("resume", "/root/lead/s", "--store", store).startswith("resumed /root/lead/s")
    _until(lambda: _states(store)["/root/lead/s"] == ("running", 2), "s running again", run)
    assert _act("close", "/root/lead/q", "--store", store).startswith("closed /root/lead/q")

    release.touch()
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    final = json.loads(out.splitlines()[-1])
    assert final["roots"][0]["output"] == "lead done: released"
    # No writer any more: the command opens the store itself.
    closed = _act("close", "/root/lead", "--tree", "--store", store)
    assert closed.splitlines()[-1].startswith("closed /root/lead ")
    assert _states(store) == {}


def test_interrupt_a_tree_beside_a_running_run(
    act_run: tuple[subprocess.Popen[str], Path, Path],
) -> None:
    run, store, _release = act_run
    _until(lambda: _states(store).get("/root/lead/s", ("",))[0] == "running", "s running", run)
    said = _act("interrupt", "/root/lead", "--tree", "--store", store)
    paths = [line.split()[1] for line in said.splitlines()]
    assert "/root/lead/s" in paths and paths[-1] == "/root/lead"  # leaves first
    run.communicate(timeout=60)
    states = _states(store)
    assert states["/root/lead"][0] == states["/root/lead/s"][0] == "interrupted"


def _request(store: Path, run: subprocess.Popen[str]) -> dict[str, Any]:
    def listed() -> dict[str, Any] | None:
        if not (store / "data.mdb").exists():
            return None
        done = retinue_cli("approvals", "--store", store, "--json")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        return json.loads(lines[0]) if lines else None

    found: dict[str, Any] = _until(listed, "an approval request", run)
    return found


@pytest.mark.parametrize("verdict", ["approve", "deny"])
def test_approve_and_deny_beside_a_running_run(tmp_path: Path, verdict: str) -> None:
    store = tmp_path / "s"
    run = subprocess.Popen(
        command("run", reader_team(tmp_path), "read the notes", "--store", store, "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env(),
    )
    try:
        request = _request(store, run)
        plain = retinue_cli("approvals", "--store", store).stdout
        assert "retinue approve ID" in plain and "retinue deny ID --reason" in plain
        if verdict == "approve":
            said = _act("approve", request["id"], "--note", "fine", "--store", store)
            assert said.startswith(f"approved {request['id']}")
        else:
            said = _act("deny", request["id"], "--reason", "not today", "--store", store)
            assert said.startswith(f"denied {request['id']}: not today")
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err
    output = json.loads(out.splitlines()[-1])["roots"][0]["output"]
    assert ("ship on Tuesday" in output) is (verdict == "approve")


def test_approve_without_a_writer_follows_the_tree(tmp_path: Path) -> None:
    store = tmp_path / "s"
    run = subprocess.Popen(
        command("run", reader_team(tmp_path), "read the notes", "--store", store, "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env(),
    )
    try:
        request = _request(store, run)
        run.kill()  # the writer is gone; the request is kept in the store
        run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    done = retinue_cli("approve", request["id"], "--store", store, "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ship on Tuesday" in json.loads(done.stdout.splitlines()[-1])["roots"][0]["output"]


def test_an_unknown_request_is_a_clear_error(tmp_path: Path) -> None:
    store = tmp_path / "s"
    _act("run", ACT_TEAM, "go", "--store", store, "--agent", "quick", "--json")
    done = retinue_cli("approve", "nope", "--store", store)
    assert done.returncode == 2 and "UnknownApproval" in done.stderr, done.stderr


def test_a_writer_without_a_control_socket_is_named(tmp_path: Path) -> None:
    from control.writer import Writer

    writer = Writer(tmp_path / "store", control=False)
    try:
        done = retinue_cli("interrupt", "/root/x", "--store", writer.store)
    finally:
        writer.stop()
    assert done.returncode == 2, done.stderr
    assert "control=False" in done.stderr and f"pid {writer.proc.pid}" in done.stderr
