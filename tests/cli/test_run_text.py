"""What `retinue run` prints of a model's odd text and of failures, as a user runs it.

Half an emoji in a tool's name and a call's id (a real litellm call against the local OpenAI
stub), the approval prompt on a terminal with the live table, a failure longer than a line.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cliutil import command, env, retinue_cli
from support import reader_team

from cli.test_approvals import _read_until
from retinue.testing import OpenAIStub, StubReply

HALF = "\ud83d"
ESCAPED = "\\ud83d"


@pytest.fixture
def stub() -> Any:
    with OpenAIStub() as server:
        yield server


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_run_json_survives_a_tool_name_and_call_id_with_a_lone_surrogate(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    """It died with an internal error (exit 1, no run_finished, every agent interrupted):
    the ToolCallStarted event carried the raw name."""
    function = {"name": "look" + HALF, "arguments": "{}"}
    call: dict[str, Any] = {"id": "call_" + HALF, "type": "function", "function": function}
    replies: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "assistant", "content": "all done"},
    ]
    stub.handler = lambda r: StubReply(message=replies[min(r.number, 2) - 1])
    team = tmp_path / "team.toml"
    team.write_text(
        f'name = "leaf"\n[defaults]\nmodel = "openai/stub-model"\napi_base = "{stub.url}"\n'
        "retries = 0\n[agents.leaf]\n"
    )
    done = retinue_cli(
        "run", team, "look around", "--store", tmp_path / "s", "--json", OPENAI_API_KEY="x"
    )
    assert done.returncode == 0, done.stderr
    seen = events(done.stdout)
    started = [e for e in seen if e["event"] == "tool_call_started"]
    assert [(e["tool"], e["call_id"]) for e in started] == [("look" + ESCAPED, "call_" + ESCAPED)]
    final = seen[-1]
    assert (final["event"], final["exit_code"], final["states"]) == (
        "run_finished",
        0,
        {"completed": 1},
    )
    assert final["roots"][0]["output"] == "all done"


def test_the_approval_prompt_reads_whole_beside_the_live_table(tmp_path: Path) -> None:
    """On a terminal with the live table, the prompt read ``approve? es / o:``: rich took
    ``[y]`` and ``[n]`` for markup."""
    master, slave = pty.openpty()
    run = subprocess.Popen(
        command("run", reader_team(tmp_path), "read the notes", "--store", tmp_path / "s"),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env(TERM="xterm-256color", COLUMNS="120", LINES="40"),
        close_fds=True,
    )
    os.close(slave)
    try:
        seen = _read_until(master, b"approve? [y]es / [n]o: ")
        assert b"approval needed: read_file by /root/reader" in seen
        os.write(master, b"y\n")
        _read_until(master, b"store: ")
        assert run.wait(timeout=60) == 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        os.close(master)


RUNNERS = """
def boom(turn):
    raise RuntimeError("a long reason: " + "word " * 200 + "and the end of it")
"""


def test_a_failure_is_printed_whole(tmp_path: Path) -> None:
    """`retinue run` cut each failure at 300 characters (``--json`` had it whole)."""
    (tmp_path / "runners.py").write_text(RUNNERS)
    team = tmp_path / "team.toml"
    team.write_text('name = "boom"\n[agents.boom]\nrunner = "runners.py:boom"\n')
    done = retinue_cli("run", team, "go", "--store", tmp_path / "s")
    assert done.returncode == 1, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("failed: ")]
    assert line.startswith("failed: /root/boom g1: RuntimeError: a long reason: word word")
    assert line.endswith("word and the end of it")
    assert line.count("word") == 200
