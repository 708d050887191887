"""``Runtime.inspect``: one agent in full, from a writer and from a read-only runtime.

Also the read-only views' rule: they never drop an agent because of a depth
cap (a reader does not know the cap its writer ran with), and the writer
records the cap it ran with in the store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support import wait_settled

from retinue import (
    AgentDetail,
    ArgumentTypeError,
    InvalidArgument,
    Limits,
    Profile,
    Runtime,
    Turn,
    UnknownAgent,
)
from retinue.actors.system._boot import stored_depth_cap
from retinue.persistence.store import Store
from retinue.testing import Gate


def test_inspect_shows_unread_messages_and_pending_completions(tmp_path: Path) -> None:
    gate = Gate()

    def lead(turn: Turn) -> str:
        turn.spawn("leaf", "child task", name="kid")
        return "lead done"

    profiles = [
        Profile("lead", subagents=["leaf"], runner=lead, wake_on_completion=False),
        Profile("leaf", runner=lambda turn: "leaf done"),
        Profile("idle", runner=gate),
    ]
    with Runtime.open(tmp_path / "s", profiles=profiles) as rt:
        info = rt.spawn("lead", "go", name="boss")
        wait_settled(rt, info.id)
        wait_settled(rt, "/root/boss/kid")
        rt.send("/root/boss", "hello boss")
        detail = rt.inspect("/root/boss")
        assert isinstance(detail, AgentDetail)
        assert detail.info.id == info.id and detail.info.output == "lead done"
        started = detail.info.started_at
        assert started is not None and detail.info.created_at <= started <= detail.info.updated_at
        assert [m.content for m in detail.unread] == ["hello boss"]
        assert [c.path for c in detail.pending] == ["/root/boss/kid"]
        assert detail.pending[0].output == "leaf done"
        assert detail.transcript == () and detail.transcript_length == 0
        by_id = rt.inspect(info.id)
        assert by_id.info.path == "/root/boss"
    with Runtime.open(tmp_path / "s", readonly=True) as reader:
        seen = reader.inspect("/root/boss")
        assert [m.content for m in seen.unread] == ["hello boss"]
        assert [c.path for c in seen.pending] == ["/root/boss/kid"]
    gate.release()


def test_started_at_is_none_until_a_turn_runs(tmp_path: Path) -> None:
    gate = Gate()
    profiles = [Profile("p", runner=gate)]
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=Limits(max_active_turns=1)) as rt:
        first = rt.spawn("p", "a", name="a")
        queued = rt.spawn("p", "b", name="b")  # waits for the one slot
        assert rt.get(queued.id).started_at is None
        gate.release()
        wait_settled(rt, first.id)
        assert wait_settled(rt, queued.id).started_at is not None


def test_inspect_refuses_bad_arguments(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "s", profiles=[Profile("p", runner=lambda t: "x")]) as rt:
        rt.spawn("p", "t", name="a")
        with pytest.raises(UnknownAgent):
            rt.inspect("/root/nobody")
        with pytest.raises(InvalidArgument, match="transcript_tail"):
            rt.inspect("/root/a", transcript_tail=-1)
        with pytest.raises(ArgumentTypeError, match="transcript_tail"):
            rt.inspect("/root/a", transcript_tail="3")  # type: ignore[arg-type]


def test_read_only_views_keep_agents_deeper_than_the_default_cap(tmp_path: Path) -> None:
    store = tmp_path / "s"
    chain = [
        Profile(f"l{i}", subagents=[f"l{i + 1}"] if i < 7 else [], runner=_level(i))
        for i in range(1, 8)
    ]
    with Runtime.open(store, profiles=chain, limits=Limits(depth_cap=7)) as rt:
        top = rt.spawn("l1", "go", name="n1")
        assert rt.wait(top.id, timeout=30).output == "depth 1"
        assert len(rt.agents()) == 7
    reader = Store(store, readonly=True)
    try:
        assert stored_depth_cap(reader.snapshot()) == 7
    finally:
        reader.close()
    with Runtime.open(store, readonly=True, limits=Limits()) as view:  # default cap: 5
        agents = view.agents()
        assert len(agents) == 7
        deepest = max(agents, key=lambda a: a.depth)
        assert deepest.depth == 7
        assert view.inspect(deepest.path).info.id == deepest.id
        assert not [d for d in view.diagnostics if d.code == "too_deep"]


def _level(i: int) -> Callable[[Turn], str]:
    """The runner of level ``i`` of a chain: it runs level ``i + 1`` below itself."""

    def run(turn: Turn) -> str:
        if i < 7:
            turn.run(f"l{i + 1}", f"level {i + 1}", name=f"n{i + 1}", timeout=30)
        return f"depth {turn.agent.depth}"

    return run
