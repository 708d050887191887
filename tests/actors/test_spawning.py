"""Spawning, trees built by Python runners, the caps at their exact limits, and open checks."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import OpenRuntime, act, wait_settled, wait_until

from retinue import (
    AgentBusy,
    AgentClosed,
    AgentLimitExceeded,
    AgentState,
    Completion,
    CompletionStatus,
    ConfigurationError,
    DelegationCycleError,
    DelegationDepthError,
    DepthLimitExceeded,
    DuplicateAgentPath,
    FanoutLimitExceeded,
    InvalidAgentPath,
    Limits,
    NotPermitted,
    Profile,
    Restart,
    RetinueError,
    Runtime,
    Turn,
    UnknownAgent,
    UnknownProfile,
    validate_graph,
)
from retinue.actors.supervisor import _scheduler
from retinue.actors.supervisor._world import info_of, spawned_info
from retinue.protocol.messages import AgentInfo
from retinue.protocol.records import AgentRecord
from retinue.protocol.usage import Usage
from retinue.testing import Gate, echo


def tree_profiles(lead: object, mid: object, leaf: object = echo) -> list[Profile]:
    """Return lead -> mid -> leaf profiles with the given runners."""
    return [
        Profile("lead", subagents=["mid"], runner=lead),  # type: ignore[arg-type]
        Profile("mid", subagents=["leaf"], runner=mid),  # type: ignore[arg-type]
        Profile("leaf", runner=leaf),  # type: ignore[arg-type]
    ]


# -- trees ---------------------------------------------------------------------------


def test_three_level_tree_built_with_run_and_run_many(open_runtime: OpenRuntime) -> None:
    def leaf(turn: Turn) -> str:
        return f"leaf:{turn.task}"

    def mid(turn: Turn) -> str:
        results = turn.run_many([("leaf", f"{turn.task}.1"), ("leaf", f"{turn.task}.2")], 5)
        assert all(isinstance(r, Completion) for r in results), results
        return "+".join(str(r.output) for r in results if isinstance(r, Completion))

    def lead(turn: Turn) -> str:
        first = turn.run("mid", "m1", name="first", timeout=5)
        second = turn.run("mid", "m2", name="second", timeout=5)
        return f"{first.output}|{second.output}"

    rt = open_runtime(tree_profiles(lead, mid, leaf))
    top = rt.spawn("lead", "go", name="top")
    done = rt.wait(top.id, timeout=10)

    assert done.status is CompletionStatus.COMPLETED
    assert done.output == "leaf:m1.1+leaf:m1.2|leaf:m2.1+leaf:m2.2"
    agents = rt.agents()
    assert len(agents) == 7
    by_path = {a.path: a for a in agents}
    assert by_path["/root/top"].depth == 1
    assert by_path["/root/top"].parent_path == "/root"
    for name, task in (("first", "m1"), ("second", "m2")):
        mid_info = by_path[f"/root/top/{name}"]
        assert (mid_info.depth, mid_info.profile, mid_info.parent_path) == (2, "mid", "/root/top")
        leaves = [a for a in agents if a.parent_path == mid_info.path]
        assert len(leaves) == 2
        assert all(a.depth == 3 and a.profile == "leaf" for a in leaves)
        assert sorted(str(a.output) for a in leaves) == [f"leaf:{task}.1", f"leaf:{task}.2"]
    assert all(a.state is AgentState.COMPLETED for a in agents)
    # Completions received through run/run_many are never handed over again: no wake turns.
    assert all(a.generation == 1 for a in agents)


def test_three_level_tree_built_with_spawn(open_runtime: OpenRuntime, gate: Gate) -> None:
    def mid(turn: Turn) -> str:
        if not turn.messages:
            turn.spawn("leaf", "deep", name="c")
            return "dispatched"
        return "mid saw " + ",".join(m.content for m in turn.messages)

    def lead(turn: Turn) -> str:
        if not turn.messages:
            turn.spawn("mid", "middle", name="b")
        return "lead"

    rt = open_runtime(tree_profiles(lead, mid, gate))
    rt.spawn("lead", "go", name="a")
    gate.wait_started(1)
    leaf_info = rt.get("/root/a/b/c")
    assert (leaf_info.depth, leaf_info.parent_path, leaf_info.state) == (
        3,
        "/root/a/b",
        AgentState.RUNNING,
    )
    gate.release()
    # The leaf's completion wakes its parent, which sees it in its messages.
    mid_info = wait_until(
        lambda: (
            (i := rt.get("/root/a/b")).generation == 2 and i.state is AgentState.COMPLETED and i
        ),
        what="mid woken by the leaf's completion",
    )
    assert mid_info.output == "mid saw released:deep"


def test_spawn_returns_the_recorded_agent(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    info = rt.spawn("worker", "the task", name="alpha")
    assert info.name == "alpha"
    assert info.path == "/root/alpha"
    assert info.parent_path == "/root"
    assert info.depth == 1
    assert info.profile == "worker"
    assert info.task == "the task"
    assert info.generation == 1
    assert info.state in (AgentState.STARTING, AgentState.RUNNING, AgentState.COMPLETED)
    assert rt.get(info.id).id == info.id
    assert rt.get("/root/alpha").id == info.id

    derived = rt.spawn("worker", "no name")
    assert re.fullmatch(r"[a-z0-9_]{1,40}", derived.name)
    assert derived.path == f"/root/{derived.name}"
    assert derived.id != info.id


def test_an_unnamed_spawn_gets_a_random_name_that_does_not_reveal_its_id(
    open_runtime: OpenRuntime,
) -> None:
    """An agent spawned without a name is named ``agent_`` and 12 hex digits (as
    ``derive_name``'s), drawn at random: no two alike, none found in its id."""
    rt = open_runtime([Profile("worker", runner=echo)])
    infos = [rt.spawn("worker", f"task {i}") for i in range(20)]
    for info in infos:
        assert re.fullmatch(r"agent_[0-9a-f]{12}", info.name)
        assert info.path == f"/root/{info.name}"
        assert info.name[len("agent_") :] not in info.id
        assert rt.get(info.path).id == info.id
    assert len({info.name for info in infos}) == len(infos)


def test_profile_without_runner_uses_the_runtime_runner(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker")], runner=echo)
    agent = rt.spawn("worker", "x")
    assert rt.wait(agent.id, timeout=5).output == "done:x"


# -- open-time checks ------------------------------------------------------------------


def test_open_refuses_a_profile_without_any_runner(store_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        Runtime.open(store_path, profiles=[Profile("worker")])


def test_open_checks_the_delegation_graph(store_path: Path) -> None:
    with pytest.raises(DelegationCycleError):
        Runtime.open(
            store_path,
            profiles=[
                Profile("a", subagents=["b"], runner=echo),
                Profile("b", subagents=["a"], runner=echo),
            ],
        )
    with pytest.raises(DelegationDepthError):
        Runtime.open(
            store_path,
            profiles=tree_profiles(echo, echo),
            limits=Limits(depth_cap=1),
        )


# -- caps at their limits ------------------------------------------------------------


def test_a_team_that_passes_the_graph_check_never_hits_the_depth_cap(
    open_runtime: OpenRuntime, store_path: Path
) -> None:
    # lead -> mid -> leaf puts leaf at /root/a/b/c, depth 3: the check counts
    # as the runtime does, so cap 2 refuses the team at open ...
    with pytest.raises(DelegationDepthError, match=r"^subagent depth 3 exceeds cap 2$"):
        Runtime.open(store_path, profiles=tree_profiles(echo, echo), limits=Limits(depth_cap=2))
    assert validate_graph({"a": ["b"], "b": ["c"]}, cap=3) == {"a": 3, "b": 2}

    # ... and cap 3 runs the whole chain, the deepest agent exactly at the cap.
    def mid(turn: Turn) -> str:
        return str(turn.run("leaf", "deepest", name="c", timeout=5).output)

    def lead(turn: Turn) -> str:
        return str(turn.run("mid", "m", name="b", timeout=5).output)

    rt = open_runtime(tree_profiles(lead, mid), depth_cap=3)
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "done:deepest"
    assert rt.get("/root/a/b/c").depth == 3


def test_depth_cap_still_refuses_one_deeper_after_a_reopen_with_another_team(
    open_runtime: OpenRuntime, store_path: Path
) -> None:
    # An agent left by one team can sit deeper than a new team's chains assume.
    def lead(turn: Turn) -> str:
        return str(turn.run("mid", "m", name="b", timeout=5).output)

    refusals: list[DepthLimitExceeded] = []

    def mid(turn: Turn) -> str:
        if turn.task == "go deeper":
            try:
                turn.spawn("leaf", "too deep", name="c")
            except DepthLimitExceeded as exc:
                refusals.append(exc)
                return "refused"
        return "spawned nothing"

    rt = open_runtime(tree_profiles(lead, mid), depth_cap=3)
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "spawned nothing"
    rt.shutdown()
    # The new team is fine on its own (mid -> leaf is depth 2 <= 2) ...
    team = [Profile("mid", subagents=["leaf"], runner=mid), Profile("leaf", runner=echo)]
    rt = open_runtime(team, depth_cap=2)
    assert rt.get("/root/a/b").depth == 2
    # ... but /root/a/b is already at depth 2, so its child would be at 3.
    assert act(rt, "/root/a/b", "go deeper").output == "refused"
    (refusal,) = refusals
    assert (refusal.limit, refusal.value, refusal.path) == (2, 3, "/root/a/b/c")
    with pytest.raises(DepthLimitExceeded) as info:
        rt.spawn("leaf", "host too deep", name="c", parent="/root/a/b")
    assert (info.value.limit, info.value.value, info.value.path) == (2, 3, "/root/a/b/c")
    assert [x.path for x in rt.agents()] == ["/root/a", "/root/a/b"]


def test_fanout_cap_counts_live_children(open_runtime: OpenRuntime) -> None:
    def lead(turn: Turn) -> str:
        kids = [turn.spawn("worker", f"w{i}", name=f"w{i}") for i in range(3)]
        try:
            turn.spawn("worker", "w3", name="w3")
        except FanoutLimitExceeded:
            return f"refused after {len(kids)}"
        return "not refused"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, wake_on_completion=False),
            Profile("worker", runner=echo),
        ],
        fanout_cap=3,
    )
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "refused after 3"
    for i in range(3):
        assert wait_settled(rt, f"/root/a/w{i}").state is AgentState.COMPLETED
    # Settled children are still live: the parent stays full until one is closed.
    with pytest.raises(FanoutLimitExceeded):
        rt.spawn("worker", "x", name="x", parent="/root/a")
    rt.close("/root/a/w0")
    extra = rt.spawn("worker", "x", name="x", parent="/root/a")
    assert extra.path == "/root/a/x"
    with pytest.raises(FanoutLimitExceeded):
        rt.spawn("worker", "y", name="y", parent="/root/a")


