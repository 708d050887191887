"""The runtime ``retinue mcp`` serves, opened once, on a thread of its own, when first wanted.

Over stdio an MCP client (an IDE, the Inspector) waits for the ``initialize``
answer with a short timeout, and opening a runtime whose team has a model
imports litellm (seconds; 11-55 s on a loaded machine) and restores the store.
So the server answers the handshake first and :class:`Opening` opens the
runtime when the first message after it arrives (:meth:`Opening.middleware`);
a tool call waits for the open. Over HTTP the runtime is opened before the
server listens (:meth:`Opening.ready`).

Each open gives back the completions that waits of an earlier server had
taken under a lease (:data:`LEASE_PREFIX`) and never handed over: that server
died between taking one and answering.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any

from retinue.errors import ConfigurationError, RetinueError, RuntimeClosed
from retinue.runtime import Runtime

__all__ = [
    "LEASE_LENGTH",
    "LEASE_PREFIX",
    "Opening",
    "check_lease_room",
    "release_leftover_leases",
]

LEASE_PREFIX = "retinue-mcp:"
"""The prefix of the leases ``retinue mcp``'s waits take (``retinue-mcp:<uuid>``)."""
LEASE_LENGTH = len(LEASE_PREFIX) + 32
"""The length of a lease ``retinue mcp``'s waits take (the prefix and a uuid's 32 hex)."""
_NOT_WAITING = frozenset({"initialize", "ping"})


def check_lease_room(rt: Runtime) -> None:
    """Refuse a runtime whose leases cannot be as long as this server's waits take.

    A lease is bounded as a dedup key (``dedup_key_max_length``): below
    :data:`LEASE_LENGTH`, every wait the server serves would fail with
    ``DedupKeyTooLong``; the server says so once, as it opens.

    Raises:
        ConfigurationError: ``dedup_key_max_length`` is below :data:`LEASE_LENGTH`.
    """
    bound = rt.limits.dedup_key_max_length
    if bound < LEASE_LENGTH:
        raise ConfigurationError(
            f"retinue mcp waits under leases of {LEASE_LENGTH} characters "
            f"({LEASE_PREFIX!r} and a uuid), and dedup_key_max_length is {bound}: "
            f"raise it to at least {LEASE_LENGTH}"
        )


def release_leftover_leases(rt: Runtime) -> int:
    """Give back every completion an earlier ``retinue mcp`` took under a lease and lost.

    At start no wait of this server holds a lease, so each ``retinue-mcp:``
    lease stored is one whose answer never reached its client. Returns how
    many were released.
    """
    leftover = [lease for lease in rt.leases() if lease.startswith(LEASE_PREFIX)]
    for lease in leftover:
        rt.release_lease(lease)
    return len(leftover)


class Opening:
    """One runtime, opened at most once by ``opener`` on a thread of its own."""

    def __init__(self, opener: Callable[[], Runtime]) -> None:
        """Open with ``opener()`` when :meth:`start` is first called (nothing runs yet)."""
        self._opener = opener
        self._future: Future[Runtime] = Future()
        self._started = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @classmethod
    def ready(cls, rt: Runtime) -> Opening:
        """An opening of a runtime that is already open."""
        opening = cls(lambda: rt)
        opening._started = True
        opening._future.set_result(rt)
        return opening

    @property
    def started(self) -> bool:
        """Whether the open has begun (or is done)."""
        return self._started

    def start(self) -> None:
        """Begin the open on a thread of its own, once; return at once."""
        with self._lock:
            if self._started:
                return
            self._started = True
            self._thread = threading.Thread(target=self._open, name="retinue-mcp-open", daemon=True)
            self._thread.start()

    def _open(self) -> None:
        try:
            rt = self._opener()
        except BaseException as exc:  # handed to every tool call instead of lost on a thread
            print(
                f"retinue mcp: the store could not be opened: {type(exc).__name__}: {exc}",
                file=sys.stderr,
                flush=True,
            )
            self._future.set_exception(exc)
        else:
            self._future.set_result(rt)

    async def runtime(self) -> Runtime:
        """The runtime, starting its open if needed and waiting for it without blocking the loop.

        Raises:
            RetinueError: the open failed (``StoreLocked``, ``StoreError``,
                ``ConfigurationError``...); every later call raises it again.
        """
        self.start()
        try:
            return await asyncio.wrap_future(self._future)
        except RetinueError:
            raise
        except Exception as exc:
            raise RuntimeClosed(
                f"the store could not be opened: {type(exc).__name__}: {exc}"
            ) from None

    def error(self) -> BaseException | None:
        """The open's error once it failed (None while it runs, or when it worked)."""
        if not self._future.done():
            return None
        return self._future.exception()

    async def middleware(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        """An MCP server middleware: start the open on the first message after the handshake.

        ``initialize`` (and ``ping``) pass without it, so the handshake's answer
        never waits for litellm's import or the store's restore.
        """
        if getattr(ctx, "method", None) not in _NOT_WAITING:
            self.start()
        return await call_next(ctx)

    def shutdown(self) -> None:
        """Shut the runtime down once its open (if begun) has ended; idempotent."""
        with self._lock:
            self._started = True  # no open begins after this
            thread = self._thread
        if thread is None and not self._future.done():
            self._future.set_exception(RuntimeClosed("retinue mcp is shutting down"))
        if thread is not None:
            thread.join()
        if self._future.done() and self._future.exception() is None:
            self._future.result().shutdown()
