"""Durable mailboxes: delivery order, read-once, dedup, size and capacity caps, permissions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support import OpenRuntime, Script, act, wait_settled

from retinue import (
    AgentClosed,
    AgentState,
    DedupKeyTooLong,
    MailboxFull,
    Message,
    MessageTooLarge,
    Profile,
    RetinueError,
    Runtime,
    Turn,
)
from retinue.testing import Gate, echo


def scripted(script: Script) -> list[Profile]:
    """lead -> mid -> leaf, all run by ``script``, none waking on completions."""
    return [
        Profile("lead", subagents=["mid"], runner=script, wake_on_completion=False),
        Profile("mid", subagents=["leaf"], runner=script, wake_on_completion=False),
        Profile("leaf", runner=script, wake_on_completion=False),
    ]


def contents(turn: Turn) -> list[str]:
    """Return the contents of a turn's messages, in order."""
    return [m.content for m in turn.messages]


def received(script: Script, agent_id: str) -> list[str]:
    """Return the contents of every plain message any turn of the agent received, in order."""
    return [m.content for t in script.turns_of(agent_id) for m in t.messages if m.kind == "message"]


def idle_worker(rt: Runtime, name: str = "a") -> str:
    """Spawn a ``worker`` named ``name``, wait for its first turn to settle, return its id."""
    info = rt.spawn("worker", "start", name=name)
    wait_settled(rt, info.id)
    return info.id


def test_host_messages_reach_the_next_turn_in_order_and_are_read_once(
    open_runtime: OpenRuntime, script: Script
) -> None:
    rt = open_runtime([Profile("worker", runner=script)])
    a = idle_worker(rt)
    sent = [rt.send(a, f"m{i}") for i in range(3)]
    for i, message in enumerate(sent):
        assert isinstance(message, Message)
        assert (message.kind, message.content, message.sender) == ("message", f"m{i}", "/root")
        assert (message.recipient, message.recipient_id) == ("/root/a", a)
        assert message.completion is None
    assert len({m.id for m in sent}) == 3

    act(rt, a, "read")
    turn = script.turns_of(a)[-1]
    assert [m.id for m in turn.messages] == [m.id for m in sent]
    assert contents(turn) == ["m0", "m1", "m2"]
    act(rt, a, "read again")
    assert script.turns_of(a)[-1].messages == []


def test_messages_and_completions_arrive_in_arrival_order(
    open_runtime: OpenRuntime, script: Script
) -> None:
    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], runner=script, wake_on_completion=False),
            Profile("worker", runner=echo),
        ]
    )
    a = rt.spawn("lead", "start", name="a").id
    wait_settled(rt, a)
    rt.send(a, "before")
    child = rt.spawn("worker", "kid", name="kid", parent=a)
    wait_settled(rt, child.id)
    rt.send(a, "after")
    act(rt, a, "read")
    turn = script.turns_of(a)[-1]
    assert [m.kind for m in turn.messages] == ["message", "completion", "message"]
    assert contents(turn) == ["before", "done:kid", "after"]
    assert turn.messages[1].completion is not None
    assert turn.messages[1].completion.agent_id == child.id


def test_dedup_returns_the_original_message(open_runtime: OpenRuntime, script: Script) -> None:
    rt = open_runtime([Profile("worker", runner=script)], mailbox_capacity=2)
    a = idle_worker(rt)
    first = rt.send(a, "hello", dedup_key="k1")
    again = rt.send(a, "hello", dedup_key="k1")
    changed = rt.send(a, "different text", dedup_key="k1")
    assert again == first
    assert changed == first
    assert first.dedup_key == "k1"
    other = rt.send(a, "hello", dedup_key="k2")
    assert other.id != first.id
    # The mailbox is full now, but a duplicate is not a new message.
    assert rt.send(a, "hello", dedup_key="k2") == other
    with pytest.raises(MailboxFull):
        rt.send(a, "third")

    act(rt, a, "read")
    assert contents(script.turns_of(a)[-1]) == ["hello", "hello"]
    # Still the original after it was read, and not delivered a second time.
    assert rt.send(a, "hello", dedup_key="k1") == first
    act(rt, a, "read")
    assert script.turns_of(a)[-1].messages == []