def test_run_many_at_the_fanout_cap_and_over_it(open_runtime: OpenRuntime) -> None:
    def lead(turn: Turn) -> str:
        if turn.task == "exact":
            results = turn.run_many([("worker", f"t{i}") for i in range(3)], timeout=5)
            return ",".join(str(r.output) for r in results if isinstance(r, Completion))
        try:
            turn.run_many([("worker", f"t{i}") for i in range(4)], timeout=5)
        except FanoutLimitExceeded:
            return f"refused with {len(turn.children())} children"
        return "accepted"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=echo)],
        fanout_cap=3,
    )
    exact = rt.spawn("lead", "exact", name="exact")
    over = rt.spawn("lead", "over", name="over")
    assert rt.wait(exact.id, timeout=5).output == "done:t0,done:t1,done:t2"
    assert rt.wait(over.id, timeout=5).output == "refused with 0 children"


def test_run_many_keeps_refused_entries_in_place(open_runtime: OpenRuntime) -> None:
    seen: list[list[object]] = []

    def lead(turn: Turn) -> str:
        for i in range(3):  # three live children already: two slots left
            turn.spawn("worker", f"existing {i}")
        results = turn.run_many(
            [("worker", "a"), ("ghost", "b"), ("lead", "c"), ("worker", "d"), ("worker", "e")],
            timeout=5,
        )
        seen.append(list(results))
        return "ok"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, wake_on_completion=False),
            Profile("worker", runner=echo),
        ],
        fanout_cap=5,
    )
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "ok"
    (results,) = seen
    assert len(results) == 5
    assert isinstance(results[0], Completion) and results[0].output == "done:a"
    assert isinstance(results[1], UnknownProfile)
    assert isinstance(results[2], NotPermitted)
    assert isinstance(results[3], Completion) and results[3].output == "done:d"
    assert isinstance(results[4], FanoutLimitExceeded)
    # The parent now has exactly fanout_cap live children.
    with pytest.raises(FanoutLimitExceeded):
        rt.spawn("worker", "one more", parent="/root/a")


