"""``Runtime.backlog``: what waits to be received in the whole store, writer and read-only alike."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support import wait_settled

from retinue import Backlog, Profile, Runtime, Turn
from retinue.persistence.integrity import store_usage
from retinue.testing import Gate


def test_backlog_counts_unread_messages_and_pending_completions(tmp_path: Path) -> None:
    gate = Gate()

    def lead(turn: Turn) -> str:
        turn.spawn("leaf", "child task", name="kid")
        turn.send("/root", "for the host")
        return "lead done"

    profiles = [
        Profile("lead", subagents=["leaf"], runner=lead, wake_on_completion=False),
        Profile("leaf", runner=lambda turn: "leaf done"),
        Profile("idle", runner=gate),
    ]
    store = tmp_path / "store"
    with Runtime.open(store, profiles=profiles) as rt:
        assert rt.backlog() == Backlog()
        top = rt.spawn("lead", "plan", name="lead")
        idle = rt.spawn("idle", "wait", name="idle")
        gate.release()
        wait_settled(rt, top.id)
        wait_settled(rt, idle.id)
        wait_settled(rt, "/root/lead/kid")
        rt.send(idle.id, "one")
        rt.send(idle.id, "two")
        expected = Backlog(
            unread_messages=3,  # two for idle, one for the host
            pending_completions=3,  # the kid's (for the lead), the lead's and idle's (for the host)
            host_unread_messages=1,
            host_pending_completions=2,
        )
        assert rt.backlog() == expected
        assert asyncio.run(rt.backlog_async()) == expected
        rt.wait(top.id)
        rt.messages(timeout=0)
        assert rt.backlog() == Backlog(
            unread_messages=2, pending_completions=2, host_pending_completions=1
        )
        usage = store_usage(store)
        assert usage is not None and 0 < usage.used_bytes <= usage.map_bytes
        assert usage.file_bytes == (store / "data.mdb").stat().st_size
    reader = Runtime.open(store, readonly=True)
    try:
        assert reader.backlog() == Backlog(
            unread_messages=2, pending_completions=2, host_pending_completions=1
        )
    finally:
        reader.shutdown()
    assert store_usage(tmp_path / "nothing") is None
