"""The runtime closes, or an interrupt lands, while a wait holds a completion its task has not seen.

A runner closes the runtime (sync, and async from the event loop while
another turn's ``wait_async`` was handed a completion it cannot resume to
receive); the runtime closes while a host's ``wait_async`` was answered but
the host's own loop is blocked; an interrupt, interrupt-tree or child close
lands as an ``alead`` turn's ``wait_async`` is answered. A child's
completion must reach exactly one turn of its parent (that turn, a wake or
the next follow-up), or stay pending for it in the store: never both, never
neither; the host's is taken back at the close, for a later wait.
"""

from __future__ import annotations

import asyncio
import threading
import time

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from retinue import AgentInfo, AgentState
from retinue.errors import AgentLimitExceeded, RuntimeClosed
from stress.statemachine.data import (
    BATCH_TASK,
    HANDOVER_TASK,
    LATCH,
    LIMITS,
    LOOP_SHUTDOWN,
    PARK_S,
    SHUTDOWN,
)
from stress.statemachine.model import Agent, Model, nothing_left
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["CloseRaces"]


class CloseRaces(Model):
    """Rules where the runtime's close or an interrupt races a wait that was just answered."""

    @precondition(lambda self: len(self.live()) < LIMITS.max_agents)
    @rule()
    def runner_closes_runtime(self) -> None:
        """A runner closes the runtime; the host's own close then returns with the store free."""
        TRACE.append("runner_closes_runtime")
        STATS["race:runner_closes_runtime"] += 1
        lt = self.harness.latches
        running = [a for a in self.live() if a.info.state is AgentState.RUNNING]
        if len(running) >= LIMITS.max_active_turns:  # gated turns hold every slot: free one
            self.harness.open_gate()
            self.sync()
        before = {i.id: i for i in self.rt.agents(include_closed=True)}
        lt.closed_by_runner.clear()
        lt.shutdown_armed.set()
        try:
            info = self.rt.spawn("echo", SHUTDOWN)
        except AgentLimitExceeded:
            lt.shutdown_armed.clear()
            return
        before[info.id] = info
        self.agents[info.id] = Agent(id=info.id, parent_id=None, info=info)
        if not lt.closed_by_runner.wait(PARK_S):
            fail("a runner's rt.shutdown() did not return")
        self.rt.shutdown()  # returns once the store is released
        self.reopen_closed(before)

    def _release_latch_and_settle(self, agent: AgentInfo, held: str) -> dict[str, AgentInfo]:
        """Let ``agent``'s latched turn go and wait until it settles while ``held`` stays blocked.

        Returns every agent as it is then (what the close that follows is checked against).
        """
        h, lt = self.harness, self.harness.latches
        lt.latch.set()
        deadline = time.monotonic() + PARK_S
        while not self.rt.get(agent.id).state.settled:
            if time.monotonic() > deadline:
                fail(f"{agent.path} did not settle while {held} was held")
            h.wait_activity(h.mark(), 0.05)
        return {i.id: i for i in self.rt.agents(include_closed=True)}

    @precondition(lambda self: len(self.live()) <= LIMITS.max_agents - 3)
    @rule(follow=st.booleans())
    def async_runner_closes_runtime(self, follow: bool) -> None:
        """An async runner closes the runtime from the event loop while a wait was just answered.

        A top-level ``alead`` awaits ``wait_async`` on its ``echo`` child (held
        on the latch); an ``aecho`` turn blocks the event loop; the child
        settles, so its completion is handed to the parent's wait, whose task
        cannot resume; then the blocker calls ``rt.shutdown()`` from the loop.
        The close interrupts the parent's turn, so whether or not its task
        received the completion, the completion goes back (the input rule):
        after the reopen it is pending for the parent, undelivered in the
        store (the store check); with ``follow`` the parent's next turn
        receives it, once.
        """
        TRACE.append("async_runner_closes_runtime")
        STATS["race:async_runner_closes_runtime"] += 1
        h, lt = self.harness, self.harness.latches
        h.open_gate()
        self.sync()
        lt.handover_parent = None
        for event in (
            lt.handover_waiting,
            lt.loop_held,
            lt.loop_free,
            lt.closed_by_runner,
            lt.latch,
        ):
            event.clear()
        lt.handover_armed.set()
        try:
            parent = self.rt.spawn("alead", HANDOVER_TASK)
            self.agents[parent.id] = Agent(id=parent.id, parent_id=None, info=parent)
            if not lt.handover_waiting.wait(PARK_S):
                fail("the async parent never reached its wait_async")
            child = next(i for i in self.rt.agents() if i.parent_path == parent.path)
            blocker = self.rt.spawn("aecho", LOOP_SHUTDOWN)
            self.agents[blocker.id] = Agent(id=blocker.id, parent_id=None, info=blocker)
            if not lt.loop_held.wait(PARK_S):
                fail("the blocker never held the event loop")
            # The child settles: its completion is handed to the parent's wait.
            before = self._release_latch_and_settle(child, "the loop")
        finally:
            lt.latch.set()
            lt.loop_free.set()  # the blocker closes the runtime from the loop
            lt.handover_armed.clear()
        if not lt.closed_by_runner.wait(PARK_S):
            fail("an async runner's rt.shutdown() did not return")
        self.rt.shutdown()  # returns once the store is released
        for info in before.values():
            if info.id not in self.agents:
                self.agents[info.id] = Agent(id=info.id, parent_id=self._parent_of(info), info=info)
        self.reopen_closed(before)  # checks the store: delivered exactly when a turn received it
        cid = f"{child.id}:1"
        if self.received_completions()[cid]:
            fail(f"{cid} counts as received by {parent.path}, whose turn the close interrupted")
        with h.cond:
            taken = any(cid in t.taken for t in h.turns.values() if t.agent_id == parent.id)
        STATS["handover_received" if taken else "handover_given_back"] += 1
        if not follow:
            return
        self.sync()
        if not self.agents[parent.id].info.state.settled:
            return
        info, error = self.call("follow_up", lambda: self.rt.follow_up(parent.id, "echo"))
        if error is not None:
            fail(f"follow_up of {parent.path} after the hand-over raised {error!r}")
        self.sync()
        if self.received_completions()[cid] != 1:
            fail(f"{parent.path}'s next turn did not receive {cid} (given back at the close)")

    @precondition(lambda self: len(self.live()) < LIMITS.max_agents)
    @rule(waiters=st.integers(1, 2), cancel=st.booleans())
    def host_loop_busy_at_close(self, waiters: int, cancel: bool) -> None:
        """The runtime closes while a host's ``wait_async`` was answered but its loop is busy.

        ``waiters`` host tasks wait on a fresh top-level agent held on the
        latch; the host's event loop then blocks; the agent settles, so its
        completion is handed to a wait whose task cannot resume; then another
        thread closes the runtime. The close takes the completion back: the
        wait it was handed to ends with ``RuntimeClosed`` (every task with
        ``CancelledError`` once ``cancel`` cancelled it; a second wait may have
        ended with ``NothingToWaitFor`` as the first was answered), the store
        has the completion undelivered, and the host receives it once after
        the reopen (``drain``).
        """
        TRACE.append(f"host_loop_busy_at_close(waiters={waiters}, cancel={cancel})")
        STATS["race:host_loop_busy_at_close"] += 1
        h, lt = self.harness, self.harness.latches
        h.open_gate()
        self.sync()
        lt.latch.clear()
        try:
            info = self.rt.spawn("echo", LATCH)
        except AgentLimitExceeded:
            lt.latch.set()
            return
        agent = Agent(id=info.id, parent_id=None, info=info)
        self.agents[info.id] = agent
        loop_busy, loop_free = threading.Event(), threading.Event()
        outcomes: list[object] = []

        async def host() -> None:
            tasks = [
                asyncio.ensure_future(self.rt.wait_async(info.id, timeout=PARK_S))
                for _ in range(waiters)
            ]
            await asyncio.sleep(0)  # every wait is submitted
            loop_busy.set()
            loop_free.wait(PARK_S)  # blocks this loop: no task resumes meanwhile
            if cancel:
                for task in tasks:
                    task.cancel()
            outcomes.extend(await asyncio.gather(*tasks, return_exceptions=True))

        loop = threading.Thread(target=asyncio.run, args=(host(),), name="host-loop")
        loop.start()
        try:
            if not loop_busy.wait(PARK_S):
                fail("the host's loop never submitted its waits")
            # The agent settles: its completion is handed to a blocked wait.
            before = self._release_latch_and_settle(info, "the host's loop")
            self.rt.shutdown()  # from this thread, while the host's loop is still blocked
        finally:
            lt.latch.set()
            loop_free.set()
        loop.join(PARK_S)
        if loop.is_alive():
            fail("the host's waits did not return after the close")
        # The wait handed the completion ends with RuntimeClosed; another may have
        # ended at once with NothingToWaitFor (the completion was handed over then).
        ended = asyncio.CancelledError if cancel else RuntimeClosed
        for outcome in outcomes:
            if not isinstance(outcome, ended) and (cancel or not nothing_left(outcome)):
                fail(
                    f"a host wait_async on {info.path} blocked through the close returned "
                    f"{outcome!r}; the close must take its completion back ({ended.__name__})"
                )
        if not any(isinstance(outcome, ended) for outcome in outcomes):
            fail(f"no host wait on {info.path} was handed its completion before the close")
        self.reopen_closed(before)  # the store check: the completion is undelivered
        if self.host_due(agent) != 1:
            fail(f"{info.path}'s completion is not due to the host after the reopen")

    @precondition(lambda self: len(self.live()) <= LIMITS.max_agents - 3)
    @rule(
        delay=st.sampled_from([0.0, 0.0002, 0.001, 0.003]),
        how=st.sampled_from(["interrupt", "interrupt_tree", "close_child"]),
        batch=st.booleans(),
    )
    def interrupt_racing_async_wait(self, delay: float, how: str, batch: bool) -> None:
        """The host interrupts an async parent just as its child settles into its ``wait_async``.

        With ``batch`` the parent runs ``run_many_async`` on two children: the
        first has settled, the race is on the second wait (the batch holds what
        it received until it returns, and an interrupt gives it all back).
        Whoever wins (the wait handing the completion to the task, or the
        cancel taking it back), each child's completion reaches exactly one
        turn of the parent: this one, a wake, or the follow-up the rule gives it.
        """
        TRACE.append(f"interrupt_racing_async_wait(delay={delay}, how={how}, batch={batch})")
        STATS["race:interrupt_racing_async_wait"] += 1
        h, lt = self.harness, self.harness.latches
        h.open_gate()
        self.sync()
        lt.handover_parent = None
        lt.handover_waiting.clear()
        lt.latch.clear()
        lt.handover_armed.set()  # the parent waits long (PARK_S): only the race ends it
        try:
            parent = self.rt.spawn("alead", BATCH_TASK if batch else HANDOVER_TASK)
            self.agents[parent.id] = Agent(id=parent.id, parent_id=None, info=parent)
            if not lt.handover_waiting.wait(PARK_S):
                fail("the async parent never reached its wait_async")
            if batch:  # the batch received the first child's completion; the latch holds the 2nd
                self._await_batch(parent)
        finally:
            lt.handover_armed.clear()
            lt.latch.set()  # the (last) child settles ...
        if delay:
            time.sleep(delay)  # ... and the interrupt comes a moment later (a race knob)
        if how == "close_child":  # the child closes under the wait instead
            ref = next(
                i.id for i in self.rt.agents() if i.parent_path == parent.path and i.task == LATCH
            )
            _, error = self.call("close", lambda: self.rt.close(ref))
        elif how == "interrupt":
            _, error = self.call(how, lambda: self.rt.interrupt(parent.id))
        else:
            _, error = self.call(how, lambda: self.rt.interrupt_tree(parent.id))
        if error is not None:
            fail(f"{how} racing {parent.path}'s wait_async raised {error!r}")
        self.sync()
        children = [a for a in self.agents.values() if a.parent_id == parent.id]
        cids = [f"{child.id}:1" for child in children]
        counts = self.received_completions()
        if len(children) != (2 if batch else 1) or any(counts[c] > 1 for c in cids):
            fail(f"{parent.path}'s children {cids} reached {[counts[c] for c in cids]} turns")
        if batch and counts[cids[0]] != counts[cids[1]]:
            fail(f"{parent.path}'s batch reached its runner in part: {[counts[c] for c in cids]}")
        received = all(counts[c] == 1 for c in cids)
        STATS["interrupt_race_received" if received else "interrupt_race_given_back"] += 1
        if received:
            return
        if not self.agents[parent.id].info.state.settled:
            fail(f"{parent.path} is {self.agents[parent.id].info.state} after the race")
        _, error = self.call("follow_up", lambda: self.rt.follow_up(parent.id, "echo"))
        if error is not None:
            fail(f"follow_up of {parent.path} after the race raised {error!r}")
        self.sync()
        counts = self.received_completions()
        if any(counts[c] != 1 for c in cids):
            fail(f"{cids} went back at the interrupt but {parent.path}'s next turn got {counts}")

    def _await_batch(self, parent: AgentInfo) -> None:
        """Block until the parent's batch has its first child settled and its second latched."""
        deadline = time.monotonic() + PARK_S
        while True:
            kids = [i for i in self.rt.agents() if i.parent_path == parent.path]
            first = [k for k in kids if k.task != LATCH and k.state.settled]
            held = [k for k in kids if k.task == LATCH and k.state is AgentState.RUNNING]
            if first and held:
                return
            if time.monotonic() > deadline:
                fail(f"{parent.path}'s batch never got going: {kids}")
            self.harness.wait_activity(self.harness.mark(), 0.05)
