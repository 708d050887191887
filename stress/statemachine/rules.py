"""The host's rules: spawn, send, follow-up, resume, interrupt, close, close-tree and wait."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    precondition,
    rule,
)

from retinue import AgentInfo
from retinue.errors import (
    ActiveDescendants,
    AgentBusy,
    AgentClosed,
    AgentLimitExceeded,
    AgentStateError,
    CompletionBacklogFull,
    DedupKeyTooLong,
    DepthLimitExceeded,
    DuplicateAgentPath,
    FanoutLimitExceeded,
    InvalidAgentPath,
    InvalidArgument,
    MailboxFull,
    MessageTooLarge,
    NothingToWaitFor,
    NotPermitted,
    UnknownProfile,
    WaitTimeout,
)
from retinue.protocol.messages import (
    AgentState,
)
from stress.statemachine.harness import (
    BUSY,
    CONTENTS,
    COORDINATORS,
    DEDUP_KEYS,
    HOST,
    HOSTILE_CONTENTS,
    HOSTILE_KEYS,
    HOSTILE_TASKS,
    INTERRUPT_ERRORS,
    KEY_MAX,
    LIMITS,
    MAX,
    NAMES,
    PROFILES,
    REF_FORMS,
    STATS,
    SUBAGENTS,
    TASKS,
    WAIT_TIMEOUTS,
    _hostile,
    _nbytes,
    _valid_name,
    fail,
)
from stress.statemachine.model import Agent, Expect, Model
from stress.statemachine.storecheck import _identity

# Idempotency keys the host uses: short ones, one over the bound, one it must refuse.
SPAWN_KEYS = ["i1", "i1", "i2", "k" * (KEY_MAX + 1), "i\ud800"]


class HostRules(Model):
    """One host thread calling the runtime; each call is judged against the model."""

    def sync(self) -> None:
        """Wait for quiescence and update the model (the machine provides it)."""
        raise NotImplementedError

    def reopen(self) -> None:
        """Close the runtime, check the store and open it again (the machine provides it)."""
        raise NotImplementedError

    def _spawn_expect(
        self, parent: Agent | None, profile: str, task: str, name: str | None, expect: Expect
    ) -> None:
        if profile not in SUBAGENTS:
            expect.add(UnknownProfile, f"no profile {profile!r}")
        if _hostile(task):
            expect.add(InvalidArgument, f"hostile task {task!r}")
        if _nbytes(task) > MAX:
            expect.add(MessageTooLarge, f"task of {_nbytes(task)} bytes")
        if name is not None and not _valid_name(name):
            expect.add(InvalidAgentPath, f"bad name {name!r}")
        if parent is not None:
            if parent.closed:
                expect.add(AgentClosed, f"parent {parent.info.path} is closed")
            if profile in SUBAGENTS and profile not in SUBAGENTS[parent.info.profile]:
                expect.add(NotPermitted, f"{parent.info.profile} may not spawn {profile}")
            if parent.info.depth + 1 > LIMITS.depth_cap:
                expect.add(DepthLimitExceeded, f"depth {parent.info.depth + 1}")
            if len(self.children(parent)) >= LIMITS.fanout_cap:
                expect.add(FanoutLimitExceeded, f"{parent.info.path} has full fan-out")
            in_tree = len(self.subtree(self.top(parent)))
            if in_tree >= LIMITS.max_tree_agents:
                expect.add(AgentLimitExceeded, f"tree of {self.top(parent).info.path} is full")
        parent_path = HOST if parent is None else parent.info.path
        if name is not None and _valid_name(name) and self.live_at(f"{parent_path}/{name}"):
            expect.add(DuplicateAgentPath, f"{parent_path}/{name} is live")
        if len(self.live()) >= LIMITS.max_agents:
            expect.add(AgentLimitExceeded, "max_agents live")

    def _spawned(self, info: AgentInfo, parent: Agent | None, profile: str, task: str) -> None:
        parent_path = HOST if parent is None else parent.info.path
        depth = 1 if parent is None else parent.info.depth + 1
        got = (info.parent_path, info.depth, info.profile, info.generation, info.task)
        if got != (parent_path, depth, profile, 1, task) or info.state not in BUSY:
            fail(f"spawn returned {info}; expected a starting agent under {parent_path}")
        if info.path != f"{parent_path}/{info.name}" or info.id in self.agents:
            fail(f"spawn returned a bad path or a reused id: {info}")
        self.agents[info.id] = Agent(
            id=info.id, parent_id=None if parent is None else parent.id, info=info
        )

    @initialize(
        profile=st.sampled_from(["boss", "lead", "mid", "alead"]), task=st.sampled_from(TASKS)
    )
    def first_agent(self, profile: str, task: str) -> None:
        """Start every example with one top-level coordinator."""
        self._spawn_top(profile, task, None, False)

    @rule(
        profile=st.sampled_from(PROFILES),
        task=st.sampled_from(TASKS + HOSTILE_TASKS),
        name=NAMES,
        explicit_root=st.booleans(),
        repeat=st.integers(1, 3),
    )
    def spawn_top(
        self, profile: str, task: str, name: str | None, explicit_root: bool, repeat: int
    ) -> None:
        """The host spawns top-level agents, one after the other."""
        for n in range(repeat):
            if n:
                self.sync()
            self._spawn_top(profile, task, name, explicit_root)

    def _spawn_top(self, profile: str, task: str, name: str | None, explicit_root: bool) -> None:
        expect = Expect()
        self._spawn_expect(None, profile, task, name, expect)
        kwargs: dict[str, Any] = {"name": name}
        if explicit_root:
            kwargs["parent"] = HOST
        info, error = self.call("spawn", lambda: self.rt.spawn(profile, task, **kwargs))
        if self.judge(f"spawn({profile!r}, {task!r}, name={name!r})", error, expect):
            self._spawned(info, None, profile, task)

    @precondition(lambda self: self.live())
    @rule(
        index=st.integers(0, 63),
        form=st.sampled_from(REF_FORMS),
        profile=st.sampled_from(PROFILES),
        task=st.sampled_from(TASKS + HOSTILE_TASKS),
        name=NAMES,
        repeat=st.integers(1, 4),
        obey=st.booleans(),
    )
    def spawn_under(
        self,
        index: int,
        form: str,
        profile: str,
        task: str,
        name: str | None,
        repeat: int,
        obey: bool,
    ) -> None:
        """The host spawns agents, one after the other, under a live, closed or missing agent.

        With ``obey`` the profile is one the parent may spawn (when it may spawn any).
        """
        for n in range(repeat):
            if n:
                self.sync()
            coordinators = [a for a in self.live() if a.info.profile in COORDINATORS]
            if obey and coordinators:  # a coordinator parent and a profile it may spawn
                parent = coordinators[-1 - index % len(coordinators)]
                allowed = SUBAGENTS[parent.info.profile]
                profile = allowed[(PROFILES.index(profile) + n) % len(allowed)]
                self._spawn_under(-1 - self.live().index(parent), "live", profile, task, name)
            else:
                self._spawn_under(index, form, profile, task, name)

    def _spawn_under(
        self, index: int, form: str, profile: str, task: str, name: str | None
    ) -> None:
        ref, parent, expect = self.ref(index, form)
        if parent is not None:
            self._spawn_expect(parent, profile, task, name, expect)
        op = f"spawn({profile!r}, {task!r}, name={name!r}, parent={ref!r})"
        info, error = self.call(
            "spawn", lambda: self.rt.spawn(profile, task, name=name, parent=ref)
        )
        if self.judge(op, error, expect):
            self._spawned(info, parent, profile, task)

    # -- rules: mailboxes --

    @precondition(lambda self: self.live())
    @rule(
        index=st.integers(0, 63),
        form=st.sampled_from(REF_FORMS),
        content=st.sampled_from(CONTENTS + HOSTILE_CONTENTS),
        key=st.sampled_from(DEDUP_KEYS + HOSTILE_KEYS),
        repeat=st.integers(1, 4),
    )
    def send(self, index: int, form: str, content: str, key: str | None, repeat: int) -> None:
        """The host messages an agent (repeatedly), sometimes with a used or over-long dedup key."""
        for n in range(repeat):
            if n:
                self.sync()
            self._send(index, form, content, key if n == 0 else None)

    def _send(self, index: int, form: str, content: str, key: str | None) -> None:
        ref, target, expect = self.ref(index, form)
        original = None if key is None else self.dedup.get(key)
        if _hostile(content) or (key is not None and _hostile(key)):
            expect.add(InvalidArgument, "hostile content or key")  # refused before the ref
            original = None
        if target is not None:
            if target.closed:
                expect.add(AgentClosed, f"{target.info.path} is closed")
            if _nbytes(content) > MAX:
                expect.add(MessageTooLarge, f"content of {_nbytes(content)} bytes")
            if key is not None and len(key) > KEY_MAX:
                expect.add(DedupKeyTooLong, f"key of {len(key)} characters")
            if original is None and len(self.unread(target)) >= LIMITS.mailbox_capacity:
                expect.add(MailboxFull, f"{target.info.path} has a full mailbox")
        op = f"send({ref!r}, {content[:8]!r}..., dedup_key={key!r})"
        message, error = self.call("send", lambda: self.rt.send(ref, content, dedup_key=key))
        if original is not None and error is None:
            if message != original:
                fail(f"{op} with a used dedup key returned {message}, not the original {original}")
            STATS["dedup_hits"] += 1
            return
        if not self.judge(op, error, expect):
            return
        assert target is not None
        if not (
            message.kind == "message"
            and message.recipient_id == target.id
            and message.content == content
            and message.sender == HOST
            and message.dedup_key == key
        ):
            fail(f"{op} returned {message}")
        every = {m.id for a in self.agents.values() for m in self.inbox(a)}
        if message.id in every:
            fail(f"{op} returned the id of another message: {message.id}")
        target.sent.append(message)
        if key is not None:
            self.dedup[key] = message
        if len(self.unread(target)) > LIMITS.mailbox_capacity:
            fail(f"{target.info.path} holds more than mailbox_capacity unread messages")

    # -- rules: turns --

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
        ) or info.state not in BUSY:
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
            if _nbytes(task) > MAX:
                expect.add(MessageTooLarge, f"task of {_nbytes(task)} bytes")
            if _hostile(task):
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

    @rule(
        top=st.booleans(),
        index=st.integers(0, 63),
        profile=st.sampled_from(PROFILES),
        task=st.sampled_from(TASKS + HOSTILE_TASKS),
        name=NAMES,
        key=st.sampled_from(SPAWN_KEYS),
        retries=st.integers(1, 3),
        reopen_between=st.booleans(),
    )
    def idempotent_spawn(
        self,
        top: bool,
        index: int,
        profile: str,
        task: str,
        name: str | None,
        key: str,
        retries: int,
        reopen_between: bool,
    ) -> None:
        """The host spawns with an idempotency key, and retries (also across a reopen).

        A spawn whose key its parent (the host for a top-level one) already
        used returns that agent as it is now (closed too) and makes nothing
        new, before any cap or name is checked; for another profile it is
        ``InvalidArgument``. A first use spawns as usual and records the key.
        """
        # Any known parent, closed ones too: a retry under a closed parent (by id) still
        # returns the original; a first use there is refused AgentClosed.
        parent = None if top or not self.agents else self.pick(index)
        for n in range(retries + 1):
            if n:
                self.sync()
                if reopen_between and n == 1:
                    self.reopen()  # from quiescence, as the reopen rule
            self._keyed_spawn(parent, profile, task, name, key)

    def _keyed_spawn(
        self, parent: Agent | None, profile: str, task: str, name: str | None, key: str
    ) -> None:
        expect = Expect()
        slot = (None if parent is None else parent.id, key)
        original_id = self.spawn_keys.get(slot) if not _hostile(key) else None
        if _hostile(key):
            expect.add(InvalidArgument, f"hostile key {key!r}")
        elif len(key) > KEY_MAX:
            expect.add(DedupKeyTooLong, f"key of {len(key)} characters")
        elif original_id is not None:
            original = self.agents[original_id]
            if original.info.profile != profile:
                expect.add(InvalidArgument, f"{key!r} spawned a {original.info.profile}")
        else:
            self._spawn_expect(parent, profile, task, name, expect)
        ref = HOST if parent is None else parent.id
        op = f"spawn({profile!r}, {task!r}, name={name!r}, parent={ref!r}, idempotency_key={key!r})"
        count = len(self.rt.agents(include_closed=True))
        info, error = self.call(
            "spawn",
            lambda: self.rt.spawn(profile, task, name=name, parent=ref, idempotency_key=key),
        )
        if original_id is not None and len(self.rt.agents(include_closed=True)) != count:
            fail(f"{op}: a retried spawn made a new agent")
        if not self.judge(op, error, expect):
            return
        if original_id is None:
            self._spawned(info, parent, profile, task)
            self.spawn_keys[slot] = info.id
            STATS["idempotent_first"] += 1
            return
        STATS["idempotent_retry"] += 1
        original = self.agents[original_id]
        self.sync()
        now = self.agents[original_id].info
        if info.id != original_id or _identity(info) != _identity(original.info):
            fail(f"{op} returned {info}, not the agent the key spawned: {original.info}")
        if info.generation > now.generation or info.created_at != now.created_at:
            fail(f"{op} returned {info}; the agent is now {now}")

    # -- rules: waiting --

    @precondition(lambda self: self.live())
    @rule(
        index=st.integers(0, 63),
        form=st.sampled_from(REF_FORMS),
        timeout=st.sampled_from(WAIT_TIMEOUTS),
        repeat=st.integers(1, 4),
    )
    def wait(self, index: int, form: str, timeout: float, repeat: int) -> None:
        """The host waits (with a tiny timeout) for an agent's next unreceived completions."""
        for n in range(repeat):
            if n:
                self.sync()
            if not self._wait_once(index, form, timeout):
                return

    def _wait_once(self, index: int, form: str, timeout: float) -> bool:
        ref, agent, expect = self.ref(index, form)
        due: int | None = None
        if agent is not None:
            due = self.host_due(agent)
            if due is None:
                if agent.closed:
                    expect.add(AgentClosed, f"{agent.info.path} is closed with nothing left")
                else:
                    expect.add(WaitTimeout, f"{agent.info.path} has nothing new")
                    if not agent.busy:  # unless a child's completion may still wake it
                        expect.add(NothingToWaitFor, f"{agent.info.path} is idle")
        op = f"wait({ref!r}, timeout={timeout})"
        done, error = self.call("wait", lambda: self.rt.wait(ref, timeout=timeout))
        if not self.judge(op, error, expect):
            return False
        assert agent is not None and due is not None
        self.host_received(agent, done, op, routed=self.heir(agent) is None)
        return True
