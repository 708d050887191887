"""``retinue.connect`` against a writer in another process: every host call, errors typed.

The writer is a child process (:mod:`control.writer`) holding a real store;
this process reaches it only through ``<store>/control.sock``.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

import retinue
from control.writer import Writer
from retinue import (
    AgentState,
    ApprovalRequested,
    CompletionStatus,
    InvalidArgument,
    NoWriter,
    PageLimitExceeded,
    RemoteRuntime,
    Runtime,
    UnknownAgent,
    UnknownProfile,
    WaitTimeout,
)
from retinue.errors import ApprovalAlreadyAnswered, ArgumentTypeError, StoreLocked


def test_the_socket_is_the_writers_alone(writer: Writer) -> None:
    mode = os.stat(writer.store / "control.sock").st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    with retinue.connect(writer.store) as remote:
        assert remote.pid == writer.proc.pid
        assert remote.path == writer.store


def test_lifecycle_calls_run_on_the_writer(remote: RemoteRuntime) -> None:
    info = remote.spawn("echo", "hello", name="a")
    assert (info.path, info.profile) == ("/root/a", "echo")
    done = remote.wait("a", 30)
    assert (done.status, done.output) == (CompletionStatus.COMPLETED, "hello")
    assert remote.follow_up("a", "again").generation == 2
    assert remote.wait(info.id, 30).output == "again"
    assert remote.get("/root/a").state is AgentState.COMPLETED
    assert [a.path for a in remote.agents()] == ["/root/a"]
    assert remote.inspect("a", transcript_tail=5).info.id == info.id
    assert remote.send("a", "a note").content == "a note"

    remote.spawn("holder", "hold", name="b")
    remote.spawn("blocker", "hold", name="c", parent="/root/b")
    assert remote.interrupt("/root/b/c").path == "/root/b/c"
    assert remote.wait("/root/b/c", 30).status is CompletionStatus.INTERRUPTED
    assert remote.resume("/root/b/c").state.busy
    interrupted = remote.interrupt_tree("b")
    assert [a.path for a in interrupted] == ["/root/b/c", "/root/b"]
    closed = remote.close_tree("b")
    assert {a.path for a in closed} == {"/root/b/c", "/root/b"}
    assert remote.close("a").state is AgentState.CLOSED
    assert remote.agents() == []
    assert len(remote.agents(include_closed=True)) == 3


def test_errors_come_back_as_the_same_class(remote: RemoteRuntime) -> None:
    with pytest.raises(UnknownAgent) as unknown:
        remote.get("/root/nobody")
    assert "/root/nobody" in str(unknown.value)
    with pytest.raises(UnknownProfile):
        remote.spawn("nobody", "x")
    remote.spawn("blocker", "hold", name="b")
    with pytest.raises(WaitTimeout):
        remote.wait("b", 0)
    with pytest.raises(InvalidArgument):
        remote.wait("b", -1)
    with pytest.raises(ArgumentTypeError):
        remote.close()  # leaving the writer is disconnect()
    remote.interrupt("b")


def test_agents_page_over_the_socket(remote: RemoteRuntime) -> None:
    for name in ("c", "a", "b"):
        remote.spawn("echo", name, name=name)
        remote.wait(name, 30)
    first = remote.agents(limit=2)
    assert [a.path for a in first] == ["/root/a", "/root/b"]
    assert [a.path for a in remote.agents(limit=2, after=first[-1].id)] == ["/root/c"]
    assert [a.path for a in remote.iter_agents(page_size=1)] == ["/root/a", "/root/b", "/root/c"]
    with pytest.raises(PageLimitExceeded):
        remote.agents(limit=10**9)
    assert remote.agent_counts().by_state == {"completed": 3}

    async def walk() -> list[str]:
        assert len(await remote.agents_async(limit=1, after="/root/a")) == 1
        return [a.path async for a in remote.iter_agents_async(page_size=2)]

    assert asyncio.run(walk()) == ["/root/a", "/root/b", "/root/c"]


def test_host_messages_and_leases(remote: RemoteRuntime) -> None:
    remote.spawn("herald", "news", name="h")
    assert remote.wait("h", 30, lease="mine").output == "sent"
    assert set(remote.leases()) == {"mine"}
    assert remote.release_lease("mine") is True
    again = remote.wait("h", 30, lease="again")
    assert again.output == "sent" and remote.ack_lease("again") is True
    assert remote.leases() == {}
    assert [m.content for m in remote.messages(30)] == ["news"]
    assert remote.messages(0) == []
    remote.wait_idle(30)
    assert remote.backlog().host_pending_completions == 0


def test_approvals_are_answered_over_the_socket(remote: RemoteRuntime) -> None:
    with remote.stream() as events:
        remote.spawn("reader", "read the notes", name="r")
        for event in events:
            if isinstance(event, ApprovalRequested):
                break
    (request,) = remote.approvals()
    assert (request.tool, request.path) == ("read_file", "/root/r")
    remote.deny(request.id, reason="not today")
    with pytest.raises(ApprovalAlreadyAnswered):
        remote.approve(request.id, note="too late")
    done = remote.wait("r", 60)
    assert done.status is CompletionStatus.COMPLETED
    assert "ship on Tuesday" not in (done.output or "")


def test_async_twins_run_on_the_event_loop(remote: RemoteRuntime) -> None:
    async def main() -> list[str]:
        await remote.spawn_async("echo", "one", name="x")
        await remote.spawn_async("echo", "two", name="y")
        done = await asyncio.gather(remote.wait_async("x", 30), remote.wait_async("y", 30))
        seen = []
        async with remote.stream_async("/root/z") as events:
            await remote.spawn_async("echo", "three", name="z")
            async for event in events:
                seen.append(type(event).__name__)
                if type(event).__name__ == "TurnSettled":
                    break
        assert (await remote.get_async("z")).output == "three"
        await remote.close_tree_async("x")
        return [c.output or "" for c in done] + seen[-1:]

    assert asyncio.run(main()) == ["one", "two", "TurnSettled"]


def test_a_wait_whose_answer_never_arrived_loses_nothing(remote: RemoteRuntime) -> None:
    remote.spawn("blocker", "hold", name="b")

    async def abandoned() -> None:
        waiting = asyncio.ensure_future(remote.wait_async("b", 60))
        await asyncio.sleep(0)  # the call is on its way
        remote.interrupt("b")  # settles b: the wait is answered ...
        waiting.cancel()  # ... but its caller has gone: the completion is given back
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(abandoned())
    assert remote.wait("b", 30).status is CompletionStatus.INTERRUPTED
    assert remote.leases() == {}


def test_no_writer_and_a_stale_socket(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with pytest.raises(NoWriter, match="no store at"):
        retinue.connect(store)
    proc = Writer(store)
    proc.kill()
    assert (store / "control.sock").exists()
    with pytest.raises(NoWriter, match="stale") as stale:
        retinue.connect(store)
    assert stale.value.stale is True
    echo = [retinue.Profile("echo", runner=lambda t: t.task)]
    with Runtime.open(store, profiles=echo), retinue.connect(store) as remote:
        remote.spawn("echo", "back", name="e")  # the next writer replaced the socket
        assert remote.wait("e", 30).output == "back"
    assert not (store / "control.sock").exists()
    with pytest.raises(NoWriter, match="no writer holds") as gone:
        retinue.connect(store)
    assert gone.value.stale is False


def test_a_writer_without_control_says_so(tmp_path: Path) -> None:
    proc = Writer(tmp_path / "store", control=False)
    try:
        with pytest.raises(NoWriter, match="control=False"):
            retinue.connect(proc.store)
        with pytest.raises(StoreLocked):
            Runtime.open(proc.store)
    finally:
        proc.stop()
