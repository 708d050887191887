"""``retinue mcp``'s waits: leased, and acknowledged only once the answer is known delivered.

An MCP client can die in the middle of a ``wait`` (SIGKILL; over the older
streamable-HTTP handshake a closed connection does not cancel the request),
and a server cannot always tell in time: the connection's close may be seen
only after the answer was written into it. So no answer is trusted to have
arrived. :func:`leased_wait` waits under a fresh lease (the runtime's leased
waits: the commit that hands the completion over also stores it under the
lease), and over HTTP the lease is then kept by :class:`Handovers`:

- while it waits it watches the client's connection (``gone``) and, if it
  closes, cancels the wait, which gives back whatever it took; a client seen
  gone once answered gets nothing and the lease is released at once;
- otherwise the answer goes out and its lease stays *held* for the client's
  session (``mcp-session-id``): it is acknowledged when that session sends its
  next message (it is alive and went on) or ends in order (``DELETE``);
- a wait on the same agent from another session releases the leases other
  sessions hold on it (at its start, and again if another session's wait took
  the completion it waited for: ``NothingToWaitFor``), so the completion a
  dead client never read goes to the next wait.

Over stdio (no session, the server ends with its client) the lease is
acknowledged with the answer. A server killed with leases held keeps them in
the store; the next server releases them when it opens the store
(:func:`~retinue.mcp.opening.release_leftover_leases`). So a completion
reaches a client at least once; a client that must not act twice on one
tells them apart by ``path`` and ``generation``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from retinue.errors import NothingToWaitFor
from retinue.mcp.opening import LEASE_PREFIX
from retinue.protocol.messages import Completion
from retinue.runtime import Runtime

__all__ = [
    "DISCONNECT_POLL_S",
    "SESSION_HEADER",
    "ClientGone",
    "Gone",
    "Handovers",
    "leased_wait",
    "session_of",
]

DISCONNECT_POLL_S = 0.25
"""How often a waiting request looks whether its client's connection closed."""
SESSION_HEADER = "mcp-session-id"
"""The streamable-HTTP header that names a client's session."""

Gone = Callable[[], Awaitable[bool]]
"""``await gone()``: whether the client that made the request has gone away."""


class ClientGone(Exception):
    """The client of a wait went away; what the wait took was given back."""


def session_of(request: Any) -> str | None:
    """The MCP session an HTTP request belongs to (None over stdio, or without one)."""
    headers = getattr(request, "headers", None)
    if headers is None:
        return None
    value = headers.get(SESSION_HEADER)
    return value if isinstance(value, str) and value else None


@dataclass
class Handovers:
    """The leases of a server's HTTP waits, by session, until known delivered; see the module.

    Used from the server's event loop only.
    """

    leases: dict[str, tuple[str, str]] = field(default_factory=dict)
    """lease -> (session, agent id): waits in flight, and answers sent but not acknowledged."""
    answered: set[str] = field(default_factory=set)
    """The leases of those whose answer was sent."""

    def begin(self, lease: str, agent_id: str, session: str) -> None:
        """A wait of ``session`` on ``agent_id`` starts under ``lease``."""
        self.leases[lease] = (session, agent_id)

    def sent(self, lease: str) -> None:
        """The answer of the wait under ``lease`` goes out: held until confirmed."""
        if lease in self.leases:
            self.answered.add(lease)

    def drop(self, lease: str) -> None:
        """The wait under ``lease`` took nothing, or gave it back."""
        self.leases.pop(lease, None)
        self.answered.discard(lease)

    async def release_others(self, rt: Runtime, agent_id: str, session: str) -> int:
        """Give back what other sessions' waits on ``agent_id`` took and no one confirmed."""
        released = 0
        theirs = [k for k, (s, a) in self.leases.items() if a == agent_id and s != session]
        for lease in theirs:
            if await rt.release_lease_async(lease):
                self.drop(lease)
                released += 1
        return released

    async def confirm(self, rt: Runtime, session: str) -> int:
        """``session`` is alive (a new message) or ended in order: acknowledge its answers."""
        mine = [k for k in self.answered if self.leases[k][0] == session]
        for lease in mine:
            self.drop(lease)
        for lease in mine:
            await rt.ack_lease_async(lease)
        return len(mine)


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
    rt: Runtime,
    agent_id: str,
    timeout: float | None,
    gone: Gone | None,
    handover: tuple[Handovers, str] | None = None,
) -> Completion:
    """The agent's next completion, handed over under a lease acknowledged only once the
    answer is known delivered (see the module).

    ``gone`` is None where the transport cannot tell (stdio: the server ends
    with its client, and a wait cancelled then gives back what it took).
    ``handover`` is the server's :class:`Handovers` and the client's session
    (None: the lease is acknowledged with the answer).

    Raises:
        ClientGone: the client went away; the completion, if one was taken,
            goes to the next wait.
        WaitTimeout, UnknownAgent, NothingToWaitFor, InvalidArgument: as
            :meth:`~retinue.Runtime.wait_async` raises.
    """
    if handover is None:
        return await _one_wait(rt, agent_id, timeout, gone, None)
    handovers, session = handover
    await handovers.release_others(rt, agent_id, session)
    try:
        return await _one_wait(rt, agent_id, timeout, gone, handover)
    except NothingToWaitFor:
        # Another session's wait may have taken the completion this one waited for,
        # unconfirmed (a dead client's): take it back (that wait may have given it back
        # itself meanwhile, having seen its client gone), and wait once more. With nothing
        # taken, the second wait raises NothingToWaitFor as the first did.
        await handovers.release_others(rt, agent_id, session)
    return await _one_wait(rt, agent_id, timeout, gone, handover)


async def _one_wait(
    rt: Runtime,
    agent_id: str,
    timeout: float | None,
    gone: Gone | None,
    handover: tuple[Handovers, str] | None,
) -> Completion:
    """One leased wait (see :func:`leased_wait`)."""
    lease = f"{LEASE_PREFIX}{uuid.uuid4().hex}"
    if handover is not None:
        handover[0].begin(lease, agent_id, handover[1])
    waiting = asyncio.ensure_future(rt.wait_async(agent_id, timeout, lease=lease))
    try:
        if gone is not None:
            await _wait_or_gone(waiting, gone)
        completion = await waiting
        if gone is not None and await gone():
            await rt.release_lease_async(lease)
            raise ClientGone("the client went away before the answer; it goes to the next wait")
    except BaseException:
        if handover is not None:
            handover[0].drop(lease)
        raise
    finally:
        if not waiting.done():
            waiting.cancel()
    if handover is None:
        await rt.ack_lease_async(lease)
    else:
        handover[0].sent(lease)
    return completion