def test_dedup_is_per_sender(open_runtime: OpenRuntime, script: Script) -> None:
    def child_sends(turn: Turn) -> str:
        return turn.send(turn.agent.parent_path, "from child", dedup_key="k").id

    script.on("send", child_sends)
    rt = open_runtime(scripted(script))
    a = rt.spawn("lead", "start", name="a").id
    b = rt.spawn("mid", "start", name="b", parent=a).id
    wait_settled(rt, a)
    wait_settled(rt, b)
    from_host = rt.send(a, "from host", dedup_key="k")
    from_child = act(rt, b, "send").output
    assert from_child != from_host.id
    assert act(rt, b, "send").output == from_child  # the child's own duplicate
    act(rt, a, "read")
    plain = [m for m in script.turns_of(a)[-1].messages if m.kind == "message"]
    assert [(m.content, m.sender) for m in plain] == [
        ("from host", "/root"),
        ("from child", "/root/a/b"),
    ]


def test_mailbox_capacity_is_exact(open_runtime: OpenRuntime, script: Script) -> None:
    rt = open_runtime([Profile("worker", runner=script)], mailbox_capacity=3)
    a = idle_worker(rt)
    for i in range(3):
        rt.send(a, f"m{i}")
    with pytest.raises(MailboxFull) as caught:
        rt.send(a, "m3")
    assert str(caught.value)
    act(rt, a, "read")
    assert contents(script.turns_of(a)[-1]) == ["m0", "m1", "m2"]
    rt.send(a, "m4")  # reading emptied it
    act(rt, a, "read")
    assert contents(script.turns_of(a)[-1]) == ["m4"]


def test_mailbox_capacity_applies_to_agent_senders(
    open_runtime: OpenRuntime, script: Script
) -> None:
    def flood(turn: Turn) -> str:
        sent = 0
        try:
            for i in range(5):
                turn.send(turn.agent.parent_path, f"c{i}")
                sent += 1
        except MailboxFull:
            return f"full after {sent}"
        return "never full"

    script.on("flood", flood)
    rt = open_runtime(scripted(script), mailbox_capacity=2)
    a = rt.spawn("lead", "start", name="a").id
    b = rt.spawn("mid", "start", name="b", parent=a).id
    wait_settled(rt, a)
    wait_settled(rt, b)
    assert act(rt, b, "flood").output == "full after 2"


def test_message_size_cap_is_exact_in_utf8_bytes(open_runtime: OpenRuntime, script: Script) -> None:
    rt = open_runtime([Profile("worker", runner=script)], message_max_bytes=8)
    a = idle_worker(rt)
    rt.send(a, "12345678")
    rt.send(a, "éééé")  # 4 characters, 8 bytes
    for too_big in ("123456789", "ééééa", "€€€"):
        with pytest.raises(MessageTooLarge) as caught:
            rt.send(a, too_big)
        assert isinstance(caught.value, ValueError)
    act(rt, a, "read")
    assert contents(script.turns_of(a)[-1]) == ["12345678", "éééé"]


def test_dedup_key_length_cap_is_exact(open_runtime: OpenRuntime, script: Script) -> None:
    rt = open_runtime([Profile("worker", runner=script)], dedup_key_max_length=5)
    a = idle_worker(rt)
    rt.send(a, "ok", dedup_key="abcde")
    with pytest.raises(DedupKeyTooLong) as caught:
        rt.send(a, "too long", dedup_key="abcdef")
    assert isinstance(caught.value, ValueError)
    act(rt, a, "read")
    assert contents(script.turns_of(a)[-1]) == ["ok"]


