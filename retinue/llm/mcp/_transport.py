"""The stdio transport of retinue's MCP sessions: a server process in its own process group.

Unlike the SDK's ``stdio_client`` it passes exactly the environment it is
given, keeps the server's stderr in a bounded in-memory log, bounds one
message line (a server that sends a longer one is killed, and that is the
reason it is reported with), reports the process's exit as it happens, and at close kills
the whole process group (the server and whatever it started) after a short
grace period. Needs the ``mcp`` extra (imported by the session module only).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.shared.message import SessionMessage

from retinue.protocol.text import truncate_utf8

__all__ = ["MAX_LINE_BYTES", "BoundedLog", "kill_group", "stdio_transport"]

MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest message line a stdio server may send by default (``McpServer.max_line_bytes``);
a longer one ends the session."""
CLOSE_GRACE_S = 1.0
"""How long a closing server may take to exit after its stdin closes, before SIGKILL."""
_REAP_S = 2.0
_POLL_S = 0.01


class BoundedLog:
    """The last ``capacity`` bytes a server wrote to stderr (older bytes are counted, not kept)."""

    def __init__(self, name: str, capacity: int) -> None:
        """Keep at most ``capacity`` bytes; lines also go to ``retinue.mcp.<name>`` (DEBUG)."""
        self.capacity = capacity
        self.dropped = 0
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._log = logging.getLogger(f"retinue.mcp.{name}")

    def write(self, data: bytes) -> None:
        """Append ``data``, dropping the oldest bytes past the capacity."""
        if self._log.isEnabledFor(logging.DEBUG):
            self._log.debug("%s", data.decode("utf-8", "replace").rstrip())
        self._chunks.append(data)
        self._size += len(data)
        while self._size > self.capacity and self._chunks:
            excess = self._size - self.capacity
            head = self._chunks[0]
            if len(head) <= excess:
                self._chunks.popleft()
                self._size -= len(head)
                self.dropped += len(head)
            else:
                self._chunks[0] = head[excess:]
                self._size -= excess
                self.dropped += excess

    def text(self) -> str:
        """Everything kept, decoded (a marker first when older bytes were dropped)."""
        body = b"".join(self._chunks).decode("utf-8", "replace")
        return f"…[{self.dropped} earlier bytes dropped]\n{body}" if self.dropped else body

    def tail(self, limit: int = 600) -> str:
        """The last ``limit`` bytes or so, on one line, for an error message ('' if none)."""
        raw = b"".join(self._chunks)[-limit:].decode("utf-8", "replace")
        line = " | ".join(part.strip() for part in raw.splitlines() if part.strip())
        return truncate_utf8(line, limit)[0]


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


def kill_group(pid: int) -> None:
    """SIGKILL process group ``pid`` (a server started in its own session); gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _exited(process: anyio.abc.Process, timeout: float) -> bool:
    """Whether the process exits within ``timeout`` s (polled: its pipes may stay open)."""
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(_POLL_S)
    return process.returncode is not None


@contextlib.asynccontextmanager
async def stdio_transport(
    command: str,
    args: tuple[str, ...],
    *,
    env: Mapping[str, str],
    cwd: Path | None,
    log: BoundedLog,
    on_exit: Callable[[str], None],
    on_start: Callable[[int], None] = lambda pid: None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> AsyncIterator[tuple[Any, Any]]:
    """Run ``command`` in a new process group; yield the SDK's (read, write) message streams.

    ``on_start(pid)`` is called once it runs; ``on_exit(reason)`` once its
    stdout ends (the process exited, or broke the protocol with a line over
    ``max_line_bytes``: then it is killed, and that is the reason). Leaving
    the context closes its stdin, waits up to :data:`CLOSE_GRACE_S` and kills
    the process group.

    Raises:
        OSError: the command cannot be started (not found, not executable).
    """
    process = await anyio.open_process(
        [command, *args],
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    on_start(process.pid)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async with anyio.create_task_group() as group:
        group.start_soon(_read_stdout, process, read_writer, on_exit, max_line_bytes)
        group.start_soon(_read_stderr, process, log)
        group.start_soon(_write_stdin, process, write_reader)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
            group.cancel_scope.cancel()


async def _read_stdout(
    process: anyio.abc.Process,
    sink: Any,
    on_exit: Callable[[str], None],
    max_line_bytes: int = MAX_LINE_BYTES,
) -> None:
    """Send each message line of the server's stdout to ``sink``; at its end, ``on_exit(why)``.

    A line over ``max_line_bytes`` kills the process group (the protocol is
    broken) and is the reason given, not the kill's exit code. Our own close
    of the streams ends it without ``on_exit``.
    """
    assert process.stdout is not None
    buffered = BufferedByteReceiveStream(process.stdout)
    try:
        async with sink:
            while True:
                line = await buffered.receive_until(b"\n", max_line_bytes)
                if line.strip():
                    await sink.send(_parse(line))
    except anyio.DelimiterNotFound:
        kill_group(process.pid)
        on_exit(
            f"it sent a message line over {max_line_bytes} bytes, so it was killed "
            "(raise McpServer(max_line_bytes=...) if its answers are that big)"
        )
        return
    except (anyio.EndOfStream, anyio.IncompleteRead):
        pass
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        return  # our own close
    reason = "its stdout closed"
    if await _exited(process, 0.5):
        reason = f"it exited with code {process.returncode}"
    on_exit(reason)


async def _read_stderr(process: anyio.abc.Process, log: BoundedLog) -> None:
    """Keep what the server writes to stderr in ``log`` until the pipe ends."""
    assert process.stderr is not None
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, OSError):
        while True:
            log.write(await process.stderr.receive())


async def _write_stdin(process: anyio.abc.Process, source: Any) -> None:
    """Write each message from ``source`` to the server's stdin, one JSON line each."""
    assert process.stdin is not None
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        async with source:
            async for message in source:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send((text + "\n").encode())


async def _stop(process: anyio.abc.Process) -> None:
    """Close stdin, give the server a moment, then kill its whole process group."""
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    await _exited(process, CLOSE_GRACE_S)
    kill_group(process.pid)  # also what the server started, even if the server itself exited
    await _exited(process, _REAP_S)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await pipe.aclose()
    # asyncio's subprocess transport stays open (and complains when collected after its
    # loop closed) until closed; nothing public reaches it.
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()
