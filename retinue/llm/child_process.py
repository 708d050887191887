"""Child processes the tools start (bash, the grep engine): exit seen at once, groups killed.

``asyncio``'s ``Process.wait()`` returns only once the child's pipes are
closed too, so a child that exited while something it started still holds
its stdout would look alive until that other process ends. :func:`spawn`
exposes the moment the child itself exits (:attr:`Child.exited`), so a
deadline can cover the process, and every child runs in its own process
group (``start_new_session``) that :func:`kill_group` ends as a whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Child", "kill_group", "reap", "spawn"]

_STREAM_LIMIT = 1 << 16


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """The stream protocol of ``create_subprocess_exec``, plus a future set at exit."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=_STREAM_LIMIT, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        """Note the exit, then let the stream protocol do its part."""
        if not self.exited.done():
            self.exited.set_result(None)
        super().process_exited()


@dataclass(frozen=True)
class Child:
    """A started child: the asyncio process and a future done as soon as it exits."""

    process: asyncio.subprocess.Process
    exited: asyncio.Future[None]


async def spawn(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    stdin: int,
) -> Child:
    """Start ``argv`` in a new session (its own process group), stdout and stderr piped.

    Raises:
        OSError: the program could not be started.
    """
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: _ExitProtocol(loop),
        *argv,
        stdin=stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    return Child(asyncio.subprocess.Process(transport, protocol, loop), protocol.exited)


def kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the child's whole process group (nothing happens if it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def reap(child: Child, within_s: float) -> None:
    """Wait up to ``within_s`` for a killed child's exit, even in a cancelled task.

    A child reaped before its call returns leaves no process behind and no
    transport for the garbage collector to warn about; a cancelled call (an
    interrupted turn) still waits this long, once, before it ends.
    """
    if child.process.returncode is None:
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(child.exited), within_s)
