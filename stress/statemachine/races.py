"""The race rules: host waits that race each other, cancellation, close and the runtime's close.

Each rule starts from quiescence (nothing settles unless the rule makes it),
so the model can say exactly what the racing calls may return: each host
wait on an agent receives the agent's oldest completion the host has not
received, no two waits the same one, a cancelled ``wait_async`` receives
nothing (what it was handed is given back), and a close answers every wait it
races, with the completion it makes or ``AgentClosed``. The ledger
(``host_ledger``) counts every completion id the host's waits returned; the
``drain`` rule checks that every completion of every top-level agent was
received exactly once, before and after reopens, and that the host read
every message of its inbox exactly once.

Async turns race too: an interrupt, interrupt-tree or child close lands as
an ``alead`` turn's ``wait_async`` is answered, and an async runner closes
the runtime from the event loop while another turn's wait holds a completion
its task cannot resume to receive. A child's completion must reach exactly
one turn of its parent (that turn, a wake or the next follow-up), or stay
pending for it in the store: never both, never neither. The host's twin: the
runtime closes while a host's ``wait_async`` was answered but the host's own
loop is blocked; the close takes the completion back for a later wait.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from retinue import AgentInfo, AgentState, Completion, Message
from retinue.errors import (
    ActiveDescendants,
    AgentClosed,
    AgentLimitExceeded,
    RetinueError,
    RuntimeClosed,
    WaitTimeout,
)
from stress.statemachine.harness import (
    BATCH_TASK,
    HANDOVER_TASK,
    LATCH,
    LIMITS,
    LOOP_SHUTDOWN,
    PARK_S,
    SETTLED,
    SHUTDOWN,
    STATS,
    TRACE,
    fail,
)
from stress.statemachine.model import Agent, Model

RACE_TIMEOUTS = [0, 0.005]
NOTHING = (WaitTimeout, AgentClosed)


def _nothing_left(outcome: object) -> bool:
    """True for the errors a host wait with nothing to receive may end with."""
    return isinstance(outcome, NOTHING) or type(outcome).__name__ == "NothingToWaitFor"


def _blocked_in_wait(thread: threading.Thread) -> bool:
    """True once ``thread`` has submitted its wait and blocks on its answer (or has ended)."""
    if not thread.is_alive():
        return True
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if name.endswith(("/concurrent/futures/_base.py", "/retinue/actors/reply.py")):
            return True  # in a future's (or retinue's Reply's) result
        frame = frame.f_back
    return False


class RaceRules(Model):
    """Rules where host calls race each other, the supervisor and the runtime's close."""

    def sync(self) -> None:
        """Wait for quiescence and update the model (the machine provides it)."""
        raise NotImplementedError

    def _parent_of(self, info: AgentInfo) -> str | None:
        """Return the id of the agent ``info`` was spawned under (the machine provides it)."""
        raise NotImplementedError

    def reopen_closed(self, before: dict[str, AgentInfo]) -> None:
        """Check the closed store and open it again (the machine provides it)."""
        raise NotImplementedError

    def _book(
        self,
        results: list[tuple[Agent, Completion | BaseException]],
        where: str,
        routed: dict[str, bool],
        *,
        gave_back: bool = False,
    ) -> None:
        """Book racing waits' results in the order of the generations they got.

        Per agent, the completions must be its oldest unreceived ones, each
        once; a wait that got nothing ended with ``WaitTimeout``,
        ``AgentClosed`` or ``NothingToWaitFor``, and only when nothing was left.
        With ``gave_back`` (cancelled waits raced these) a completion may be
        any unreceived one, and a wait may have got nothing while one that a
        cancelled wait gave back was left: only "new, each once" holds.
        """
        by_agent: dict[str, list[Completion | BaseException]] = {}
        for agent, outcome in results:
            by_agent.setdefault(agent.id, []).append(outcome)
        for agent_id, outcomes in by_agent.items():
            agent = self.agents[agent_id]
            got = sorted(
                (o for o in outcomes if isinstance(o, Completion)), key=lambda c: c.generation
            )
            empty = [o for o in outcomes if not isinstance(o, Completion)]
            for exc in empty:
                if not _nothing_left(exc):
                    fail(f"{where}: a racing wait on {agent.info.path} raised {exc!r}")
            for done in got:
                self.host_received(
                    agent, done, where, routed=routed[agent_id], oldest=not gave_back
                )
            if empty and self.host_due(agent) is not None and not gave_back:
                fail(
                    f"{where}: a wait on {agent.info.path} got nothing while "
                    f"{agent.id}:{self.host_due(agent)} was there to receive"
                )

    @precondition(lambda self: self.live())
    @rule(
        picks=st.lists(st.integers(0, 63), min_size=2, max_size=5),
        timeout=st.sampled_from(RACE_TIMEOUTS),
    )
    def concurrent_waits(self, picks: list[int], timeout: float) -> None:
        """Host threads wait at once, several on the same agent (tiny timeouts)."""
        agents = list(self.agents.values())
        chosen = [agents[-1 - i % len(agents)] for i in picks]
        TRACE.append(f"concurrent_waits({[a.info.path for a in chosen]}, {timeout})")
        STATS["race:concurrent_waits"] += 1
        routed = {a.id: self.heir(a) is None for a in chosen}
        results: list[tuple[Agent, Completion | BaseException]] = []
        lock = threading.Lock()

        def wait_on(agent: Agent) -> None:
            try:
                outcome: Completion | BaseException = self.rt.wait(agent.id, timeout=timeout)
            except RetinueError as exc:
                outcome = exc
            except Exception as exc:
                outcome = exc
            with lock:
                results.append((agent, outcome))

        threads = [threading.Thread(target=wait_on, args=(a,)) for a in chosen]
        for t in threads:
            t.start()
        for t in threads:
            t.join(PARK_S)
        if len(results) != len(chosen):
            fail("concurrent host waits did not all return")
        self._book(results, "concurrent wait", routed)

    @precondition(lambda self: self.live())
    @rule(index=st.integers(0, 63), spins=st.integers(0, 6), timeout=st.sampled_from([0, 1]))
    def cancelled_wait_async(self, index: int, spins: int, timeout: float) -> None:
        """A ``wait_async`` task is cancelled after ``spins`` loop turns: nothing is lost.

        If it returned first, that is a receipt; if it was cancelled, whatever
        it was handed is given back, so the next wait receives it.
        """
        agents = list(self.agents.values())
        agent = agents[-1 - index % len(agents)]
        TRACE.append(f"cancelled_wait_async({agent.info.path}, spins={spins})")
        STATS["race:cancelled_wait_async"] += 1

        async def scenario() -> Completion | BaseException | None:
            task = asyncio.ensure_future(self.rt.wait_async(agent.id, timeout=timeout))
            for _ in range(spins):
                await asyncio.sleep(0)
            task.cancel()
            try:
                return await task
            except asyncio.CancelledError:
                STATS["race:cancelled"] += 1
                return None
            except RetinueError as exc:
                return exc

        outcome = asyncio.run(scenario())
        # A give-back is submitted once the handed-over answer is committed; two
        # round trips later the supervisor has taken it back.
        self.rt.get(agent.id)
        self.rt.get(agent.id)
        if outcome is None:
            if self.heir(agent) is None:
                agent.gave_back += 1
            return
        self._book([(agent, outcome)], "cancelled wait_async", {agent.id: self.heir(agent) is None})

    @precondition(lambda self: self.live())
    @rule(index=st.integers(0, 63), tree=st.booleans(), waiters=st.integers(1, 3))
    def close_racing_waits(self, index: int, tree: bool, waiters: int) -> None:
        """Host threads block in ``wait`` on an agent (and its subtree); then it is closed.

        Every wait returns: with a completion (the close makes one for a busy
        agent) or ``AgentClosed``; each completion once, the oldest first.
        """
        live = self.live()
        target = live[-1 - index % len(live)]
        if not tree and self.children(target):
            tree = True  # close would refuse (ActiveDescendants) and leave the waits blocked
        members = self.subtree(target)
        TRACE.append(f"close_racing_waits({target.info.path}, tree={tree}, waiters={waiters})")
        STATS["race:close_racing_waits"] += 1
        # A member's completion is routed to the host (and a receipt delivers it)
        # only for the subtree's root whose heir is the host.
        routed = {m.id: m is target and self.heir(target) is None for m in members}
        results: list[tuple[Agent, Completion | BaseException]] = []
        lock = threading.Lock()

        def wait_on(agent: Agent) -> None:
            try:
                outcome: Completion | BaseException = self.rt.wait(agent.id, timeout=PARK_S)
            except Exception as exc:
                outcome = exc
            with lock:
                results.append((agent, outcome))

        threads = [
            threading.Thread(target=wait_on, args=(m,)) for m in members for _ in range(waiters)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + PARK_S
        while not all(_blocked_in_wait(t) for t in threads):  # every wait is registered
            if time.monotonic() > deadline:
                fail("racing host waits never blocked")
            time.sleep(0.001)
        op = f"{'close_tree' if tree else 'close'}({target.info.path})"
        _, error = self.call(
            "close_tree" if tree else "close",
            (lambda: self.rt.close_tree(target.id)) if tree else (lambda: self.rt.close(target.id)),
        )
        if error is not None and not isinstance(error, ActiveDescendants):
            fail(f"{op} racing waits raised {error!r}")
        for t in threads:
            t.join(PARK_S)
        if any(t.is_alive() for t in threads):
            fail(f"{op}: host waits on the closed agents did not return")
        self.sync()
        self._book(results, f"wait racing {op}", routed)

    @precondition(lambda self: self.live())
    @rule(
        index=st.integers(0, 63),
        tree=st.booleans(),
        waiters=st.integers(1, 3),
        cancel=st.sampled_from(["none", "none", "first", "every_other"]),
    )
    def close_racing_async_waits(self, index: int, tree: bool, waiters: int, cancel: str) -> None:
        """``wait_async`` tasks wait on an agent (and its subtree); some are cancelled; it closes.

        The waits are submitted, then (``cancel``) some tasks are cancelled and
        the close is submitted before they can give up, so a cancelled wait
        may be answered and must give its completion back. Every other wait
        returns a completion or ``AgentClosed``; no completion twice, and what
        went back is received later (the ledger, at ``drain``).
        """
        live = self.live()
        target = live[-1 - index % len(live)]
        if not tree and self.children(target):
            tree = True
        members = self.subtree(target)
        TRACE.append(
            f"close_racing_async_waits({target.info.path}, tree={tree}, waiters={waiters}, "
            f"cancel={cancel})"
        )
        STATS["race:close_racing_async_waits"] += 1
        routed = {m.id: m is target and self.heir(target) is None for m in members}
        chosen = [m for m in members for _ in range(waiters)]

        async def scenario() -> list[Completion | BaseException]:
            tasks = [
                asyncio.ensure_future(self.rt.wait_async(m.id, timeout=PARK_S)) for m in chosen
            ]
            await asyncio.sleep(0)  # every wait is submitted
            for n, task in enumerate(tasks):
                if (cancel == "first" and n == 0) or (cancel == "every_other" and n % 2 == 0):
                    task.cancel()
            # Submitted before the cancelled tasks run again: the close may answer them first.
            if tree:
                await self.rt.close_tree_async(target.id)
            else:
                await self.rt.close_async(target.id)
            return list(await asyncio.gather(*tasks, return_exceptions=True))

        try:
            outcomes = asyncio.run(scenario())
        except RetinueError as exc:
            fail(f"close racing async waits on {target.info.path} raised {exc!r}")
        self.rt.agents()  # two round trips: give-backs submitted meanwhile are served
        self.rt.agents()
        self.sync()
        results: list[tuple[Agent, Completion | BaseException]] = []
        cancelled = 0
        for agent, outcome in zip(chosen, outcomes, strict=True):
            if isinstance(outcome, asyncio.CancelledError):
                cancelled += 1
                if routed[agent.id]:
                    agent.gave_back += 1
                continue
            results.append((agent, outcome))
        STATS["race:async_waits_cancelled"] += cancelled
        self._book(results, "wait_async racing a close", routed, gave_back=cancelled > 0)

    @precondition(lambda self: len(self.live()) < LIMITS.max_agents)
    @rule()
    def runner_closes_runtime(self) -> None:
        """A runner closes the runtime; the host's own close then returns with the store free."""
        TRACE.append("runner_closes_runtime")
        STATS["race:runner_closes_runtime"] += 1
        running = [a for a in self.live() if a.info.state is AgentState.RUNNING]
        if len(running) >= LIMITS.max_active_turns:  # gated turns hold every slot: free one
            self.harness.open_gate()
            self.sync()
        before = {i.id: i for i in self.rt.agents(include_closed=True)}
        self.harness.closed_by_runner.clear()
        self.harness.shutdown_armed.set()
        try:
            info = self.rt.spawn("echo", SHUTDOWN)
        except AgentLimitExceeded:
            self.harness.shutdown_armed.clear()
            return
        before[info.id] = info
        self.agents[info.id] = Agent(id=info.id, parent_id=None, info=info)
        if not self.harness.closed_by_runner.wait(PARK_S):
            fail("a runner's rt.shutdown() did not return")
        self.rt.shutdown()  # returns once the store is released
        self.reopen_closed(before)

    @rule()
    def drain(self) -> None:
        """The host receives everything left of every top-level agent: each id exactly once.

        Busy ones are waited for (the gate opens first), so afterwards every
        generation of every top-level agent has been received by the host,
        before or after reopens, once.
        """
        TRACE.append("drain")
        STATS["race:drain"] += 1
        self.harness.open_gate()
        self.sync()
        for agent in [a for a in self.agents.values() if a.parent_id is None]:
            while self.host_due(agent) is not None:
                done, error = self.call("wait", lambda a=agent: self.rt.wait(a.id, timeout=0))  # type: ignore[misc]
                if error is not None:
                    fail(f"drain: wait on {agent.info.path} raised {error!r} with work left")
                self.host_received(agent, done, "drain", routed=True)
            want = {f"{agent.id}:{g}" for g in self.completed_generations(agent)}
            got = {cid for cid in self.host_ledger if cid.rsplit(":", 1)[0] == agent.id}
            if want != got:
                fail(f"drain: {agent.info.path} received {sorted(got)}, made {sorted(want)}")
        messages, error = self.call("messages", lambda: self.rt.messages(timeout=0))
        if error is not None:
            fail(f"drain: messages() raised {error!r}")
        self.host_read(messages, "drain: messages()")
        sent = {m.id for m in self.host_inbox()}
        ledger = self.host_inbox_ledger
        if set(ledger) != sent or any(n != 1 for n in ledger.values()):
            fail(f"drain: the host read {dict(ledger)}; agents sent it {sorted(sent)}")

    # -- the host's inbox ---------------------------------------------------------------

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

            def read() -> None:
                try:
                    got.append(self.rt.messages(timeout=PARK_S))
                except Exception as exc:
                    got.append(exc)

            reader = threading.Thread(target=read)
            reader.start()
            deadline = time.monotonic() + PARK_S
            while not _blocked_in_wait(reader):
                if time.monotonic() > deadline:
                    fail("the host's inbox read never blocked")
                time.sleep(0.001)
            spawned.append(self.rt.spawn(profile, "tell2"))
            reader.join(PARK_S)
            if reader.is_alive():
                fail("a blocked inbox read was not answered by a top-level agent's message")
        info = spawned[0]
        self.agents[info.id] = Agent(id=info.id, parent_id=None, info=info)
        self.sync()
        if not got or isinstance(got[0], BaseException):
            fail(f"host_inbox_wait: the read ended with {got}")
        if len(got[0]) != 1 or got[0][0].sender_id != info.id:
            fail(f"host_inbox_wait: the read returned {got[0]}, not the one message of {info.path}")
        self.host_read(got[0], "a blocked inbox read")

    # -- an async runner closes the runtime while a wait holds an unseen completion -------

    def _release_latch_and_settle(self, agent: AgentInfo, held: str) -> dict[str, AgentInfo]:
        """Let ``agent``'s latched turn go and wait until it settles while ``held`` stays blocked.

        Returns every agent as it is then (what the close that follows is checked against).
        """
        h = self.harness
        h.latch.set()
        deadline = time.monotonic() + PARK_S
        while self.rt.get(agent.id).state not in SETTLED:
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
        After the reopen the child's completion is either received by exactly
        one turn or pending for the parent, never both, never neither (the
        store check); with ``follow`` the parent's next turn receives a pending
        one, once.
        """
        TRACE.append("async_runner_closes_runtime")
        STATS["race:async_runner_closes_runtime"] += 1
        h = self.harness
        h.open_gate()
        self.sync()
        h.handover_parent = None
        for event in (h.handover_waiting, h.loop_held, h.loop_free, h.closed_by_runner, h.latch):
            event.clear()
        h.handover_armed.set()
        try:
            parent = self.rt.spawn("alead", HANDOVER_TASK)
            self.agents[parent.id] = Agent(id=parent.id, parent_id=None, info=parent)
            if not h.handover_waiting.wait(PARK_S):
                fail("the async parent never reached its wait_async")
            child = next(i for i in self.rt.agents() if i.parent_path == parent.path)
            blocker = self.rt.spawn("aecho", LOOP_SHUTDOWN)
            self.agents[blocker.id] = Agent(id=blocker.id, parent_id=None, info=blocker)
            if not h.loop_held.wait(PARK_S):
                fail("the blocker never held the event loop")
            # The child settles: its completion is handed to the parent's wait.
            before = self._release_latch_and_settle(child, "the loop")
        finally:
            h.latch.set()
            h.loop_free.set()  # the blocker closes the runtime from the loop
            h.handover_armed.clear()
        if not h.closed_by_runner.wait(PARK_S):
            fail("an async runner's rt.shutdown() did not return")
        self.rt.shutdown()  # returns once the store is released
        for info in before.values():
            if info.id not in self.agents:
                self.agents[info.id] = Agent(id=info.id, parent_id=self._parent_of(info), info=info)
        self.reopen_closed(before)  # checks the store: delivered exactly when a turn received it
        cid = f"{child.id}:1"
        received = self.harness.delivered_completions()[cid]
        STATS["handover_received" if received else "handover_given_back"] += 1
        if not follow:
            return
        self.sync()
        if self.agents[parent.id].info.state not in SETTLED or received:
            return
        info, error = self.call("follow_up", lambda: self.rt.follow_up(parent.id, "echo"))
        if error is not None:
            fail(f"follow_up of {parent.path} after the hand-over raised {error!r}")
        self.sync()
        if self.harness.delivered_completions()[cid] != 1:
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
        h = self.harness
        h.open_gate()
        self.sync()
        h.latch.clear()
        try:
            info = self.rt.spawn("echo", LATCH)
        except AgentLimitExceeded:
            h.latch.set()
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
            h.latch.set()
            loop_free.set()
        loop.join(PARK_S)
        if loop.is_alive():
            fail("the host's waits did not return after the close")
        # The wait handed the completion ends with RuntimeClosed; another may have
        # ended at once with NothingToWaitFor (the completion was handed over then).
        ended = asyncio.CancelledError if cancel else RuntimeClosed
        for outcome in outcomes:
            if not isinstance(outcome, ended) and (cancel or not _nothing_left(outcome)):
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
        h = self.harness
        h.open_gate()
        self.sync()
        h.handover_parent = None
        h.handover_waiting.clear()
        h.latch.clear()
        h.handover_armed.set()  # the parent waits long (PARK_S): only the race ends it
        try:
            parent = self.rt.spawn("alead", BATCH_TASK if batch else HANDOVER_TASK)
            self.agents[parent.id] = Agent(id=parent.id, parent_id=None, info=parent)
            if not h.handover_waiting.wait(PARK_S):
                fail("the async parent never reached its wait_async")
            if batch:  # the batch received the first child's completion; the latch holds the 2nd
                self._await_batch(parent)
        finally:
            h.handover_armed.clear()
            h.latch.set()  # the (last) child settles ...
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
        counts = self.harness.delivered_completions()
        if len(children) != (2 if batch else 1) or any(counts[c] > 1 for c in cids):
            fail(f"{parent.path}'s children {cids} reached {[counts[c] for c in cids]} turns")
        if batch and counts[cids[0]] != counts[cids[1]]:
            fail(f"{parent.path}'s batch reached its runner in part: {[counts[c] for c in cids]}")
        received = all(counts[c] == 1 for c in cids)
        STATS["interrupt_race_received" if received else "interrupt_race_given_back"] += 1
        if received:
            return
        if self.agents[parent.id].info.state not in SETTLED:
            fail(f"{parent.path} is {self.agents[parent.id].info.state} after the race")
        _, error = self.call("follow_up", lambda: self.rt.follow_up(parent.id, "echo"))
        if error is not None:
            fail(f"follow_up of {parent.path} after the race raised {error!r}")
        self.sync()
        counts = self.harness.delivered_completions()
        if any(counts[c] != 1 for c in cids):
            fail(f"{cids} went back at the interrupt but {parent.path}'s next turn got {counts}")

    def _await_batch(self, parent: AgentInfo) -> None:
        """Block until the parent's batch has its first child settled and its second latched."""
        deadline = time.monotonic() + PARK_S
        while True:
            kids = [i for i in self.rt.agents() if i.parent_path == parent.path]
            first = [k for k in kids if k.task != LATCH and k.state in SETTLED]
            held = [k for k in kids if k.task == LATCH and k.state is AgentState.RUNNING]
            if first and held:
                return
            if time.monotonic() > deadline:
                fail(f"{parent.path}'s batch never got going: {kids}")
            self.harness.wait_activity(self.harness.mark(), 0.05)

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
        with self.harness._cond:
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
        with self.harness._cond:
            refused = self.harness.host_full - refused_before
        if (arrived, refused) != (min(count, room), count - min(count, room)):
            fail(
                f"flood_host_inbox: {count} sends with room for {room}: {arrived} arrived, "
                f"{refused} refused MailboxFull"
            )
