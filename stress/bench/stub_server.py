"""An OpenAI chat-completions server in a child process, on asyncio: thousands of slow answers.

:class:`~retinue.testing.OpenAIStub` answers from a thread per connection in
the benchmark's own process (its GIL, its threads). This one runs in a child
process on one event loop, so it carries 10,000 concurrent requests that each
wait ``delay_s`` before answering, and none of its work is counted against the
client: ``with ChildStub(delay_s=5) as stub: ... stub.url``. It binds
127.0.0.1, speaks HTTP/1.1 with keep-alive, and answers every
``POST .../chat/completions`` with one fixed assistant message ("done") and its
usage. ``stub.stats()`` asks it how many requests it answered and the most it
held at once (a ``GET /stats``).

Run alone: ``python -m stress.bench.stub_server --delay 5`` prints the port.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["ChildStub", "raise_fd_limit"]

ROOT = Path(__file__).resolve().parents[2]


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's soft limit of open files towards ``wanted`` (up to the hard limit).

    Returns the soft limit now in force.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


class _Server:
    """The child's server: counts and answers requests."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.answered = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def _body(self, model: str, number: int) -> bytes:
        payload = {
            "id": f"chatcmpl-child-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "done"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        }
        return json.dumps(payload).encode()

    async def _request(self, reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
        """Read one request: (method, path, body).

        Raises:
            asyncio.IncompleteReadError: the client closed the connection.
        """
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        body = await reader.readexactly(length) if length else b""
        return method, path, body

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection's requests until the client closes it."""
        try:
            while True:
                try:
                    request = await self._request(reader)
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                method, path, body = request
                if method == "GET" and path.endswith("/stats"):
                    data = json.dumps(
                        {"answered": self.answered, "max_in_flight": self.max_in_flight}
                    ).encode()
                else:
                    data = await self._complete(body)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except ConnectionError:
            return
        finally:
            writer.close()

    async def _complete(self, body: bytes) -> bytes:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            model = str(json.loads(body or b"{}").get("model", "stub"))
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            self.answered += 1
            return self._body(model, self.answered)
        finally:
            self.in_flight -= 1


async def _serve(delay_s: float) -> None:
    server = _Server(delay_s)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, backlog=4096)
    port = listener.sockets[0].getsockname()[1]
    print(port, flush=True)
    async with listener:
        await listener.serve_forever()


class ChildStub:
    """The server in a child process, for as long as the ``with`` block runs."""

    def __init__(self, delay_s: float = 0.0) -> None:
        """Prepare a server whose every answer waits ``delay_s`` seconds."""
        self.delay_s = delay_s
        self._process: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """The ``api_base`` to give litellm."""
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ChildStub:
        """Start the child and wait for its port."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "stress.bench.stub_server", "--delay", str(self.delay_s)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.strip():
            self.__exit__(None, None, None)
            raise RuntimeError("the stub server did not start")
        self.port = int(line)
        return self

    def stats(self) -> dict[str, Any]:
        """Requests answered and the most held at once, as the server counts them."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=30) as reply:
            data: dict[str, Any] = json.loads(reply.read())
        return data

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the child."""
        if self._process is not None:
            self._process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(10)
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._process = None


def main() -> None:
    """``python -m stress.bench.stub_server --delay S``: serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    raise_fd_limit(65_536)
    asyncio.run(_serve(args.delay))


if __name__ == "__main__":
    main()
