"""Child processes the tools start (bash, the grep engine): exit seen at once, groups killed.

``asyncio``'s ``Process.wait()`` returns only once the child's pipes are
closed too, so a child that exited while something it started still holds
its stdout would look alive until that other process ends. :func:`spawn`
exposes the moment the child itself exits (:attr:`Child.exited`), so a
deadline can cover the process, and every child runs in its own process
group (``start_new_session``) that :func:`kill_group` ends as a whole.
:func:`end` kills the group and sees the exit through, even when the call
is cancelled again meanwhile (a runtime's shutdown cancels every task of its
loop, then closes it): a child whose exit came after its loop closed would
be reported on stderr, and its pipes left to a closed loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Child", "end", "kill_group", "spawn"]

_STREAM_LIMIT = 1 << 16
_START_S = 10.0  # the most a start (or an end) is waited for through a cancel


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
    transport: asyncio.SubprocessTransport


async def spawn(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    stdin: int,
) -> Child:
    """Start ``argv`` in a new session (its own process group), stdout and stderr piped.

    A cancel while the process starts does not leave it to the loop: the
    start is seen through, the child ended (:func:`end`), then the cancel raised.

    Raises:
        OSError: the program could not be started.
        asyncio.CancelledError: the call was cancelled (nothing it started runs on).
    """
    loop = asyncio.get_running_loop()
    start = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _ExitProtocol(loop),
            *argv,
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    )
    cancelled = await _through(start, _START_S)
    if not start.done() or (cancelled and start.exception() is not None):
        start.cancel()
        raise asyncio.CancelledError
    transport, protocol = start.result()
    process = asyncio.subprocess.Process(transport, protocol, loop)
    child = Child(process, protocol.exited, transport)
    if cancelled:
        await end(child, _START_S)
        raise asyncio.CancelledError
    return child


async def _through(future: asyncio.Future[Any], bound_s: float) -> bool:
    """Wait up to ``bound_s`` for ``future``, whatever cancels come; return whether one came.

    The future's own error is left in it for the caller.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    cancelled = False
    while not future.done() and loop.time() < deadline:
        try:
            await asyncio.wait_for(asyncio.shield(future), deadline - loop.time())
        except asyncio.CancelledError:
            cancelled = True
        except Exception:  # a timeout, or the future's own error
            break
    return cancelled


def kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the child's whole process group (nothing happens if it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def end(child: Child, bound_s: float) -> None:
    """Kill ``child``'s group, wait up to ``bound_s`` for its exit, and close its pipes.

    A cancel that comes meanwhile does not cut the wait short (the exit
    follows a SIGKILL within moments); it is raised once the child is ended.

    Raises:
        asyncio.CancelledError: the call was cancelled while it waited.
    """
    kill_group(child.process)
    cancelled = await _through(child.exited, bound_s)
    child.transport.close()
    if cancelled:
        raise asyncio.CancelledError
