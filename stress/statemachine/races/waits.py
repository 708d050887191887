"""Host waits that race each other, cancellation and a close of the agents they wait on.

Each rule starts from quiescence (nothing settles unless the rule makes it),
so the model can say exactly what the racing calls may return: each host
wait on an agent receives the agent's oldest completion the host has not
received, no two waits the same one, a cancelled ``wait_async`` receives
nothing (what it was handed is given back), and a close answers every wait it
races, with the completion it makes or ``AgentClosed``.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from retinue import Completion
from retinue.errors import ActiveDescendants, RetinueError
from stress.statemachine.data import PARK_S
from stress.statemachine.latches import HostCall
from stress.statemachine.model import Agent, Model, nothing_left
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["RACE_TIMEOUTS", "WaitRaces"]

RACE_TIMEOUTS = [0, 0.005]


class WaitRaces(Model):
    """Rules where host waits race each other, their cancellation and a close."""

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
                if not nothing_left(exc):
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
        calls = [
            (m, HostCall(functools.partial(self.rt.wait, m.id, timeout=PARK_S)))
            for m in members
            for _ in range(waiters)
        ]
        for _, call in calls:
            call.start()
        deadline = time.monotonic() + PARK_S
        for _, call in calls:  # every wait is registered: it waits for its answer (or ended)
            if not call.waiting.wait(max(0.0, deadline - time.monotonic())):
                fail("racing host waits never blocked")
        op = f"{'close_tree' if tree else 'close'}({target.info.path})"
        _, error = self.call(
            "close_tree" if tree else "close",
            (lambda: self.rt.close_tree(target.id)) if tree else (lambda: self.rt.close(target.id)),
        )
        if error is not None and not isinstance(error, ActiveDescendants):
            fail(f"{op} racing waits raised {error!r}")
        for _, call in calls:
            call.join(PARK_S)
        if any(call.is_alive() for _, call in calls):
            fail(f"{op}: host waits on the closed agents did not return")
        self.sync()
        results = [(m, call.outcome) for m, call in calls if call.outcome is not None]
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
