"""The view's actions through the store's control socket: :class:`SocketActions`.

``retinue web --store --actions`` runs beside the store's writer, in another
process. Each action goes to that writer over its control socket
(:func:`retinue.connect`), as :class:`~retinue.web.actions.RuntimeActions`
over a :class:`~retinue.control.RemoteRuntime`. The connection is made when
the first action comes and made again when the writer changed (it restarted,
or the socket closed); while no writer runs, each action is refused as a
read-only view refuses it (:class:`~retinue.web.actions.WriterNeeded`, 503),
the text saying that no writer runs now.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from retinue.errors import ControlError, NoWriter, RetinueError
from retinue.web.actions import WRITER_NEEDED, ActionResult, RuntimeActions, WriterNeeded, refusal

if TYPE_CHECKING:
    from retinue.control import RemoteRuntime

__all__ = ["NO_WRITER", "SocketActions"]

NO_WRITER = (
    "no writer runs for this store now: start one (retinue run, retinue resume) and act "
    "again; " + WRITER_NEEDED
)
"""Why an action is refused while no writer serves the store's control socket."""


class SocketActions:
    """:class:`~retinue.web.actions.Actions` through the control socket of the writer of
    ``store`` (see the module)."""

    def __init__(self, store: str | Path, *, call_timeout_s: float = 30.0) -> None:
        """Act on the writer of ``store``; no connection is made before the first action."""
        self.store = Path(store)
        self.call_timeout_s = call_timeout_s
        self._remote: RemoteRuntime | None = None
        self._lock = asyncio.Lock()

    async def _host(self) -> RemoteRuntime:
        """The connection to the writer, made (again) if needed.

        Raises:
            NoWriter: no writer serves the store's control socket.
            ControlError, NotPermitted, LimitExceeded: as :func:`retinue.connect`.
        """
        async with self._lock:
            if self._remote is None or self._remote.closed:
                from retinue.control import connect

                self._remote = await asyncio.to_thread(
                    connect, self.store, call_timeout_s=self.call_timeout_s
                )
            return self._remote

    async def _act(
        self, action: Callable[[RuntimeActions], Awaitable[ActionResult]]
    ) -> ActionResult:
        """Run ``action`` on the writer; refuse it as a read-only view does when none runs."""
        try:
            remote = await self._host()
        except NoWriter:
            return await WriterNeeded(NO_WRITER).interrupt("")
        except RetinueError as exc:
            return refusal(exc)
        result = await action(RuntimeActions(remote))
        if result.error in (ControlError.__name__, NoWriter.__name__):
            self.disconnect()  # the writer went away: the next action connects again
        if result.error == NoWriter.__name__:
            return await WriterNeeded(NO_WRITER).interrupt("")
        return result

    def disconnect(self) -> None:
        """Close the connection (the next action makes a new one); idempotent."""
        remote, self._remote = self._remote, None
        if remote is not None:
            with contextlib.suppress(Exception):
                remote.disconnect()

    async def approve(self, request_id: str, note: str | None) -> ActionResult:
        """Approve ``request_id`` on the writer; see ``Runtime.approve``."""
        return await self._act(lambda a: a.approve(request_id, note))

    async def deny(self, request_id: str, reason: str) -> ActionResult:
        """Deny ``request_id`` on the writer; see ``Runtime.deny``."""
        return await self._act(lambda a: a.deny(request_id, reason))

    async def interrupt(self, ref: str) -> ActionResult:
        """Interrupt ``ref``'s turn on the writer; see ``Runtime.interrupt``."""
        return await self._act(lambda a: a.interrupt(ref))

    async def interrupt_tree(self, ref: str) -> ActionResult:
        """Interrupt ``ref``'s live subtree on the writer; see ``Runtime.interrupt_tree``."""
        return await self._act(lambda a: a.interrupt_tree(ref))

    async def resume(self, ref: str) -> ActionResult:
        """Resume ``ref`` on the writer; see ``Runtime.resume``."""
        return await self._act(lambda a: a.resume(ref))

    async def close(self, ref: str) -> ActionResult:
        """Close ``ref`` on the writer; see ``Runtime.close``."""
        return await self._act(lambda a: a.close(ref))
