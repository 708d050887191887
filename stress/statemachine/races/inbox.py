"""The host's inbox under races: reads, cancelled ``messages_async``, a blocked read, a flood.

Every message of the host's inbox is read exactly once, in order; a
cancelled read gives back what it was handed; a read blocked on the empty
inbox is answered by a new agent's message; senders past the inbox's
capacity are refused ``MailboxFull``, nothing dropped silently.
"""

from __future__ import annotations

import asyncio
import functools

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from retinue import AgentInfo, AgentState, Message
from retinue.errors import RetinueError
from stress.statemachine.data import LIMITS, PARK_S
from stress.statemachine.latches import HostCall
from stress.statemachine.model import Agent, Model
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["InboxRaces"]


class InboxRaces(Model):
    """Rules where the host reads its inbox while agents write to it."""

    @rule(timeout=st.sampled_from([0, 0.001]))
    def host_messages(self, timeout: float) -> None:
        """The host reads its inbox: exactly the unread messages, in order, each once."""
        TRACE.append(f"messages(timeout={timeout})")
        STATS["race:host_messages"] += 1
        got, error = self.call("messages", lambda: self.rt.messages(timeout=timeout))
        if error is not None:
            fail(f"messages(timeout={timeout}) raised {error!r}")
        self.host_read(got, f"messages(timeout={timeout})")

    @rule(spins=st.integers(0, 6), timeout=st.sampled_from([0, 1]), read_now=st.booleans())
    def cancelled_messages_async(self, spins: int, timeout: float, read_now: bool) -> None:
        """A ``messages_async`` task is cancelled after ``spins`` loop turns: nothing is lost.

        If it returned first, that is a read; if it was cancelled, what it was
        handed goes back unread (``read_now``: the next read gets all of it).
        """
        TRACE.append(f"cancelled_messages_async(spins={spins}, timeout={timeout})")
        STATS["race:cancelled_messages_async"] += 1

        async def scenario() -> list[Message] | BaseException | None:
            task = asyncio.ensure_future(self.rt.messages_async(timeout=timeout))
            for _ in range(spins):
                await asyncio.sleep(0)
            task.cancel()
            try:
                return await task
            except asyncio.CancelledError:
                STATS["race:messages_cancelled"] += 1
                return None
            except Exception as exc:
                return exc

        outcome = asyncio.run(scenario())
        if isinstance(outcome, BaseException):
            fail(f"a cancelled messages_async raised {outcome!r}")
        self.rt.agents()  # two round trips: a give-back submitted meanwhile is served
        self.rt.agents()
        if outcome is not None:
            self.host_read(outcome, "cancelled messages_async (returned first)")
        elif read_now:
            self.host_read(self.rt.messages(timeout=0), "messages after a cancelled read")

    @precondition(lambda self: not self.host_unread() and len(self.live()) < LIMITS.max_agents)
    @rule(asynchronous=st.booleans())
    def host_inbox_wait(self, asynchronous: bool) -> None:
        """The host blocks reading its empty inbox; a new top-level agent's message answers it.

        The read returns exactly that message (the inbox was empty), once.
        """
        TRACE.append(f"host_inbox_wait(asynchronous={asynchronous})")
        STATS["race:host_inbox_wait"] += 1
        running = [a for a in self.live() if a.info.state is AgentState.RUNNING]
        if len(running) >= LIMITS.max_active_turns:  # gated turns hold every slot: free them
            self.harness.open_gate()
            self.sync()
            if self.host_unread():  # queued senders ran meanwhile: read theirs first
                self.host_read(self.rt.messages(timeout=0), "messages before a blocked read")
        profile = "aecho" if asynchronous else "echo"
        got: list[list[Message] | BaseException] = []
        spawned: list[AgentInfo] = []
        if asynchronous:

            async def scenario() -> None:
                task = asyncio.ensure_future(self.rt.messages_async(timeout=PARK_S))
                await asyncio.sleep(0)  # the read is submitted before the spawn
                spawned.append(await self.rt.spawn_async(profile, "tell2"))
                got.append(await task)

            try:
                asyncio.run(scenario())
            except RetinueError as exc:
                fail(f"host_inbox_wait: {exc!r}")
        else:
            reader = HostCall(functools.partial(self.rt.messages, timeout=PARK_S))
            reader.start()
            if not reader.waiting.wait(PARK_S):  # the read is registered before the spawn
                fail("the host's inbox read never blocked")
            spawned.append(self.rt.spawn(profile, "tell2"))
            reader.join(PARK_S)
            if reader.is_alive():
                fail("a blocked inbox read was not answered by a top-level agent's message")
            if reader.outcome is not None:
                got.append(reader.outcome)
        info = spawned[0]
        self.agents[info.id] = Agent(id=info.id, parent_id=None, info=info)
        self.sync()
        if not got or isinstance(got[0], BaseException):
            fail(f"host_inbox_wait: the read ended with {got}")
        if len(got[0]) != 1 or got[0][0].sender_id != info.id:
            fail(f"host_inbox_wait: the read returned {got[0]}, not the one message of {info.path}")
        self.host_read(got[0], "a blocked inbox read")

    @precondition(lambda self: len(self.live()) + 2 <= LIMITS.max_agents)
    @rule(count=st.integers(2, LIMITS.mailbox_capacity + 2), asynchronous=st.booleans())
    def flood_host_inbox(self, count: int, asynchronous: bool) -> None:
        """Top-level agents message the host at once, more than its inbox holds.

        The host does not read meanwhile, so exactly the room that was left
        fills (``mailbox_capacity`` minus the unread ones) and every other send
        is refused ``MailboxFull`` (its turn fails with it); nothing is dropped
        silently.
        """
        TRACE.append(f"flood_host_inbox({count}, asynchronous={asynchronous})")
        STATS["race:flood_host_inbox"] += 1
        self.harness.open_gate()  # every sender gets a turn slot
        self.sync()
        count = min(count, LIMITS.max_agents - len(self.live()))
        room = LIMITS.mailbox_capacity - len(self.host_unread())
        with self.harness.cond:
            refused_before = self.harness.host_full
        sent_before = len(self.host_inbox())
        profile = "aecho" if asynchronous else "echo"
        for _ in range(count):
            info, error = self.call("spawn", lambda: self.rt.spawn(profile, "tellhost"))
            if error is not None:
                fail(f"flood_host_inbox: spawn raised {error!r}")
            self.agents[info.id] = Agent(id=info.id, parent_id=None, info=info)
        self.sync()
        arrived = len(self.host_inbox()) - sent_before
        with self.harness.cond:
            refused = self.harness.host_full - refused_before
        if (arrived, refused) != (min(count, room), count - min(count, room)):
            fail(
                f"flood_host_inbox: {count} sends with room for {room}: {arrived} arrived, "
                f"{refused} refused MailboxFull"
            )
