"""How the writer serves one command a client sent: through its Engine, as the host would.

:func:`serve` submits the command through the runtime's
:class:`~retinue.actors.calls.Engine` (the supervisor never waits for the
socket) and returns a :class:`Served`: the answer, and for a call that took
something (a wait's completion, the host's messages) how to keep it once the
client confirms it has the answer, and how to give it back if the client
never does (its connection closed, or it cancelled the call).

A wait (or a ``run``: a spawn and its wait in one command, served as a wait)
without a lease of the caller's takes its completion under a lease of the
socket's own (:data:`LEASE_PREFIX`; the writer's, so ``dedup_key_max_length``,
a bound on callers' keys, does not refuse it, and no caller can send one that
passes unbounded: ``Wait.internal_lease`` never crosses the wire): the commit
that hands it over also stores it, so it is given back on a lost connection, and after a writer's
crash (the next writer's socket releases the leases left over at its start,
:func:`release_leftover_leases`). A wait with the caller's lease is the
caller's to acknowledge (``ack_lease``), as in process; and as in process, a
caller that cancels the wait once its answer came releases that lease (the
answer is confirmed like any, and a ``Cancel`` gives it back), while a
dropped connection keeps it (:attr:`Served.kept_on_drop`): the caller's lease
is how it gets the completion again after losing the answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import Any

from retinue.actors.calls import Engine, HostReceipt, resolve_timeout
from retinue.actors.commands import (
    HOST,
    AckLease,
    Command,
    GiveBack,
    HostMessages,
    Idle,
    Leases,
    ReleaseLease,
    Run,
    Wait,
)
from retinue.actors.system import System
from retinue.errors import WaitTimeout

__all__ = ["LEASE_PREFIX", "Served", "release_leftover_leases", "serve"]

LEASE_PREFIX = "retinue-control:"
"""The prefix of the leases the control socket's waits take (``retinue-control:<uuid>``)."""


@dataclass(frozen=True)
class Served:
    """A command's answer; ``keep`` and ``give_back`` are what confirms or undoes what it took.

    ``kept_on_drop``: what it took is the caller's to keep or give back (a wait
    under the caller's lease): a cancel gives it back, a dropped connection does not.
    """

    value: Any
    keep: Command[Any] | None = None
    give_back: Command[Any] | None = None
    kept_on_drop: bool = False

    @property
    def confirm(self) -> bool:
        """Whether the client must confirm it has the answer (else it is given back)."""
        return self.give_back is not None


def release_leftover_leases(engine: Engine) -> int:
    """Give back every completion an earlier writer's socket took under a lease and lost.

    At start no connection holds a lease, so each ``retinue-control:`` lease
    stored is one whose answer was never confirmed. Returns how many were released.
    """
    leftover = [lease for lease in engine.ask(Leases()) if lease.startswith(LEASE_PREFIX)]
    for lease in leftover:
        engine.ask(ReleaseLease(lease))
    return len(leftover)


async def serve(system: System, command: Command[Any], timeout: float | None) -> Served:
    """Serve ``command`` on ``system`` as the host; return its answer.

    Raises:
        RetinueError: whatever the command raises (``WaitTimeout``,
            ``UnknownAgent``, ``InvalidArgument`` for a bad timeout, checked
            before a run spawns anything...).
    """
    engine = system.engine
    if isinstance(command, Wait | Run):
        return await _wait(engine, command, resolve_timeout(timeout, system.limits))
    if isinstance(command, HostMessages):
        seconds = resolve_timeout(timeout, system.limits)
        taken = await engine.wait_async(command, seconds, HostReceipt(engine))
        back = GiveBack(None, tuple(taken)) if taken else None
        return Served(taken, None, back)
    if isinstance(command, Idle):
        await _idle(system, resolve_timeout(timeout, system.limits))
        return Served(None)
    return Served(await engine.ask_async(command))


async def _wait(engine: Engine, command: Wait | Run, seconds: float) -> Served:
    """A host wait (or a run, a spawn and its wait): under the caller's lease, or under one
    of the socket's to confirm."""
    if command.lease is not None:
        receipt = HostReceipt(engine, command.lease)
        value = await engine.wait_async(command, seconds, receipt)
        return Served(value, None, ReleaseLease(command.lease), kept_on_drop=True)
    lease = f"{LEASE_PREFIX}{uuid.uuid4().hex}"
    leased = dataclasses.replace(command, lease=lease, internal_lease=True)
    value = await engine.wait_async(leased, seconds, HostReceipt(engine, lease))
    return Served(value, AckLease(lease), ReleaseLease(lease))


async def _idle(system: System, seconds: float) -> None:
    """``wait_idle``: quiescence, then every event so far handed to its subscribers.

    Raises:
        WaitTimeout: not quiescent (or not flushed) within ``seconds``.
    """
    deadline = time.monotonic() + seconds
    engine = system.engine
    await engine.wait_async(Idle(HOST), seconds, HostReceipt(engine))
    left = max(0.0, deadline - time.monotonic())
    if not await asyncio.to_thread(system.bus.flush, left):
        raise WaitTimeout("the runtime's subscribers did not take every event in time")
