"""Fixtures of the MCP tests: real MCP servers (stdio and HTTP on 127.0.0.1), the OpenAI stub.

Every test here needs the ``mcp`` extra and skips, with the reason, without
it. Servers started here listen on 127.0.0.1 only and are stopped by the
test that started them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP tests need the mcp extra: pip install -e '.[mcp]'")

from llm.conftest import _llm_watchdog, litellm, stub  # noqa: F401

from retinue.testing import OpenAIStub, StubReply

ROOT = Path(__file__).resolve().parents[2]
TOOLKIT = Path(__file__).parent / "servers" / "toolkit.py"
NPM_DIR = Path(os.environ.get("RETINUE_MCP_NPM_DIR", ROOT / ".mcp-npm"))


def npm_bin(name: str) -> Path:
    return NPM_DIR / "node_modules" / ".bin" / name


def need_npm(name: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        shutil.which("npx") is None or not npm_bin(name).exists(),
        reason=f"needs npx and {name} installed in {NPM_DIR} (run .ci/extras-mcp.sh)",
    )


def time_server_command() -> str:
    found = shutil.which("mcp-server-time", path=str(Path(sys.executable).parent))
    return found or shutil.which("mcp-server-time") or ""


need_time_server = pytest.mark.skipif(
    not time_server_command(),
    reason="needs mcp-server-time: pip install mcp-server-time (run .ci/extras-mcp.sh)",
)


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def script(server: OpenAIStub, steps: Callable[[Any], dict[str, Any] | None]) -> None:
    """Answer each request with ``steps(request)`` (None: the scripted default)."""

    def handler(request: Any) -> StubReply | None:
        message = steps(request)
        return None if message is None else StubReply(message=message)

    server.handler = handler


def last_tool_result(request: Any) -> dict[str, Any]:
    tools = [m for m in request.messages if m.get("role") == "tool"]
    result: dict[str, Any] = json.loads(tools[-1]["content"])
    return result


def model_settings(server: OpenAIStub) -> dict[str, Any]:
    return {"api_base": server.url, "api_key": "x", "retries": 0, "request_timeout_s": 30}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}")
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listened on 127.0.0.1:{port} within {timeout} s")


@dataclass
class HttpToolkit:
    """The toolkit over streamable HTTP on 127.0.0.1, in a subprocess the test controls."""

    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(TOOLKIT), "http", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_listening(self.port, self.process)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def http_toolkit() -> Iterator[HttpToolkit]:
    server = HttpToolkit(free_port())
    server.start()
    yield server
    server.kill()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        return state != "Z"
    return True
