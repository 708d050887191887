"""The host's waits: an agent's completion (leased or not) and the runtime's quiescence.

:class:`WaitCalls` holds ``wait`` and the lease calls (``ack_lease``,
``release_lease``, ``leases``), ``wait_idle`` and its twin ``settled``, each
sync call next to its ``*_async`` twin. A wait goes through the engine's wait
(given up in time, given back if its task is cancelled); the rest are one
line over a command.
"""

from __future__ import annotations

import asyncio
import time

from retinue.actors.calls import HostReceipt, resolve_timeout
from retinue.actors.commands import HOST, AckLease, Idle, Leases, ReleaseLease, Wait
from retinue.errors import WaitTimeout
from retinue.protocol.messages import Completion
from retinue.runtime.calls import Calls

__all__ = ["WaitCalls"]


class WaitCalls(Calls):
    """Waits on an agent's completion, its durable leases, and the runtime's quiescence."""

    def wait(
        self, ref: str, timeout: float | None = None, *, lease: str | None = None
    ) -> Completion:
        """Return the completion of the agent's oldest turn the host has not received.

        Blocks until that turn settles; ``timeout=None`` means ``wait_default_s``.
        ``lease`` (an id the host makes, unique per wait) makes the handover
        durable: the commit that marks the completion received also stores it
        under the lease, so a wait repeated with the same lease (its answer
        was lost) returns the same completion, also after a reopen, until
        :meth:`ack_lease` forgets it or :meth:`release_lease` gives it back.

        Raises:
            WaitTimeout: it did not settle in time; the agent keeps running.
            UnknownAgent: no such agent.
            InvalidArgument, DedupKeyTooLong: a blank or too long lease, one a
                blocked wait holds, or one stored for another agent.
        """
        seconds = resolve_timeout(timeout, self.limits)
        result: Completion = self._engine.wait(Wait(HOST, ref, lease=lease), seconds)
        return result

    async def wait_async(
        self, ref: str, timeout: float | None = None, *, lease: str | None = None
    ) -> Completion:
        """Like :meth:`wait`, without blocking the event loop.

        Cancelling the awaiting task loses nothing: a completion already
        handed to this wait is given back and goes to the next wait (a leased
        one is released).
        """
        seconds = resolve_timeout(timeout, self.limits)
        engine = self._engine
        command = Wait(HOST, ref, lease=lease)
        result: Completion = await engine.wait_async(command, seconds, HostReceipt(engine, lease))
        return result

    def ack_lease(self, lease: str) -> bool:
        """Forget ``lease``: the host has the completion its wait returned.

        Returns True if the lease was stored (False: unknown, or acknowledged
        or released before), so acknowledging twice is harmless.

        Raises:
            ArgumentTypeError, InvalidArgument: not a usable lease id.
        """
        return self._ask(AckLease(lease))

    async def ack_lease_async(self, lease: str) -> bool:
        """Like :meth:`ack_lease`, without blocking the event loop."""
        return await self._ask_async(AckLease(lease))

    def release_lease(self, lease: str) -> bool:
        """Give back the completion ``lease`` holds: the host never got it.

        The completion goes to the next host wait on its agent (as when a
        ``wait_async`` is cancelled after it was answered), and the lease is
        forgotten. Returns True if the lease was stored.

        Raises:
            ArgumentTypeError, InvalidArgument: not a usable lease id.
        """
        return self._ask(ReleaseLease(lease))

    async def release_lease_async(self, lease: str) -> bool:
        """Like :meth:`release_lease`, without blocking the event loop."""
        return await self._ask_async(ReleaseLease(lease))

    def leases(self) -> dict[str, Completion]:
        """Return every lease not acknowledged or released yet, with its completion."""
        return self._ask(Leases())

    async def leases_async(self) -> dict[str, Completion]:
        """Like :meth:`leases`, without blocking the event loop."""
        return await self._ask_async(Leases())

    def wait_idle(self, timeout: float | None = None) -> None:
        """Block until the runtime is quiescent; ``timeout=None`` means ``wait_default_s``.

        Quiescent: no turn is queued or running, no restart is pending, every
        runner has returned (an abandoned one included), no command waits for
        the supervisor, and every event published so far was handed to its
        subscribers. A turn parked for approval does not count (it waits for a
        person). For tests
        and drivers that would otherwise poll; a host that keeps spawning may
        never see it.

        Raises:
            WaitTimeout: the runtime was still busy after ``timeout``.
            RuntimeClosed: the runtime is (or gets) closed.
        """
        seconds = resolve_timeout(timeout, self.limits)
        deadline = time.monotonic() + seconds
        self._engine.wait(Idle(HOST), seconds)
        self._flush_events(deadline)

    async def settled(self, timeout: float | None = None) -> None:
        """Like :meth:`wait_idle`, without blocking the event loop."""
        seconds = resolve_timeout(timeout, self.limits)
        deadline = time.monotonic() + seconds
        engine = self._engine
        await engine.wait_async(Idle(HOST), seconds, HostReceipt(engine))
        await asyncio.get_running_loop().run_in_executor(None, self._flush_events, deadline)

    def _flush_events(self, deadline: float) -> None:
        """Wait until subscribers have every event published so far.

        Raises:
            WaitTimeout: they had not by ``deadline``.
        """
        system = self._system
        if system is not None and not system.bus.flush(max(0.0, deadline - time.monotonic())):
            raise WaitTimeout("the runtime's subscribers did not take every event in time")
