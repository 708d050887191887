"""A writer's control socket, served on a thread of its own: :class:`ControlServer`.

:meth:`ControlServer.start` binds ``<store>/control.sock`` (mode 0600,
replacing a stale one; see :mod:`retinue.control._socket`), gives back the
completions an earlier writer's socket took and never handed over
(:func:`~retinue.control._serving.release_leftover_leases`), and serves
connections on an asyncio loop in the thread ``retinue-control``. Every
call goes through the runtime's Engine, so the supervisor never waits for
the socket; at most ``Limits.control_max_connections`` connections are
served at once. :meth:`ControlServer.stop` (from the runtime's close, after
its waits were ended) closes the connections, removes the socket file and
joins the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from pathlib import Path

from retinue.actors.system import System
from retinue.control._connection import Connection
from retinue.control._serving import release_leftover_leases
from retinue.control._socket import bind_control_socket, socket_path

__all__ = ["STOP_GRACE_S", "ControlServer"]

STOP_GRACE_S = 2.0
"""How long a stopping server lets its calls in flight end by themselves (the runtime's
close answers its waits) before it cancels them."""
_START_TIMEOUT_S = 30.0
log = logging.getLogger("retinue.control")


class ControlServer:
    """A writer's control socket; thread-safe, stopped once by :meth:`stop`."""

    def __init__(self, system: System, sock: socket.socket, inode: int) -> None:
        """Use :meth:`start`."""
        self.system = system
        self.path: Path = socket_path(system.path)
        self._sock = sock
        self._inode = inode
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="retinue-control", daemon=True
        )
        self._lock = threading.Lock()
        self._stopped = False

    @classmethod
    def start(cls, system: System) -> ControlServer:
        """Serve ``system``'s control socket; return once it accepts connections.

        Raises:
            StoreError: the socket cannot be bound (or a non-socket file is in its place).
        """
        release_leftover_leases(system.engine)
        sock, inode = bind_control_socket(system.path, system.limits.control_max_connections)
        server = cls(system, sock, inode)
        server._thread.start()
        try:
            started = asyncio.run_coroutine_threadsafe(server._listen(), server._loop)
            started.result(_START_TIMEOUT_S)
        except BaseException:
            server.stop()
            raise
        return server

    async def _listen(self) -> None:
        self._server = await asyncio.start_unix_server(self._accept, sock=self._sock)

    def _admitted(self, connection: Connection) -> str | None:
        """Count ``connection`` in, or say why it is refused (too many)."""
        cap = self.system.limits.control_max_connections
        if len(self._connections) >= cap:
            return (
                f"the control socket serves {cap} connections at once "
                "(control_max_connections); close one or raise the limit"
            )
        self._connections.add(connection)
        return None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = Connection(self.system, reader, writer, self._admitted)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await connection.run()
        finally:
            self._connections.discard(connection)
            if task is not None:
                self._tasks.discard(task)

    def stop(self) -> None:
        """Stop serving: close every connection (what their calls took is given back), remove
        the socket file, end the thread. Idempotent, from any thread but its own."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self._thread.is_alive():
            done = asyncio.run_coroutine_threadsafe(self._close(), self._loop)
            with contextlib.suppress(Exception):
                done.result(STOP_GRACE_S + 10.0)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10.0)
        self._sock.close()
        self._remove_file()
        if not self._thread.is_alive():
            self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        busy = [c for c in self._connections if c.busy]
        if busy:  # the runtime's close answers their waits (RuntimeClosed): let them say so
            loop = asyncio.get_running_loop()
            deadline = loop.time() + STOP_GRACE_S
            while any(c.busy for c in busy) and loop.time() < deadline:
                await asyncio.sleep(0.02)
        for connection in list(self._connections):
            await connection.stop()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=STOP_GRACE_S + 5.0)

    def _remove_file(self) -> None:
        """Remove the socket file if it is still the one this server bound."""
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self._inode:
                self.path.unlink()
