"""The host's spawns: at the top, under any agent, with an idempotency key (retried), and
runs (``rt.run``: a top-level spawn and the host's wait on it in one command).

Valid and invalid names, permitted, not permitted and unknown profiles,
oversized and hostile tasks; a keyed spawn retried returns the agent the key
spawned (across a reopen too, under a closed parent too), never a second.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from retinue import AgentInfo
from retinue.errors import (
    AgentClosed,
    AgentLimitExceeded,
    DedupKeyTooLong,
    DepthLimitExceeded,
    DuplicateAgentPath,
    FanoutLimitExceeded,
    InvalidAgentPath,
    InvalidArgument,
    MessageTooLarge,
    NothingToWaitFor,
    NotPermitted,
    RetinueError,
    UnknownProfile,
    WaitTimeout,
)
from stress.statemachine.data import (
    COORDINATORS,
    HOST,
    HOSTILE_TASKS,
    KEY_MAX,
    LIMITS,
    MAX,
    NAMES,
    PROFILES,
    REF_FORMS,
    SUBAGENTS,
    TASKS,
    WAIT_TIMEOUTS,
    hostile,
    nbytes,
    valid_name,
)
from stress.statemachine.model import Agent, Expect, Model
from stress.statemachine.storecheck import identity
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["SPAWN_KEYS", "SpawnRules"]

# Idempotency keys the host uses: short ones, one over the bound, one it must refuse.
SPAWN_KEYS = ["i1", "i1", "i2", "k" * (KEY_MAX + 1), "i\ud800"]


class SpawnRules(Model):
    """The host spawns agents; each spawn is judged against the model."""

    def _spawn_expect(
        self, parent: Agent | None, profile: str, task: str, name: str | None, expect: Expect
    ) -> None:
        if profile not in SUBAGENTS:
            expect.add(UnknownProfile, f"no profile {profile!r}")
        if hostile(task):
            expect.add(InvalidArgument, f"hostile task {task!r}")
        if nbytes(task) > MAX:
            expect.add(MessageTooLarge, f"task of {nbytes(task)} bytes")
        if name is not None and not valid_name(name):
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
        if name is not None and valid_name(name) and self.live_at(f"{parent_path}/{name}"):
            expect.add(DuplicateAgentPath, f"{parent_path}/{name} is live")
        if len(self.live()) >= LIMITS.max_agents:
            expect.add(AgentLimitExceeded, "max_agents live")

    def _spawned(self, info: AgentInfo, parent: Agent | None, profile: str, task: str) -> None:
        parent_path = HOST if parent is None else parent.info.path
        depth = 1 if parent is None else parent.info.depth + 1
        got = (info.parent_path, info.depth, info.profile, info.generation, info.task)
        if got != (parent_path, depth, profile, 1, task) or not info.state.has_turn:
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
        original_id = self.spawn_keys.get(slot) if not hostile(key) else None
        if hostile(key):
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
        if info.id != original_id or identity(info) != identity(original.info):
            fail(f"{op} returned {info}, not the agent the key spawned: {original.info}")
        if info.generation > now.generation or info.created_at != now.created_at:
            fail(f"{op} returned {info}; the agent is now {now}")

    @precondition(lambda self: len(self.live()) < LIMITS.max_agents // 2)
    @rule(
        profile=st.sampled_from(PROFILES),
        task=st.sampled_from(TASKS + HOSTILE_TASKS),
        name=NAMES,
        timeout=st.sampled_from(WAIT_TIMEOUTS),
        key=st.sampled_from([None, *SPAWN_KEYS]),
        retries=st.integers(0, 2),
    )
    def run(
        self,
        profile: str,
        task: str,
        name: str | None,
        timeout: float,
        key: str | None,
        retries: int,
    ) -> None:
        """The host runs a top-level agent: a spawn and a wait on it in one call, retried
        with its idempotency key.

        A spawn the model refuses raises as ``spawn`` would and makes nothing;
        otherwise the call returns the agent's first completion (the host's
        first receipt of it) or ends ``WaitTimeout`` naming the new agent, which
        keeps running, as a wait with that tiny timeout would. A retry with a key
        used before waits on the agent the key spawned, as a wait on it would
        end. Only while half of ``max_agents`` is free: runs leave their agents
        live, and the keyed spawns' retries need room for their first spawns
        (the caps' refusals are the spawn rules').
        """
        for n in range(retries + 1):
            if n:
                self.sync()
            self._run_once(profile, task, name, timeout, key)

    def _run_once(
        self, profile: str, task: str, name: str | None, timeout: float, key: str | None
    ) -> None:
        expect = Expect()
        original_id: str | None = None
        if key is not None and hostile(key):
            expect.add(InvalidArgument, f"hostile key {key!r}")
        elif key is not None and len(key) > KEY_MAX:
            expect.add(DedupKeyTooLong, f"key of {len(key)} characters")
        else:
            original_id = None if key is None else self.spawn_keys.get((None, key))
            if original_id is None:
                self._spawn_expect(None, profile, task, name, expect)
            elif self.agents[original_id].info.profile != profile:
                expect.add(InvalidArgument, f"{key!r} spawned another profile")
            else:  # the retry waits on the original, as a wait would end
                original = self.agents[original_id]
                if self.host_due(original) is None:
                    if original.closed:
                        expect.add(AgentClosed, f"{original.info.path} is closed")
                    else:
                        expect.add(WaitTimeout, f"{original.info.path} has nothing new")
                        if not original.busy:
                            expect.add(NothingToWaitFor, f"{original.info.path} is idle")
        op = f"run({profile!r}, {task!r}, name={name!r}, timeout={timeout}, key={key!r})"
        done, error = self.call(
            "run",
            lambda: self.rt.run(profile, task, name=name, timeout=timeout, idempotency_key=key),
        )
        if original_id is not None and self.agents[original_id].info.profile == profile:
            self._run_retried(op, self.agents[original_id], done, error, expect)
            return
        if isinstance(error, WaitTimeout) and not expect.errors:
            TRACE.append(f"{op} -> WaitTimeout")
            path = error.path
            STATS["run_timed_out"] += 1
        elif not self.judge(op, error, expect):
            return
        else:
            path = done.path
            STATS["run_completed"] += 1
        if path is None or not path.startswith(f"{HOST}/"):
            fail(f"{op} named no top-level agent: {path!r}")
            return
        info = self.rt.get(path)
        if (info.parent_path, info.profile, info.task) != (HOST, profile, task):
            fail(f"{op} spawned {info}")
        if info.id in self.agents or info.generation < 1:
            fail(f"{op} named an agent the model knows, not a new one: {info}")
        self.agents[info.id] = Agent(id=info.id, parent_id=None, info=info)
        if key is not None:
            self.spawn_keys[None, key] = info.id
        self.sync()
        if done is not None:
            agent = self.agents[info.id]
            if done.generation != 1:
                fail(f"{op} returned {done.id}, not the agent's first completion")
            self.host_received(agent, done, op, routed=True)

    def _run_retried(
        self,
        op: str,
        original: Agent,
        done: Any,
        error: RetinueError | None,
        expect: Expect,
    ) -> None:
        """A keyed run retried: it waited on the agent the key spawned, nothing new."""
        path = getattr(error, "path", None)
        if error is not None and path is not None and path != original.info.path:
            fail(f"{op} ended {error!r} about {path}, not the key's agent {original.info.path}")
        STATS["idempotent_retry"] += 1
        if self.judge(op, error, expect):
            self.host_received(original, done, op, routed=self.heir(original) is None)