def test_agents_may_message_parent_children_and_siblings_only(
    open_runtime: OpenRuntime, script: Script
) -> None:
    def probe(targets: dict[str, str]) -> Callable[[Turn], str]:
        def run(turn: Turn) -> str:
            results = []
            for label, ref in targets.items():
                try:
                    turn.send(ref, f"hi from {turn.agent.name}")
                    results.append(f"{label}:ok")
                except RetinueError as exc:
                    results.append(f"{label}:{type(exc).__name__}")
            return ",".join(results)

        return run

    rt = open_runtime(scripted(script))
    a = rt.spawn("lead", "start", name="a").id
    b1 = rt.spawn("mid", "start", name="b1", parent=a).id
    b2 = rt.spawn("mid", "start", name="b2", parent=a).id
    c = rt.spawn("leaf", "start", name="c", parent=b1).id
    x = rt.spawn("lead", "start", name="x").id
    for ref in (a, b1, b2, c, x):
        wait_settled(rt, ref)

    script.on(
        "probe_b1",
        probe({"parent": "/root/a", "child": "c", "sibling": "/root/a/b2", "self": b1}),
    )
    script.on(
        "probe_c",
        probe({"grandparent": a, "uncle": "/root/a/b2", "stranger": x, "parent": b1}),
    )
    script.on("probe_a", probe({"grandchild": "/root/a/b1/c", "child": "b2"}))
    assert act(rt, b1, "probe_b1").output == "parent:ok,child:ok,sibling:ok,self:NotPermitted"
    assert (
        act(rt, c, "probe_c").output
        == "grandparent:NotPermitted,uncle:NotPermitted,stranger:NotPermitted,parent:ok"
    )
    assert act(rt, a, "probe_a").output == "grandchild:NotPermitted,child:ok"

    # The host may message anyone, however deep.
    rt.send(c, "from host")
    for ref in (a, b1, b2, c):
        act(rt, ref, "read")
    assert received(script, a) == ["hi from b1"]
    assert received(script, b1) == ["hi from c"]
    assert received(script, b2) == ["hi from b1", "hi from a"]
    assert received(script, c) == ["hi from b1", "from host"]


def test_sending_to_a_closed_agent_is_refused(open_runtime: OpenRuntime, script: Script) -> None:
    rt = open_runtime([Profile("worker", runner=script)])
    a = idle_worker(rt)
    rt.close(a)
    with pytest.raises(AgentClosed):
        rt.send(a, "too late")


def test_an_interrupted_queued_turn_leaves_messages_unread(
    open_runtime: OpenRuntime, script: Script, gate: Gate
) -> None:
    rt = open_runtime(
        [Profile("worker", runner=script), Profile("blocker", runner=gate)], max_active_turns=1
    )
    a = idle_worker(rt)
    blocker = rt.spawn("blocker", "hold")
    gate.wait_started(1)
    rt.send(a, "keep me")
    assert rt.follow_up(a, "never runs").state is AgentState.STARTING
    assert rt.interrupt(a).state is AgentState.INTERRUPTED
    gate.release()
    rt.wait(blocker.id, timeout=5)
    act(rt, a, "read")
    assert [t.task for t in script.turns_of(a)] == ["start", "read"]
    assert contents(script.turns_of(a)[-1]) == ["keep me"]


# -- found by the review -----------------------------------------------------------------


def test_a_retried_send_returns_the_original_even_after_the_recipient_closed(
    tmp_path: Path,
) -> None:
    """A retried send (same dedup key) returns the original message even once the recipient closed.

    Found by the code review (was ``tests/runtime/test_regressions.py``).
    """
    with Runtime.open(tmp_path / "s", profiles=[Profile("w", runner=lambda t: "ok")]) as rt:
        a = rt.spawn("w", "t", name="a")
        rt.wait(a.id, timeout=10)
        first = rt.send(a.id, "hello", dedup_key="k")
        rt.close(a.id)
        assert rt.send(a.id, "hello", dedup_key="k").id == first.id
        with pytest.raises(AgentClosed):
            rt.send(a.id, "hello", dedup_key="other")
