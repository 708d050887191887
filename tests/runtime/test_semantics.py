"""Semantics the seeds define: idle waits, interrupt texts, the host inbox, subtree interrupts,
idempotent spawns, and one list of diagnostic codes."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from pathlib import Path

import pytest
from support import PROMPT_S, OpenRuntime, Script, act, wait_settled, wait_until

from retinue import (
    AgentState,
    AgentStateError,
    CompletionStatus,
    DedupKeyTooLong,
    InvalidArgument,
    MailboxFull,
    NothingToWaitFor,
    NotPermitted,
    Profile,
    RetinueError,
    Turn,
    WaitTimeout,
)
from retinue.persistence import restore
from retinue.testing import Gate, echo

# -- a host wait with nothing to wait for ------------------------------------------------------


def test_a_host_wait_on_an_idle_agent_with_everything_received_raises_at_once(
    open_runtime: OpenRuntime,
) -> None:
    rt = open_runtime([Profile("worker", runner=echo)], wait_max_s=3600)
    a = rt.spawn("worker", "t", name="a")
    assert rt.wait(a.id, timeout=10).output == "done:t"
    # An hour-long wait would only run out its time: it is refused at once.
    with pytest.raises(NothingToWaitFor) as caught:
        rt.wait(a.id, timeout=3600)
    assert isinstance(caught.value, AgentStateError)
    assert str(caught.value).startswith("/root/a is completed: no turn is queued or running")
    with pytest.raises(NothingToWaitFor):
        asyncio.run(rt.wait_async(a.id, timeout=3600))
    # A new turn is something to wait for again.
    rt.follow_up(a.id, "again")
    assert rt.wait(a.id, timeout=10).output == "done:again"


def test_a_host_wait_on_an_idle_agent_a_running_child_will_wake_still_waits(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    def lead(turn: Turn) -> str:
        if turn.reason == "wake":
            return "woken"
        turn.spawn("worker", "slow", name="w")
        return "spawned"

    rt = open_runtime(
        [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=gate)]
    )
    a = rt.spawn("lead", "go", name="a")
    assert rt.wait(a.id, timeout=10).output == "spawned"
    gate.wait_started(1)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(rt.wait(a.id, timeout=PROMPT_S)))
    waiter.start()
    gate.release()  # the child settles and wakes the lead: that turn's completion comes
    waiter.join(PROMPT_S)
    (done,) = got
    assert getattr(done, "output", None) == "woken"


def test_a_second_host_wait_left_without_a_completion_ends_with_nothing_to_wait_for(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    a = rt.spawn("worker", "t", name="a")
    gate.wait_started(1)
    outcomes: list[object] = []
    lock = threading.Lock()

    def wait() -> None:
        try:
            result: object = rt.wait(a.id, timeout=PROMPT_S)
        except RetinueError as exc:
            result = exc
        with lock:
            outcomes.append(result)

    waiters = [threading.Thread(target=wait) for _ in range(2)]
    for thread in waiters:
        thread.start()
    wait_until(lambda: len(gate.turns) == 1 and all(t.is_alive() for t in waiters))
    gate.release()
    for thread in waiters:
        thread.join(PROMPT_S)
    # One gets the completion; the other is not left to run out its time
    # ("it keeps running" would be false): nothing is left for it.
    assert sorted(type(o).__name__ for o in outcomes) == ["Completion", "NothingToWaitFor"]


# -- interrupted completions carry their error text ---------------------------------------------


def test_an_interrupted_completion_says_whether_the_turn_ever_ran(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)], max_active_turns=1)
    running = rt.spawn("worker", "hold", name="running")
    gate.wait_started(1)
    queued = rt.spawn("worker", "later", name="queued")
    assert rt.get(queued.id).state is AgentState.STARTING
    rt.interrupt(queued.id)
    rt.interrupt(running.id)
    first = rt.wait(queued.id, timeout=10)
    second = rt.wait(running.id, timeout=10)
    assert (first.status, first.output, first.error) == (
        CompletionStatus.INTERRUPTED,
        None,
        "interrupted before execution",
    )
    assert (second.status, second.output, second.error) == (
        CompletionStatus.INTERRUPTED,
        None,
        "interrupted",
    )


def test_a_parent_reads_an_interrupted_childs_error_text(
    open_runtime: OpenRuntime, gate: Gate, script: Script
) -> None:
    script.on("go", lambda turn: str(turn.spawn("worker", "hold", name="w").path))
    script.on("read", lambda turn: "|".join(f"{m.kind}:{m.content}" for m in turn.messages))
    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=script, wake_on_completion=False),
            Profile("worker", runner=gate),
        ]
    )
    lead = rt.spawn("lead", "go", name="l")
    gate.wait_started(1)
    rt.interrupt("/root/l/w")
    wait_settled(rt, lead.id)
    assert act(rt, lead.id, "read").output == "completion:interrupted"


def test_turns_cut_by_a_close_or_a_crash_come_back_with_their_error_text(
    open_runtime: OpenRuntime, gate: Gate, store_path: Path
) -> None:
    profiles = [Profile("worker", runner=gate)]
    rt = open_runtime(profiles, max_active_turns=1)
    rt.spawn("worker", "hold", name="running")
    gate.wait_started(1)
    rt.spawn("worker", "later", name="queued")
    rt.shutdown()
    again = open_runtime(profiles, path=store_path)
    errors = {a.name: (a.state, a.error) for a in again.agents()}
    assert errors == {
        "running": (AgentState.INTERRUPTED, "interrupted"),
        "queued": (AgentState.INTERRUPTED, "interrupted before execution"),
    }


# -- the host's inbox --------------------------------------------------------------------------


def _inbox_team(script: Script) -> list[Profile]:
    return [
        Profile("lead", subagents=["worker"], runner=script, wake_on_completion=False),
        Profile("worker", runner=script, wake_on_completion=False),
    ]


def test_top_level_agents_message_the_host_and_the_host_reads_its_inbox(
    open_runtime: OpenRuntime, script: Script, store_path: Path
) -> None:
    def tell(turn: Turn) -> str:
        first = turn.send("/root", "progress 1", dedup_key="p1")
        again = turn.send("/root", "progress 1", dedup_key="p1")  # a retry: the same message
        assert again == first
        turn.send("/root", "progress 2")
        return "told"

    script.on("tell", tell)
    rt = open_runtime(_inbox_team(script))
    assert rt.messages(timeout=0) == []
    a = rt.spawn("lead", "tell", name="a")
    wait_settled(rt, a.id)
    got = rt.messages(timeout=0)
    assert [(m.sender, m.recipient, m.content) for m in got] == [
        ("/root/a", "/root", "progress 1"),
        ("/root/a", "/root", "progress 2"),
    ]
    assert rt.messages(timeout=0) == []  # read once
    # Unread messages survive a reopen; read ones do not come back.
    script.on("tell-once", lambda turn: turn.send("/root", "after reopen").content)
    rt.follow_up(a.id, "tell-once")
    wait_settled(rt, a.id, 2)
    rt.shutdown()
    again = open_runtime(_inbox_team(script), path=store_path)
    assert [m.content for m in again.messages(timeout=0)] == ["after reopen"]
    assert again.diagnostics == []


def test_a_blocked_messages_call_is_answered_by_the_next_message(
    open_runtime: OpenRuntime, script: Script
) -> None:
    script.on("tell", lambda turn: turn.send("/root", "ping").content)
    rt = open_runtime(_inbox_team(script))
    got: list[list[str]] = []
    reader = threading.Thread(target=lambda: got.append([m.content for m in rt.messages(5)]))
    reader.start()
    wait_until(lambda: reader.is_alive())
    rt.spawn("lead", "tell", name="a")
    reader.join(PROMPT_S)
    assert got == [["ping"]]
    wait_settled(rt, "/root/a")

    async def both() -> list[str]:
        pending = asyncio.ensure_future(rt.messages_async(timeout=5))
        await asyncio.sleep(0)
        await rt.follow_up_async("/root/a", "tell")
        return [m.content for m in await pending]

    assert asyncio.run(both()) == ["ping"]
    assert asyncio.run(rt.messages_async(timeout=0)) == []


def test_a_cancelled_messages_async_gives_its_messages_back(
    open_runtime: OpenRuntime, script: Script, store_path: Path
) -> None:
    script.on("tell", lambda turn: turn.send("/root", "ping").content)
    rt = open_runtime(_inbox_team(script))
    got: list[str] = []

    async def scenario() -> None:
        task = asyncio.create_task(rt.messages_async(timeout=5))
        await asyncio.sleep(0)  # its wait is registered
        # Block the loop (the task cannot resume) while the message answers the wait.
        wait_settled(rt, rt.spawn("lead", "tell", name="a").id)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            got.extend(m.content for m in await task)

    asyncio.run(scenario())
    assert got == []  # the task was cancelled before it could take them ...
    assert [m.content for m in rt.messages(timeout=5)] == ["ping"]  # ... so they came back
    assert rt.messages(timeout=0) == []


def test_only_top_level_agents_message_the_host_and_its_inbox_is_bounded(
    open_runtime: OpenRuntime, script: Script
) -> None:
    outcomes: list[str] = []

    def deep(turn: Turn) -> str:
        try:
            turn.send("/root", "from below")
        except NotPermitted:
            outcomes.append("refused")
        return "deep"

    def flood(turn: Turn) -> str:
        sent = 0
        try:
            for n in range(5):
                turn.send("/root", f"m{n}")
                sent += 1
        except MailboxFull as exc:
            outcomes.append(f"full {exc.limit} {exc.value} {exc.path}")
        return str(sent)

    script.on("deep", deep)
    script.on("flood", flood)
    script.on("spawn", lambda turn: turn.spawn("worker", "deep", name="w").path)
    rt = open_runtime(_inbox_team(script), mailbox_capacity=3)
    with pytest.raises(NotPermitted):
        rt.send("/root", "to myself")
    lead = rt.spawn("lead", "spawn", name="l")
    wait_until(lambda: outcomes == ["refused"])
    assert act(rt, lead.id, "flood").output == "3"
    assert outcomes == ["refused", "full 3 3 /root"]
    assert [m.content for m in rt.messages(timeout=0)] == ["m0", "m1", "m2"]


def test_messages_refuses_a_nan_timeout(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    with pytest.raises(InvalidArgument):
        rt.messages(timeout=float("nan"))


# -- interrupt_tree -----------------------------------------------------------------------------


def test_interrupt_tree_interrupts_a_subtree_leaves_first_and_wakes_nobody(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    def lead(turn: Turn) -> str:
        if turn.reason == "wake":
            return "woken"
        turn.spawn("mid", "m", name="m")
        return gate(turn)

    def mid(turn: Turn) -> str:
        if turn.reason == "wake":
            return "woken"
        if turn.task == "idle":  # idle, with a running child whose interrupt could wake it
            turn.spawn("leaf", "y", name="y")
            return "idle"
        turn.spawn("leaf", "x", name="x")
        return gate(turn)

    rt = open_runtime(
        [
            Profile("lead", subagents=["mid"], runner=lead),
            Profile("mid", subagents=["leaf"], runner=mid),
            Profile("leaf", runner=gate),
        ]
    )
    rt.spawn("lead", "go", name="a")
    gate.wait_started(3)  # lead, mid and leaf hold their turns
    rt.spawn("mid", "idle", name="idle", parent="/root/a")
    gate.wait_started(4)
    assert wait_settled(rt, "/root/a/idle").state is AgentState.COMPLETED
    infos = rt.interrupt_tree("/root/a")
    assert [i.path for i in infos] == [
        "/root/a/m/x",
        "/root/a/m",
        "/root/a/idle/y",
        "/root/a/idle",
        "/root/a",
    ]
    assert [i.state for i in infos] == [
        AgentState.INTERRUPTED,
        AgentState.INTERRUPTED,
        AgentState.INTERRUPTED,
        AgentState.COMPLETED,  # idle: left as it was, not woken by y's completion
        AgentState.INTERRUPTED,
    ]
    gate.release()
    gate.join_runner_threads()
    # No interrupted child woke its parent: every generation is still 1.
    assert {a.path: a.generation for a in rt.agents()} == {
        "/root/a": 1,
        "/root/a/m": 1,
        "/root/a/m/x": 1,
        "/root/a/idle": 1,
        "/root/a/idle/y": 1,
    }
    assert asyncio.run(rt.interrupt_tree_async("/root/a/m"))[0].path == "/root/a/m/x"


def test_a_turn_interrupts_a_subtree_of_its_own_with_both_faces(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    seen: list[object] = []

    def lead(turn: Turn) -> str:
        if turn.task == "spawn":
            turn.spawn("worker", "hold", name="c")
            return "spawned"
        seen.append([i.path for i in turn.interrupt_tree("c")])
        try:
            turn.interrupt_tree("/root/al")
        except NotPermitted:
            seen.append("refused outside its subtree")
        return "cut"

    async def alead(turn: Turn) -> str:
        if turn.task == "spawn":
            await turn.spawn_async("worker", "hold", name="c")
            return "spawned"
        seen.append([i.path for i in await turn.interrupt_tree_async("c")])
        return "cut"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=lead, wake_on_completion=False),
            Profile("alead", subagents=["worker"], runner=alead, wake_on_completion=False),
            Profile("worker", runner=gate),
        ]
    )
    for profile, name in (("lead", "l"), ("alead", "al")):
        wait_settled(rt, rt.spawn(profile, "spawn", name=name).id)
    gate.wait_started(2)
    assert act(rt, "/root/l", "cut").output == "cut"
    assert act(rt, "/root/al", "cut").output == "cut"
    assert seen == [["/root/l/c"], "refused outside its subtree", ["/root/al/c"]]
    for path in ("/root/l/c", "/root/al/c"):
        info = rt.get(path)
        assert (info.state, info.error) == (AgentState.INTERRUPTED, "interrupted")


# -- idempotent spawns ---------------------------------------------------------------------------


def test_a_retried_spawn_with_the_same_key_returns_the_same_agent_even_after_reopen(
    open_runtime: OpenRuntime, store_path: Path
) -> None:
    profiles = [Profile("worker", runner=echo), Profile("other", runner=echo)]
    rt = open_runtime(profiles, fanout_cap=1, dedup_key_max_length=8)
    first = rt.spawn("worker", "t", idempotency_key="job-1")
    again = rt.spawn("worker", "t", idempotency_key="job-1")
    assert again.id == first.id
    assert len(rt.agents()) == 1
    assert asyncio.run(rt.spawn_async("worker", "t", idempotency_key="job-1")).id == first.id
    assert rt.spawn("worker", "t", idempotency_key="job-2").id != first.id
    with pytest.raises(InvalidArgument, match="already spawned"):
        rt.spawn("other", "t", idempotency_key="job-1")
    with pytest.raises(DedupKeyTooLong) as long_key:
        rt.spawn("worker", "t", idempotency_key="k" * 9)
    assert (long_key.value.limit, long_key.value.value) == (8, 9)
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        rt.spawn("worker", "t", idempotency_key="k\ud800")
    rt.close(first.id)
    assert rt.spawn("worker", "t", idempotency_key="job-1").state is AgentState.CLOSED
    rt.shutdown()
    reopened = open_runtime(profiles, path=store_path)
    assert reopened.spawn("worker", "t", idempotency_key="job-1").id == first.id
    assert len(reopened.agents(include_closed=True)) == 2


def test_a_turns_idempotency_keys_are_its_own(open_runtime: OpenRuntime, script: Script) -> None:
    ids: dict[str, list[str]] = {}
    lock = threading.Lock()

    def lead(turn: Turn) -> str:
        mine = [turn.spawn("worker", "w", idempotency_key="child").id for _ in range(2)]
        with lock:
            ids[turn.agent.path] = mine
        return "ok"

    script.on("go", lead)
    rt = open_runtime(_inbox_team(script))
    for name in ("a", "b"):
        rt.spawn("lead", "go", name=name)
    wait_until(lambda: len(ids) == 2)
    (a1, a2), (b1, b2) = ids["/root/a"], ids["/root/b"]
    assert a1 == a2 and b1 == b2 and a1 != b1
    # The host spawning under /root/a with that key gets a's child too (keys are per parent).
    assert rt.spawn("worker", "w", parent="/root/a", idempotency_key="child").id == a1


# -- one list of diagnostic codes ------------------------------------------------------------


def test_the_docs_and_restore_list_the_same_diagnostic_codes() -> None:
    doc = restore.__doc__ or ""
    documented = set(re.findall(r"^- ``(\w+)``", doc, re.M))
    documented |= set(re.findall(r"^- ``\w+`` / ``(\w+)``", doc, re.M))
    guide = (Path(__file__).parents[2] / "docs" / "guides" / "operating.md").read_text()
    section = guide[guide.index("<!-- diagnostic codes -->") :]
    section = section[: section.index("<!-- /diagnostic codes -->")]
    in_docs = set(re.findall(r"^\| `(\w+)` \|", section, re.M))
    # The codes the code emits: restore's diag(database, key, code, ...) calls and the
    # writer's open (boot), which adds `migrated`.
    source = Path(restore.__file__).read_text()
    emitted = set(re.findall(r'diag\(\s*"\w+",\s*\w+,\s*"(\w+)"', source))
    boot = Path(restore.__file__).parents[1] / "actors" / "system" / "_boot.py"
    emitted |= set(re.findall(r'code="(\w+)"', boot.read_text()))
    assert len(documented) >= 12
    assert in_docs == documented
    assert emitted == documented


def test_wait_timeout_still_means_a_running_agent(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    a = rt.spawn("worker", "t")
    gate.wait_started(1)
    with pytest.raises(WaitTimeout, match="keeps running"):
        rt.wait(a.id, timeout=0.01)