def spawn_until_refused(turn: Turn) -> str:
    """Spawn up to five workers; report how many got in before AgentLimitExceeded."""
    count = 0
    try:
        for i in range(5):
            turn.spawn("worker", f"w{i}", name=f"w{i}")
            count += 1
    except AgentLimitExceeded:
        return f"refused after {count}"
    return "not refused"


def test_max_tree_agents_counts_the_top_level_agent(open_runtime: OpenRuntime) -> None:
    rt = open_runtime(
        [
            Profile(
                "lead", subagents=["worker"], runner=spawn_until_refused, wake_on_completion=False
            ),
            Profile("worker", runner=echo),
        ],
        max_tree_agents=3,
    )
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "refused after 2"
    with pytest.raises(AgentLimitExceeded):
        rt.spawn("worker", "host", parent="/root/a")
    # Another tree has its own budget.
    b = rt.spawn("lead", "go", name="b")
    assert rt.wait(b.id, timeout=5).output == "refused after 2"
    # Closing a member frees a place in that tree.
    rt.close("/root/a/w0")
    rt.spawn("worker", "again", name="w0", parent="/root/a")


def test_max_agents_counts_every_live_agent(open_runtime: OpenRuntime) -> None:
    rt = open_runtime(
        [
            Profile(
                "lead", subagents=["worker"], runner=spawn_until_refused, wake_on_completion=False
            ),
            Profile("worker", runner=echo),
        ],
        max_agents=3,
    )
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=5).output == "refused after 2"
    with pytest.raises(AgentLimitExceeded):
        rt.spawn("worker", "top")
    rt.close("/root/a/w1")
    rt.spawn("worker", "top", name="top")
    with pytest.raises(AgentLimitExceeded):
        rt.spawn("worker", "top2")
    assert len(rt.agents()) == 3


