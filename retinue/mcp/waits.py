"""``retinue mcp``'s waits: leased, so a completion whose client went away is not lost.

An MCP client can die in the middle of a ``wait`` (SIGKILL; over the older
streamable-HTTP handshake a closed connection does not cancel the request).
:func:`leased_wait` waits under a fresh lease (the runtime's leased waits:
the commit that hands the completion over also stores it under the lease):

- while it waits it watches the client's connection (``gone``) and, if it
  closes, cancels the wait, which gives back whatever it took;
- once answered, it looks again: a client that went away meanwhile gets
  nothing and the lease is released (the next ``wait`` returns the
  completion); a client still there gets it and the lease is acknowledged.

A server killed between the two keeps the lease in the store; the next
server releases it when it opens the store
(:func:`~retinue.mcp.opening.release_leftover_leases`). So a completion
reaches a client at least once; a client that must not act twice on one
tells them apart by ``path`` and ``generation``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from retinue.mcp.opening import LEASE_PREFIX
from retinue.protocol.messages import Completion
from retinue.runtime import Runtime

__all__ = ["DISCONNECT_POLL_S", "ClientGone", "Gone", "leased_wait"]

DISCONNECT_POLL_S = 0.25
"""How often a waiting request looks whether its client's connection closed."""

Gone = Callable[[], Awaitable[bool]]
"""``await gone()``: whether the client that made the request has gone away."""


class ClientGone(Exception):
    """The client of a wait went away; what the wait took was given back."""


async def _until_gone(gone: Gone) -> None:
    while not await gone():
        await asyncio.sleep(DISCONNECT_POLL_S)


async def _wait_or_gone(waiting: asyncio.Future[Completion], gone: Gone) -> None:
    """Return once ``waiting`` is done; raise :class:`ClientGone` (after cancelling it) if the
    client goes away first."""
    watching: asyncio.Future[None] = asyncio.ensure_future(_until_gone(gone))
    try:
        both: set[asyncio.Future[Any]] = {waiting, watching}
        await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
    if not waiting.done():
        waiting.cancel()  # a cancelled leased wait gives back what it took
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await waiting
        raise ClientGone("the client went away while it waited; nothing was taken")


async def leased_wait(
    rt: Runtime, ref: str, timeout: float | None, gone: Gone | None
) -> Completion:
    """The agent's next completion, handed over under a lease that only a client still there
    acknowledges.

    ``gone`` is None where the transport cannot tell (stdio: the server ends
    with its client, and a wait cancelled then gives back what it took).

    Raises:
        ClientGone: the client went away; the completion, if one was taken,
            goes to the next wait.
        WaitTimeout, UnknownAgent, NothingToWaitFor, InvalidArgument: as
            :meth:`~retinue.Runtime.wait_async` raises.
    """
    lease = f"{LEASE_PREFIX}{uuid.uuid4().hex}"
    waiting = asyncio.ensure_future(rt.wait_async(ref, timeout, lease=lease))
    try:
        if gone is not None:
            await _wait_or_gone(waiting, gone)
        completion = await waiting
    finally:
        if not waiting.done():
            waiting.cancel()
    if gone is not None and await gone():
        await rt.release_lease_async(lease)
        raise ClientGone("the client went away before the answer; it goes to the next wait")
    await rt.ack_lease_async(lease)
    return completion
