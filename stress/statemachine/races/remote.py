"""Host waits over the control socket (``retinue.connect``) racing their own cancellation.

The socket takes a wait's completion under the caller's lease (or one of its
own) and gives it back when the client cancels the wait (``ReleaseLease``). A wait the client
cancels while the writer is answering it (an interrupt that settles the
agent has just returned) gives back only once the answer has landed; a call
the client sends after the cancel must be served after that give-back, so a
wait right behind the cancelled one receives the completion it gave back,
never ``NothingToWaitFor`` with the completion on its way back. A wait
cancelled after its answer reached the client gives it back too (the client
sends the ``Cancel``), under the socket's lease as under the caller's, as in
process. The socket's own leases are 48 characters, past the machine's
``dedup_key_max_length`` (8): a bound on callers' keys, which must not refuse them.
"""

from __future__ import annotations

import asyncio

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import retinue
from retinue import Completion
from retinue.errors import RetinueError
from stress.statemachine.data import PARK_S
from stress.statemachine.model import Agent, Model, nothing_left
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["RemoteRaces"]

Outcome = Completion | RetinueError | None
REMOTE_RUNS = 1
"""At most this many runs of the rule an example (each connects a client: slower steps)."""
CANCEL_DELAYS = [0.0, 0.0, 0.0005, 0.001, 0.002, 0.004]
"""How long after sending the first wait its cancel comes (seconds; 0: at once)."""


class RemoteRaces(Model):
    """Rules where a remote client's waits race their cancellation and the next wait."""

    remote_leases = 0  # leases the rule handed out in this example (each used once)

    def _host_heirs(self) -> list[Agent]:
        """Live agents whose completions go to the host (no live ancestor), busy first."""
        mine = [a for a in self.live() if self.heir(a) is None]
        return [a for a in mine if not a.busy] + [a for a in mine if a.busy]

    @precondition(lambda self: self.remote_leases < 2 * REMOTE_RUNS and self._host_heirs())
    @rule(
        index=st.integers(0, 63),
        spins=st.integers(0, 3),
        delay=st.sampled_from(CANCEL_DELAYS),
        interrupt=st.booleans(),
        callers=st.booleans(),
    )
    def remote_cancelled_wait_then_wait(
        self, index: int, spins: int, delay: float, interrupt: bool, callers: bool
    ) -> None:
        """A remote ``wait_async`` on an agent, cancelled as its answer lands (after an
        interrupt that settles the agent, or after ``delay``), and another sent right
        behind it: nothing lost or doubled.

        The first wait returns the oldest completion the host has not received
        (or ``NothingToWaitFor``) or is cancelled: what it took is given back
        before the second is served (also when its answer had reached the
        client); the second (timeout 0) returns the oldest one left, and ends
        empty only when none is left. Both waits go under the caller's leases
        (``callers``) or under the socket's own; none is left at the end.
        """
        heirs = self._host_heirs()
        agent = heirs[-1 - index % len(heirs)]
        TRACE.append(
            f"remote_cancelled_wait_then_wait({agent.info.path}, spins={spins}, "
            f"delay={delay}, interrupt={interrupt}, callers={callers})"
        )
        STATS["race:remote_cancelled_wait"] += 1

        # The caller's own leases (short: the machine's dedup_key_max_length is 8), or
        # none: the socket's (48 characters), acknowledged as the client confirms.
        self.remote_leases += 2
        lease: str | None = f"r{self.remote_leases - 1}" if callers else None
        then_lease: str | None = f"r{self.remote_leases}" if callers else None
        STATS[f"race:remote_{'callers' if callers else 'socket'}_lease"] += 1

        async def scenario(
            remote: retinue.RemoteRuntime,
        ) -> tuple[Outcome, Outcome, dict[str, Completion]]:
            first = asyncio.ensure_future(remote.wait_async(agent.id, timeout=PARK_S, lease=lease))
            for _ in range(spins):
                await asyncio.sleep(0)
            if delay:
                await asyncio.sleep(delay)  # the answer lands about now (its commit)
            if interrupt:  # the wait was sent first: the interrupt's settle answers it
                await remote.interrupt_async(agent.id)
            first.cancel()
            got: Outcome
            try:
                got = await first
            except asyncio.CancelledError:
                STATS["race:remote_cancelled"] += 1
                got = None
            except RetinueError as exc:
                got = exc
            then: Outcome
            try:
                then = await remote.wait_async(agent.id, timeout=0, lease=then_lease)
            except RetinueError as exc:
                then = exc
            for taken, held in ((got, lease), (then, then_lease)):
                if held is None or not isinstance(taken, Completion):
                    continue
                if not await remote.ack_lease_async(held):
                    fail(f"lease {held} of a completion the host received was not stored")
            # Served after every confirm and give-back this client sent (one connection).
            return got, then, await remote.leases_async()

        try:
            with retinue.connect(self.store_path) as remote:
                got, then, left = asyncio.run(scenario(remote))
        except RetinueError as exc:
            fail(f"a remote wait, interrupt and wait on {agent.info.path} raised {exc!r}")
        self.sync()
        self._check_remote(agent, got, then, left)

    def _check_remote(
        self, agent: Agent, got: Outcome, then: Outcome, left: dict[str, Completion]
    ) -> None:
        """Check the outcomes of a cancelled remote wait (``got``: None if cancelled), the
        wait behind it (``then``) and the leases ``left`` after both."""
        where = f"remote wait on {agent.info.path}"
        # A cancelled wait gave back what it took (its lease released), whether the writer
        # or the client had its answer; a received one's lease was acknowledged.
        if left:
            fail(f"{where}: leases left after the cancelled wait and the next: {left}")
        for outcome in (got, then):
            if isinstance(outcome, Completion):
                self.host_received(agent, outcome, where, routed=True)
            elif outcome is not None and not nothing_left(outcome):
                fail(f"{where} raised {outcome!r}")
        if not isinstance(then, Completion) and self.host_due(agent) is not None:
            fail(
                f"{where}: the wait behind a cancelled one got {then!r} while "
                f"{agent.id}:{self.host_due(agent)} was there to receive"
            )
