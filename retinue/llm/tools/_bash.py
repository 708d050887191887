"""The ``bash`` tool: one command in the workspace folder, bounded in time and output.

``bash -c <command>`` runs in the workspace folder, in its own process group,
with a small environment (``PATH``, ``LANG``, ``TERM``, ``HOME`` set to the
workspace, ``RETINUE_IDEMPOTENCY_KEY`` the call's idempotency key, the same in
every run of one call; the host's secrets are not passed on), a timeout after which the
whole group is killed, and stdout and stderr each cut to ``max_output_bytes``
(start and end kept). The timeout covers both the output pipes and the wait
for the process, so a command that redirects its output (``cmd > log 2>&1``,
``exec >/dev/null``) is killed on time too. An interrupted turn kills the
group, and so does the end of the call: nothing the command started in the
background outlives it. It is not a
sandbox: the command can reach anything the process can.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from retinue.llm.tools._arguments import ToolError
from retinue.llm.tools._child_process import end, kill_group, spawn
from retinue.llm.tools._workspace import Workspace

__all__ = ["DEFAULT_BASH_TIMEOUT_S", "MAX_BASH_TIMEOUT_S", "BashArgs", "run_bash"]

DEFAULT_BASH_TIMEOUT_S = 60.0
"""Seconds a ``bash`` call may run when the model gives no timeout."""
MAX_BASH_TIMEOUT_S = 600.0
"""Longest timeout a model may ask ``bash`` for."""


_DRAIN_S = 2.0
"""Seconds the output pipes may take to drain once the process group is gone."""


class BashArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of bash."""

    command: Annotated[str, msgspec.Meta(min_length=1, description="A bash command line.")]
    timeout_s: (
        Annotated[
            float,
            msgspec.Meta(gt=0, le=MAX_BASH_TIMEOUT_S, description="Seconds before it is killed."),
        ]
        | None
    ) = None


class _Capture:
    """Keep the start and the end of a stream, at most ``limit`` bytes in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - (self.limit - self.limit // 2)
            if excess > 0:
                del self.tail[:excess]

    def text(self) -> tuple[str, bool]:
        """Return the kept text and whether anything was cut out of the middle."""
        cut = self.total > len(self.head) + len(self.tail)
        head = self.head.decode("utf-8", "replace")
        if not cut:
            return head + self.tail.decode("utf-8", "replace"), False
        skipped = self.total - len(self.head) - len(self.tail)
        tail = self.tail.decode("utf-8", "replace")
        return f"{head}\n…[{skipped} bytes cut]…\n{tail}", True


async def _pump(stream: asyncio.StreamReader | None, capture: _Capture) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        capture.add(chunk)


def _bash_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "TERM": "dumb",
    }
    if extra:
        env.update(extra)
    return env


async def run_bash(
    workspace: Workspace,
    args: BashArgs,
    *,
    default_timeout_s: float,
    max_output_bytes: int,
    env: Mapping[str, str] | None,
) -> dict[str, Any]:
    """Run ``args.command`` in ``workspace``; return exit code, outputs and whether it timed out.

    ``env`` adds variables to the small environment. A timeout kills the
    whole process group and is reported in the result (with ``"error"``).

    Raises:
        ToolError: bash could not be started.
        asyncio.CancelledError: the turn was cancelled (the group is killed first).
    """
    timeout = args.timeout_s if args.timeout_s is not None else default_timeout_s
    full_env = _bash_env(env)
    full_env.setdefault("HOME", str(workspace.root))
    try:
        child = await spawn(
            ["bash", "-c", args.command],
            cwd=workspace.root,
            env=full_env,
            stdin=asyncio.subprocess.DEVNULL,
        )
    except OSError as exc:
        raise ToolError(f"bash could not start: {exc}") from None
    process = child.process
    out, err = _Capture(max_output_bytes), _Capture(max_output_bytes)
    pumps = asyncio.gather(_pump(process.stdout, out), _pump(process.stderr, err))
    timed_out = False
    try:
        # The deadline covers the process itself, not only its pipes: a command
        # that redirects its output (`exec >/dev/null`) closes them at once,
        # and one that leaves a child behind keeps them open after it exits.
        try:
            await asyncio.wait_for(asyncio.shield(child.exited), timeout)
        except TimeoutError:
            timed_out = True
        # Whether it ended or timed out, nothing it started outlives the call
        # (`sleep 600 >/dev/null &`): the whole group goes, then the pipes drain.
        kill_group(process)
        with contextlib.suppress(Exception):  # a process that left the group keeps them
            await asyncio.wait_for(pumps, _DRAIN_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), _DRAIN_S)
    except asyncio.CancelledError:
        # The turn was interrupted: leave nothing running, and see the exit through
        # before the cancel goes on (a runtime shutting down closes its loop next).
        pumps.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await end(child, _DRAIN_S)
        with contextlib.suppress(asyncio.CancelledError):  # its outcome taken, never logged
            await pumps
        raise
    stdout, cut_out = out.text()
    stderr, cut_err = err.text()
    result: dict[str, Any] = {
        "exit_code": None if timed_out else process.returncode,
        "stdout": stdout,
        "stderr": stderr,
        "timed_out": timed_out,
        "truncated": cut_out or cut_err,
    }
    if timed_out:
        result["error"] = f"the command ran past its {timeout:g}s timeout and was killed"
    return result