# -- permission and lookup errors --------------------------------------------------------


def test_spawning_a_profile_outside_subagents_is_not_permitted(open_runtime: OpenRuntime) -> None:
    outcomes: dict[str, str] = {}

    def lead(turn: Turn) -> str:
        try:
            turn.spawn("leaf", "not mine")
        except NotPermitted as exc:
            outcomes["lead"] = str(exc)
        return "lead"

    def worker(turn: Turn) -> str:
        try:
            turn.spawn("worker", "recursive")
        except NotPermitted as exc:
            outcomes["worker"] = str(exc)
        return "worker"

    rt = open_runtime(
        [
            Profile("lead", subagents=["mid"], runner=lead),
            Profile("mid", subagents=["leaf"], runner=echo),
            Profile("leaf", runner=echo),
            Profile("worker", runner=worker),
        ]
    )
    a = rt.spawn("lead", "go", name="a")
    w = rt.spawn("worker", "go", name="w")
    rt.wait(a.id, timeout=5)
    rt.wait(w.id, timeout=5)
    assert set(outcomes) == {"lead", "worker"}
    assert all(outcomes.values()), "NotPermitted must explain itself"
    with pytest.raises(NotPermitted):
        rt.spawn("leaf", "host under lead", parent="/root/a")
    assert {x.path for x in rt.agents()} == {"/root/a", "/root/w"}


def test_unknown_profile(open_runtime: OpenRuntime) -> None:
    outcome: list[RetinueError] = []

    def lead(turn: Turn) -> str:
        try:
            turn.spawn("ghost", "boo")
        except UnknownProfile as exc:
            outcome.append(exc)
        return "lead"

    rt = open_runtime([Profile("lead", subagents=["ghost"], runner=lead)])
    with pytest.raises(UnknownProfile):
        rt.spawn("ghost", "boo")
    with pytest.raises(LookupError):
        rt.spawn("ghost", "boo")
    a = rt.spawn("lead", "go")
    rt.wait(a.id, timeout=5)
    assert len(outcome) == 1
    assert [x.id for x in rt.agents()] == [a.id]


