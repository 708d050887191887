"""Approvals on the command line: --approve, --deny-unlisted, waiting off a terminal, asking on one.

The team is one offline-model reader (retinue/scripted lists the workspace,
then reads its files) whose ``read_file`` calls need approval. Every command
runs as a user runs it, in a subprocess; the terminal is a real pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from cliutil import command, env, finish, retinue_cli, tree_json
from support import reader_team

from retinue.cli.approve import UNLISTED


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_approve_a_tool_from_the_command_line(tmp_path: Path) -> None:
    done = retinue_cli(
        "run", reader_team(tmp_path), "read the notes", "--store", tmp_path / "s", "--json",
        "--approve", "read_file",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = events(done.stdout)
    asked = [e for e in seen if e["event"] == "approval_requested"]
    answered = [e for e in seen if e["event"] == "approval_answered"]
    assert [(e["tool"], json.loads(e["arguments"])) for e in asked] == [
        ("read_file", {"path": "notes.txt"})
    ]
    assert [(e["request_id"], e["approved"]) for e in answered] == [(asked[0]["request_id"], True)]
    assert seen[-1]["states"] == {"completed": 1}
    assert "ship on Tuesday" in seen[-1]["roots"][0]["output"]


def test_deny_unlisted_denies_the_other_tools(tmp_path: Path) -> None:
    done = retinue_cli(
        "run", reader_team(tmp_path), "read the notes", "--store", tmp_path / "s", "--json",
        "--deny-unlisted",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = events(done.stdout)
    (answered,) = [e for e in seen if e["event"] == "approval_answered"]
    assert (answered["approved"], answered["reason"]) == (False, UNLISTED)
    assert "ship on Tuesday" not in seen[-1]["roots"][0]["output"]


def test_off_a_terminal_a_request_waits_is_listed_and_survives_ctrl_c(tmp_path: Path) -> None:
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
        listed = _wait_for_request(store, run)
        assert listed["tool"] == "read_file" and listed["path"] == "/root/reader"
        plain = retinue_cli("approvals", "--store", store)
        assert plain.returncode == 0, plain.stderr
        assert "1 pending approval" in plain.stdout and listed["id"] in plain.stdout
        run.send_signal(signal.SIGINT)
        out, err = finish(run)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 130, err
    assert [e["event"] for e in events(out)].count("approval_requested") == 1
    (agent,) = tree_json(store)
    assert agent["state"] == "awaiting_approval", "Ctrl-C keeps the park"
    resumed = retinue_cli("resume", "--store", store, "--json", "--approve", "read_file")
    assert resumed.returncode == 0, resumed.stderr
    final = events(resumed.stdout)[-1]
    assert final["states"] == {"completed": 1}
    assert "ship on Tuesday" in final["roots"][0]["output"]
    assert retinue_cli("approvals", "--store", store).stdout.endswith("no approval is pending\n")


def _wait_for_request(store: Path, run: subprocess.Popen[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert run.poll() is None, run.communicate()
        if (store / "data.mdb").exists():
            listed = retinue_cli("approvals", "--store", store, "--json")
            assert listed.returncode == 0, listed.stderr
            if listed.stdout.strip():
                found: dict[str, Any] = json.loads(listed.stdout.splitlines()[0])
                return found
        time.sleep(0.2)
    raise AssertionError("no approval request appeared")


def test_on_a_terminal_the_run_asks(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    run = subprocess.Popen(
        command("run", reader_team(tmp_path), "read the notes", "--store", tmp_path / "s"),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env(TERM="dumb"),  # plain lines, not the live table: easier to read back
        close_fds=True,
    )
    os.close(slave)
    try:
        seen = _read_until(master, b"approve? [y]es / [n]o: ")
        assert b"approval needed: read_file by /root/reader" in seen
        assert b'"path": "notes.txt"' in seen
        os.write(master, b"n\n")
        _read_until(master, b"reason for the denial: ")
        os.write(master, b"not today\n")
        rest = _read_until(master, b"store: ")
        assert run.wait(timeout=60) == 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        os.close(master)
    assert b"read_file denied: not today" in rest


def _read_until(fd: int, marker: bytes, timeout: float = 60) -> bytes:
    """Read the pseudo-terminal until ``marker`` shows (or fail with what came)."""
    got = b""
    deadline = time.monotonic() + timeout
    while marker not in got:
        left = deadline - time.monotonic()
        assert left > 0, (
            f"no {marker!r} on the terminal; it showed:\n{got.decode(errors='replace')}"
        )
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            got += chunk
    return got
