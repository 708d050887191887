"""``RemoteRuntime.run`` / ``run_async``: a spawn and its first completion in one call over
the control socket, losing nothing to a timeout, a cancel or a dropped connection.

Most tests run against a writer in a child process (:mod:`control.writer`); the
unconfirmed answer is read off a raw socket of a writer in this process.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import pytest
from support import wait_until

import retinue
from control.test_socket import _read
from control.writer import Writer
from retinue import (
    AgentState,
    CompletionStatus,
    InvalidArgument,
    Limits,
    NothingToWaitFor,
    Profile,
    RemoteRuntime,
    Runtime,
    UnknownProfile,
    WaitTimeout,
)
from retinue.actors.commands import HOST, Run
from retinue.control import _wire as w
from retinue.errors import ControlError, LimitExceeded


def test_run_returns_the_first_completion(remote: RemoteRuntime) -> None:
    done = remote.run("echo", "hello", name="a", timeout=30)
    assert (done.status, done.output) == (CompletionStatus.COMPLETED, "hello")
    assert remote.get("a").id == done.agent_id
    assert remote.leases() == {}  # the socket's lease was acknowledged once received
    assert remote.backlog().host_pending_completions == 0

    async def main() -> list[str]:
        runs = [remote.run_async("echo", text, name=text, timeout=30) for text in ("x", "y")]
        return [c.output or "" for c in await asyncio.gather(*runs)]

    assert asyncio.run(main()) == ["x", "y"]
    assert remote.leases() == {}


def test_a_retried_run_waits_on_the_agent_the_first_made(remote: RemoteRuntime) -> None:
    first = remote.run("echo", "once", idempotency_key="k", timeout=30)
    with pytest.raises(NothingToWaitFor):  # the first run received its completion
        remote.run("echo", "once", idempotency_key="k", timeout=30)
    assert [a.id for a in remote.agents()] == [first.agent_id]  # spawned once

    # Under the caller's lease, a retry with the same lease gets what the first took.
    leased = remote.run("echo", "kept", idempotency_key="j", lease="mine", timeout=30)
    again = remote.run("echo", "kept", idempotency_key="j", lease="mine", timeout=30)
    assert again.id == leased.id and set(remote.leases()) == {"mine"}
    assert remote.ack_lease("mine") is True
    assert len(remote.agents()) == 2


def test_a_refused_run_spawns_nothing(remote: RemoteRuntime) -> None:
    with pytest.raises(UnknownProfile):
        remote.run("nobody", "x", name="n", timeout=30)
    with pytest.raises(InvalidArgument):
        remote.run("echo", "x", name="t", timeout=-1)
    assert remote.agents(include_closed=True) == []


def test_a_run_that_times_out_names_its_agent_which_keeps_running(
    remote: RemoteRuntime,
) -> None:
    with pytest.raises(WaitTimeout) as late:
        remote.run("blocker", "hold", name="b", timeout=0)
    assert late.value.path == "/root/b"
    assert remote.get(late.value.path).state is AgentState.RUNNING
    remote.interrupt("b")
    assert remote.wait("b", 30).status is CompletionStatus.INTERRUPTED
    assert remote.leases() == {}

    async def late_async() -> str | None:
        with pytest.raises(WaitTimeout) as timed_out:
            await remote.run_async("blocker", "hold", name="c", timeout=0)
        return timed_out.value.path

    assert asyncio.run(late_async()) == "/root/c"
    remote.interrupt("c")
    assert remote.wait("c", 30).status is CompletionStatus.INTERRUPTED


def test_a_cancelled_run_async_loses_nothing(remote: RemoteRuntime) -> None:
    async def abandoned() -> None:
        running = asyncio.ensure_future(remote.run_async("blocker", "hold", name="b", timeout=60))
        while not [a for a in await remote.agents_async() if a.path == "/root/b"]:
            await asyncio.sleep(0.01)  # the run spawned b and waits on it
        remote.interrupt("b")  # settles b (this loop blocked): the run is answered ...
        running.cancel()  # ... but its caller has gone: the completion is given back
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(abandoned())
    assert remote.wait("b", 30).status is CompletionStatus.INTERRUPTED
    assert remote.leases() == {}


def test_a_run_whose_connection_drops_loses_nothing(writer: Writer) -> None:
    dropped = retinue.connect(writer.store)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            dropped.run("blocker", "hold", name="b", timeout=60)
        except BaseException as exc:  # the thread reports what it got
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    with retinue.connect(writer.store) as remote:
        wait_until(lambda: bool(remote.agents()), 30, "the run spawned b")
        dropped.disconnect()  # the run in flight ends, and the writer's wait with it
        thread.join(60)
        assert not thread.is_alive() and isinstance(outcome[0], ControlError)
        remote.interrupt("b")
        assert remote.wait("b", 30).status is CompletionStatus.INTERRUPTED
        assert remote.leases() == {}


def test_an_unconfirmed_run_answer_is_given_back_when_its_connection_closes(
    tmp_path: Path,
) -> None:
    """A client that reads a run's answer but never confirms it (it died) loses nothing."""
    echo = [Profile("echo", runner=lambda t: t.task)]
    with Runtime.open(tmp_path / "s", profiles=echo) as rt:
        raw = socket.socket(socket.AF_UNIX)
        raw.settimeout(30)
        raw.connect(str(rt.path / "control.sock"))
        with raw:
            assert isinstance(w.decode_server(_read(raw)), w.Hello)
            command = w.encode_command(Run(HOST, "echo", "kept", "e", "/root"))
            raw.sendall(w.framed(w.encode(w.Call(id=1, command=command, timeout=30)), 1 << 20))
            answer = w.decode_server(_read(raw))
            assert isinstance(answer, w.Answer) and answer.confirm and answer.error is None
            assert len(rt.leases()) == 1  # taken under the socket's lease, not acknowledged
        wait_until(lambda: rt.leases() == {}, 30, "the socket's lease released")
        assert rt.wait("e", 30).output == "kept"


def test_a_run_answer_too_large_to_send_is_given_back(tmp_path: Path) -> None:
    large = [Profile("large", runner=lambda t: t.task * 5_000)]
    limits = Limits(control_max_message_bytes=4096)
    with Runtime.open(tmp_path / "s", profiles=large, limits=limits) as rt:
        with retinue.connect(rt.path) as remote:
            with pytest.raises(LimitExceeded, match="control_max_message_bytes"):
                remote.run("large", "xy", name="big", timeout=30)
            assert remote.leases() == {}  # refused, and the socket's lease released
        assert rt.wait("big", 30).output == "xy" * 5_000