# The random id's test id is fixed: pytest-xdist's workers must collect the same tests.
@pytest.mark.parametrize(
    "ref", ["/root/nobody", "/root/a/nobody", pytest.param(uuid.uuid4().hex, id="unknown-id")]
)
def test_unknown_agent(open_runtime: OpenRuntime, ref: str) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "t", name="a")
    rt.wait(a.id, timeout=5)
    calls: dict[str, Callable[[], object]] = {
        "get": lambda: rt.get(ref),
        "wait": lambda: rt.wait(ref, timeout=1),
        "send": lambda: rt.send(ref, "hi"),
        "follow_up": lambda: rt.follow_up(ref, "t"),
        "interrupt": lambda: rt.interrupt(ref),
        "close": lambda: rt.close(ref),
        "close_tree": lambda: rt.close_tree(ref),
    }
    for name, call in calls.items():
        with pytest.raises(UnknownAgent):
            call()
            pytest.fail(f"{name} did not raise")
    if ref.startswith("/root/"):
        with pytest.raises(UnknownAgent):
            rt.spawn("worker", "t", parent=ref)


def test_duplicate_path_and_name_reuse_after_close(open_runtime: OpenRuntime) -> None:
    outcome: list[str] = []

    def lead(turn: Turn) -> str:
        turn.spawn("worker", "one", name="x")
        try:
            turn.spawn("worker", "two", name="x")
        except DuplicateAgentPath:
            outcome.append("duplicate")
        return "lead"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, wake_on_completion=False),
            Profile("worker", runner=echo),
        ]
    )
    first = rt.spawn("worker", "t", name="x")
    with pytest.raises(DuplicateAgentPath):
        rt.spawn("worker", "t", name="x")
    # The same name under another parent is another path.
    a = rt.spawn("lead", "go", name="a")
    rt.wait(a.id, timeout=5)
    assert outcome == ["duplicate"]
    assert rt.get("/root/a/x").profile == "worker"

    rt.wait(first.id, timeout=5)
    closed = rt.close(first.id)
    assert closed.state is AgentState.CLOSED
    second = rt.spawn("worker", "t2", name="x")
    assert second.id != first.id
    assert second.path == first.path == "/root/x"
    assert rt.get("/root/x").id == second.id
    assert rt.get(first.id).state is AgentState.CLOSED
    with pytest.raises(DuplicateAgentPath):
        rt.spawn("worker", "t3", name="x")


def test_spawn_under_a_closed_parent_is_refused(open_runtime: OpenRuntime) -> None:
    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=echo), Profile("worker", runner=echo)]
    )
    a = rt.spawn("lead", "go", name="a")
    rt.wait(a.id, timeout=5)
    rt.close(a.id)
    with pytest.raises((AgentClosed, UnknownAgent)):
        rt.spawn("worker", "t", parent="/root/a")
    with pytest.raises(AgentClosed):
        rt.spawn("worker", "t", parent=a.id)


def test_follow_up_while_starting_or_running_is_busy(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)], max_active_turns=1)
    running = rt.spawn("worker", "run", name="running")
    queued = rt.spawn("worker", "queue", name="queued")
    gate.wait_started(1)
    assert rt.get(queued.id).state is AgentState.STARTING
    with pytest.raises(AgentBusy):
        rt.follow_up(running.id, "again")
    with pytest.raises(AgentBusy):
        rt.follow_up(queued.id, "again")
    gate.release()
    rt.wait(running.id, timeout=5)
    rt.wait(queued.id, timeout=5)
    assert rt.follow_up(running.id, "again").generation == 2


def test_names_follow_the_path_rules(open_runtime: OpenRuntime) -> None:
    outcome: list[str] = []

    def lead(turn: Turn) -> str:
        try:
            turn.spawn("worker", "t", name="Not-Valid")
        except InvalidAgentPath:
            outcome.append("refused")
        return "lead"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, wake_on_completion=False),
            Profile("worker", runner=echo),
        ]
    )
    longest = "n" * 40
    assert rt.spawn("worker", "t", name=longest).path == f"/root/{longest}"
    for bad in ("n" * 41, "Upper", "with-dash", "with space", "root", "..", "", "a/b"):
        with pytest.raises(InvalidAgentPath):
            rt.spawn("worker", "t", name=bad)
            pytest.fail(f"name {bad!r} was accepted")
    a = rt.spawn("lead", "go", name="a")
    rt.wait(a.id, timeout=5)
    assert outcome == ["refused"]
    assert {x.name for x in rt.agents()} == {longest, "a"}


