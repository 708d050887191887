"""Streamable HTTP on 127.0.0.1 (killed mid-call, restarted); server-filesystem."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from mcp_tests.conftest import (
    NPM_DIR,
    HttpToolkit,
    answer,
    model_settings,
    need_npm,
    script,
    tool_call,
)
from retinue import CompletionStatus, Profile, Runtime
from retinue.llm import McpServer
from retinue.testing import OpenAIStub


def tool_results(stub: OpenAIStub) -> list[dict[str, Any]]:
    """Every distinct tool result the model was shown, in the order it first saw them."""
    seen: list[str] = []
    for request in stub.requests:
        for message in request.messages:
            if message.get("role") == "tool" and message["content"] not in seen:
                seen.append(message["content"])
    return [json.loads(text) for text in seen]


def test_http_tools_listed_called_and_a_kill_mid_call_then_a_restart(
    tmp_path: Path, stub: OpenAIStub, http_toolkit: HttpToolkit
) -> None:
    killed = threading.Event()

    def kill() -> None:  # the server dies while its slow call runs
        http_toolkit.kill()
        killed.set()

    def steps(r: Any) -> dict[str, Any]:
        task = [m for m in r.messages if m.get("role") == "user"][-1]["content"]
        done = [m for m in r.messages if m.get("role") == "tool"]
        if task.endswith("echo") and not done:
            return tool_call("web__echo", {"text": "over http"})
        if task.endswith("slow") and not done:
            threading.Timer(1.0, kill).start()
            return tool_call("web__slow", {"seconds": 30})
        if (
            task.endswith("again") and len(done) < 2
        ):  # follow-up: the transcript holds the first call
            return tool_call("web__echo", {"text": "back"}, call_id="call_2")
        return answer("ok")

    script(stub, steps)
    profiles = [
        Profile("agent", model="openai/stub", model_settings=model_settings(stub), tools=["web.*"])
    ]
    servers = {"web": McpServer.http(http_toolkit.url, tool_timeout_s=60)}
    with Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers) as rt:
        rt.wait(rt.spawn("agent", "echo").id, timeout=60)
        assert "web__slow" in stub.requests[0].tool_names
        slow = rt.spawn("agent", "slow")
        rt.wait(slow.id, timeout=60)
        assert killed.is_set()
        http_toolkit.start()  # the same port again
        rt.follow_up(slow.id, "again")
        rt.wait(slow.id, timeout=60)
    echo, broken, again = tool_results(stub)
    assert echo == {"result": "over http"}
    assert "MCP server 'web' went away during the call to slow" in broken["error"]
    assert again == {"result": "back"}


@need_npm("mcp-server-filesystem")
def test_filesystem_server_lists_and_reads_and_refuses_outside_its_root(
    tmp_path: Path, stub: OpenAIStub
) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("the answer is 42\n")
    (tmp_path / "secret.txt").write_text("top secret\n")
    script(
        stub,
        lambda r: (
            [
                tool_call("fs__list_directory", {"path": str(workspace)}),
                tool_call("fs__read_text_file", {"path": str(workspace / "notes.txt")}),
                tool_call("fs__read_text_file", {"path": str(tmp_path / "secret.txt")}),
            ][r.number - 1]
            if r.number <= 3
            else answer("read")
        ),
    )
    server = McpServer.stdio(
        "npx", ["--no-install", "--prefix", str(NPM_DIR), "mcp-server-filesystem", "."]
    )  # its root "." is its folder: the workspace
    profiles = [
        Profile(
            "reader",
            model="openai/stub",
            model_settings=model_settings(stub),
            tools=["fs.list_directory", "fs.read_text_file"],
        )
    ]
    with Runtime.open(
        tmp_path / "s", profiles=profiles, workspace=workspace, mcp_servers={"fs": server}
    ) as rt:
        done = rt.wait(rt.spawn("reader", "read the notes").id, timeout=120)
    assert done.status is CompletionStatus.COMPLETED, done.error
    offered = [n for n in stub.requests[0].tool_names if n.startswith("fs__")]
    assert offered == ["fs__read_text_file", "fs__list_directory"] or set(offered) == {
        "fs__read_text_file",
        "fs__list_directory",
    }
    listing, notes, outside = tool_results(stub)
    assert "[FILE] notes.txt" in json.dumps(listing)
    assert "the answer is 42" in json.dumps(notes)
    assert "top secret" not in json.dumps(outside)
    assert (
        outside["error"].startswith("fs.read_text_file: ") and "Access denied" in outside["error"]
    )
