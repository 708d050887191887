"""The host's calls on an agent's turns and life: follow-up, resume, interrupt, close, close-tree.

``interrupt_tree`` interrupts a subtree leaves first: one completion per busy
member, no member woken by another's.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from retinue import AgentInfo
from retinue.errors import (
    ActiveDescendants,
    AgentBusy,
    AgentClosed,
    AgentStateError,
    CompletionBacklogFull,
    InvalidArgument,
    MessageTooLarge,
)
from retinue.protocol.messages import AgentState
from stress.statemachine.data import (
    HOSTILE_TASKS,
    INTERRUPT_ERRORS,
    LIMITS,
    MAX,
    REF_FORMS,
    TASKS,
    hostile,
    nbytes,
)
from stress.statemachine.model import Agent, Expect, Model
from stress.statemachine.trace import STATS, fail

__all__ = ["TurnRules"]


class TurnRules(Model):
    """The host drives agents' turns and closes them; each call is judged against the model."""

    def _turn_expect(self, agent: Agent, expect: Expect) -> None:
        if agent.closed:
            expect.add(AgentClosed, f"{agent.info.path} is closed")
        if agent.busy:
            expect.add(AgentBusy, f"{agent.info.path} is {agent.info.state}")
        backlog = len(self.undelivered(agent))
        if backlog >= LIMITS.pending_completions_per_agent:
            expect.add(CompletionBacklogFull, f"{agent.info.path} has {backlog} unreceived")

    def _queued(self, op: str, info: AgentInfo, agent: Agent, task: str) -> None:
        before = agent.info
        if (info.id, info.generation, info.task) != (
            before.id,
            before.generation + 1,
            task,
        ) or not info.state.has_turn:
            fail(f"{op} returned {info}; expected generation {before.generation + 1} queued")

    @precondition(lambda self: self.live())
    @rule(
        index=st.integers(0, 63),
        form=st.sampled_from(REF_FORMS),
        task=st.sampled_from(TASKS + HOSTILE_TASKS),
        repeat=st.integers(1, 4),
    )
    def follow_up(self, index: int, form: str, task: str, repeat: int) -> None:
        """The host gives an agent follow-up turns, one after the other."""
        for n in range(repeat):
            if n:
                self.sync()
            self._follow_up(index, form, task)

    def _follow_up(self, index: int, form: str, task: str) -> None:
        ref, agent, expect = self.ref(index, form)
        if agent is not None:
            self._turn_expect(agent, expect)
            if nbytes(task) > MAX:
                expect.add(MessageTooLarge, f"task of {nbytes(task)} bytes")
            if hostile(task):
                expect.add(InvalidArgument, f"hostile task {task!r}")
        op = f"follow_up({ref!r}, {task!r})"
        info, error = self.call("follow_up", lambda: self.rt.follow_up(ref, task))
        if self.judge(op, error, expect):
            assert agent is not None
            self._queued(op, info, agent, task)

    @precondition(lambda self: self.live())
    @rule(index=st.integers(0, 63), form=st.sampled_from(REF_FORMS))
    def resume(self, index: int, form: str) -> None:
        """The host re-runs an interrupted agent's task."""
        ref, agent, expect = self.ref(index, form)
        if agent is not None:
            self._turn_expect(agent, expect)
            if agent.info.state is not AgentState.INTERRUPTED and not agent.closed:
                expect.add(AgentStateError, f"{agent.info.path} is {agent.info.state}")
        op = f"resume({ref!r})"
        info, error = self.call("resume", lambda: self.rt.resume(ref))
        if self.judge(op, error, expect):
            assert agent is not None
            self._queued(op, info, agent, agent.info.task)

    @precondition(lambda self: self.live())
    @rule(index=st.integers(0, 63), form=st.sampled_from(REF_FORMS))
    def interrupt(self, index: int, form: str) -> None:
        """The host interrupts an agent (queued, running, idle or closed)."""
        ref, agent, expect = self.ref(index, form)
        if agent is not None and agent.closed:
            expect.add(AgentClosed, f"{agent.info.path} is closed")
        op = f"interrupt({ref!r})"
        info, error = self.call("interrupt", lambda: self.rt.interrupt(ref))
        if not self.judge(op, error, expect):
            return
        assert agent is not None
        before = agent.info
        state = AgentState.INTERRUPTED if agent.busy else before.state
        if agent.busy:
            STATS[f"interrupted_{before.state}"] += 1
        if (info.id, info.generation, info.state) != (before.id, before.generation, state):
            fail(f"{op} returned {info}; before it was {before.state} at {before.generation}")
        if agent.busy and (info.output is not None or info.error not in INTERRUPT_ERRORS):
            fail(f"{op}: an interrupted turn kept an output or lacks its error: {info}")

    @precondition(lambda self: self.live())
    @rule(index=st.integers(0, 63), form=st.sampled_from(REF_FORMS))
    def close(self, index: int, form: str) -> None:
        """The host closes an agent."""
        ref, agent, expect = self.ref(index, form)
        if agent is not None:
            if agent.closed:
                expect.add(AgentClosed, f"{agent.info.path} is closed")
            elif self.children(agent):
                expect.add(ActiveDescendants, f"{agent.info.path} has live children")
        op = f"close({ref!r})"
        info, error = self.call("close", lambda: self.rt.close(ref))
        if self.judge(op, error, expect):
            assert agent is not None
            if agent.busy:
                STATS["closed_busy"] += 1
            if (info.id, info.state, info.generation) != (
                agent.id,
                AgentState.CLOSED,
                agent.info.generation,
            ):
                fail(f"{op} returned {info}")

    @precondition(lambda self: self.live())
    @rule(index=st.integers(0, 63), form=st.sampled_from(REF_FORMS))
    def close_tree(self, index: int, form: str) -> None:
        """The host closes a whole subtree."""
        ref, agent, expect = self.ref(index, form)
        if agent is not None and agent.closed:
            expect.add(AgentClosed, f"{agent.info.path} is closed")
        subtree = [] if agent is None or agent.closed else self.subtree(agent)
        op = f"close_tree({ref!r})"
        infos, error = self.call("close_tree", lambda: self.rt.close_tree(ref))
        if not self.judge(op, error, expect):
            return
        order = [i.id for i in infos]
        if sorted(order) != sorted(a.id for a in subtree) or len(set(order)) != len(order):
            fail(f"{op} closed {order}; the live subtree is {[a.id for a in subtree]}")
        if any(i.state is not AgentState.CLOSED for i in infos):
            fail(f"{op} returned agents that are not closed: {infos}")
        position = {agent_id: n for n, agent_id in enumerate(order)}
        for member in subtree:
            if member.parent_id in position and position[member.parent_id] < position[member.id]:
                fail(f"{op} closed a parent before its child {member.info.path}")

    @precondition(lambda self: self.live())
    @rule(index=st.integers(0, 63), form=st.sampled_from(REF_FORMS), up=st.integers(0, 3))
    def interrupt_tree(self, index: int, form: str, up: int) -> None:
        """The host interrupts a subtree: leaves first, each busy member settles once.

        Returns every live member once, a child before its parent; busy ones
        come back ``interrupted`` at the same generation (with the queued or
        running error), idle ones as they were. Once quiet, each busy member
        settled exactly once (one ``TurnSettled``, so one completion), and no
        member was woken by another's interrupted completion.
        """
        ref, agent, expect = self.ref(index, form)
        if agent is not None and not agent.closed and form in ("live", "busy", "id"):
            for _ in range(up):  # from a (busy) agent up to an ancestor: a subtree around it
                if agent.parent_id is None or self.agents[agent.parent_id].closed:
                    break
                agent = self.agents[agent.parent_id]
                ref = agent.id
        if agent is not None and agent.closed:
            expect.add(AgentClosed, f"{agent.info.path} is closed")
        members = [] if agent is None or agent.closed else self.subtree(agent)
        op = f"interrupt_tree({ref!r})"
        infos, error = self.call("interrupt_tree", lambda: self.rt.interrupt_tree(ref))
        if not self.judge(op, error, expect):
            return
        STATS["interrupt_tree"] += 1
        order = [i.id for i in infos]
        if sorted(order) != sorted(m.id for m in members) or len(set(order)) != len(order):
            fail(f"{op} returned {order}; the live subtree is {[m.id for m in members]}")
        position = {agent_id: n for n, agent_id in enumerate(order)}
        for member in members:
            if member.parent_id in position and position[member.parent_id] < position[member.id]:
                fail(f"{op} returned a parent before its child {member.info.path}")
        got = {i.id: i for i in infos}
        busy = [m for m in members if m.busy]
        for member in members:
            info, before = got[member.id], member.info
            want = AgentState.INTERRUPTED if member.busy else before.state
            if (info.generation, info.state) != (before.generation, want):
                fail(f"{op}: {before.path} was {before.state} at {before.generation}, now {info}")
            if member.busy and (info.output is not None or info.error not in INTERRUPT_ERRORS):
                fail(f"{op}: {before.path} kept an output or lacks its error: {info}")
        STATS["interrupt_tree_busy"] += len(busy)
        inside = {m.id for m in members}
        for member in busy:  # their completions wake no member (the parent finds them later)
            if self.heir(member) in inside:
                self.quiet.add(f"{member.id}:{got[member.id].generation}")
        self.sync()
        for member in members:
            if member.info.generation != got[member.id].generation:
                fail(f"{op}: {member.info.path} was woken by a member's interrupted completion")
        for member in busy:
            key = (member.id, got[member.id].generation)
            if not self.harness.wait_settled_event(key, 5.0):
                fail(f"{op}: {member.info.path} settled {self.harness.settled_events[key]} times")