def test_open_creates_a_missing_store_folder(tmp_path: Path) -> None:
    folder = tmp_path / "deep" / "er" / "store"
    with Runtime.open(folder, profiles=[Profile("worker", runner=echo)]) as rt:
        a = rt.spawn("worker", "t")
        assert rt.wait(a.id, timeout=5).output == "done:t"
    assert folder.is_dir()
    with Runtime.open(folder, profiles=[Profile("worker", runner=echo)]) as again:
        assert [x.id for x in again.agents()] == [a.id]


# -- the graph check and the runtime count depth the same way ---------------------------------


@st.composite
def small_dags(draw: st.DrawFn) -> dict[str, list[str]]:
    """Random delegation DAGs over up to five profiles, each delegating to at most two."""
    size = draw(st.integers(min_value=1, max_value=5))
    names = [f"p{i}" for i in range(size)]
    return {
        name: draw(st.lists(st.sampled_from(names[i + 1 :]), max_size=2, unique=True))
        if i + 1 < size
        else []
        for i, name in enumerate(names)
    }


@settings(max_examples=12, derandomize=True, deadline=None)
@given(small_dags(), st.integers(min_value=1, max_value=4))
def test_a_team_the_graph_check_accepts_never_hits_the_depth_cap_at_run_time(
    graph: dict[str, list[str]], cap: int
) -> None:
    refusals: list[object] = []

    def runner(turn: Turn) -> str:
        kids = graph[turn.agent.profile]
        for result in turn.run_many([(kid, "go") for kid in kids], timeout=20):
            if isinstance(result, RetinueError) or result.status != "completed":
                refusals.append(result)
        return f"depth {turn.agent.depth}"

    profiles = [
        Profile(name, subagents=kids, runner=runner, wake_on_completion=False)
        for name, kids in graph.items()
    ]
    try:
        validate_graph(graph, cap=cap)
    except DelegationDepthError:
        with pytest.raises(DelegationDepthError):
            Runtime.open(None, profiles=profiles, limits=Limits(depth_cap=cap))
        return
    with Runtime.open(None, profiles=profiles, limits=Limits(depth_cap=cap)) as rt:
        for name in graph:  # every profile at the top: its deepest chain runs
            done = rt.wait(rt.spawn(name, "go").id, timeout=30)
            assert done.status is CompletionStatus.COMPLETED, done
        deepest = max(a.depth for a in rt.agents())
    assert refusals == []
    assert deepest <= cap


def test_a_spawned_turns_agent_is_the_snapshot_of_its_record(
    open_runtime: OpenRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spawn's first turn gets ``spawned_info`` (the spawn's fields only): it equals
    ``info_of`` of the record, top-level or a child, named or not, with a key or a
    restart policy, and the spawn returns it."""
    made: list[str] = []

    def checked(record: AgentRecord) -> AgentInfo:
        info = spawned_info(record)
        assert info == info_of(record)
        made.append(record.path)
        return info

    monkeypatch.setattr(_scheduler, "spawned_info", checked)

    def mid(turn: Turn) -> str:
        done = turn.run_many([("leaf", "a"), ("leaf", "b", "named")], 5)
        return "+".join(str(d.output) for d in done if isinstance(d, Completion))

    profiles = tree_profiles(echo, mid)
    profiles[2] = Profile("leaf", runner=echo, restart=Restart())
    rt = open_runtime(profiles)
    top = rt.spawn("mid", "go", name="top", idempotency_key="k")
    assert rt.wait(top.id, timeout=10).output == "done:a+done:b"
    assert rt.run("leaf", "c", timeout=10).output == "done:c"
    assert len(made) == 4 and "/root/top/named" in made
    assert (top.path, top.state, top.tree_usage) == ("/root/top", AgentState.RUNNING, Usage())
