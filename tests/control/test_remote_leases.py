"""Leases over the control socket: the socket's own, and the caller's, as in process.

The socket takes a client's wait without a lease under a lease of its own
(``retinue-control:<uuid>``, 48 characters). ``dedup_key_max_length`` bounds a
caller's keys, not that lease: a writer opened with a small bound still serves
``wait`` and ``run``, while a caller's lease over the bound is refused as in
process (a lease of the socket's form included: the mark that exempts the
socket's own never crosses the wire). A wait under the caller's lease cancelled
once its answer reached the client releases that lease, as in process.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support import wait_until

import retinue
from control.test_socket import _read
from retinue import Completion, DedupKeyTooLong, Limits, Profile, Runtime
from retinue.actors.commands import HOST, Command, Run, Wait, decode_command, encode_command
from retinue.control import _link
from retinue.control import _wire as w
from retinue.control._serving import LEASE_PREFIX
from retinue.errors import ArgumentTypeError

HOLD_S = 30.0
ECHO = [Profile("echo", runner=lambda t: t.task)]
SMALL = Limits(dedup_key_max_length=8)


def test_a_small_key_bound_still_serves_remote_waits_and_runs(tmp_path: Path) -> None:
    with (
        Runtime.open(tmp_path / "s", profiles=ECHO, limits=SMALL) as rt,
        retinue.connect(rt.path) as remote,
    ):
        remote.spawn("echo", "waited", name="e")
        assert remote.wait("e", 30).output == "waited"
        assert remote.run("echo", "ran", name="r", timeout=30).output == "ran"

        async def both() -> tuple[Completion, Completion]:
            await remote.spawn_async("echo", "waited", name="ea")
            waited = await remote.wait_async("ea", 30)
            return waited, await remote.run_async("echo", "ran", name="ra", timeout=30)

        waited, ran = asyncio.run(both())
        assert (waited.output, ran.output) == ("waited", "ran")
        assert remote.leases() == {}  # each socket lease acknowledged on the client's confirm


def test_a_callers_lease_over_the_bound_is_refused_over_the_socket(tmp_path: Path) -> None:
    with (
        Runtime.open(tmp_path / "s", profiles=ECHO, limits=SMALL) as rt,
        retinue.connect(rt.path) as remote,
    ):
        remote.spawn("echo", "kept", name="e")
        forged = f"{LEASE_PREFIX}{'0' * 32}"  # the socket's form: still the caller's key
        for lease in ("ninechars", forged):
            with pytest.raises(DedupKeyTooLong):
                remote.wait("e", 30, lease=lease)
            with pytest.raises(DedupKeyTooLong):
                remote.run("echo", "x", name="never", lease=lease, timeout=30)
        assert [a.path for a in remote.agents()] == ["/root/e"]  # the refused run made none
        assert remote.wait("e", 30, lease="eight-ch").output == "kept"  # at the bound: served
        assert set(remote.leases()) == {"eight-ch"}


def test_the_internal_lease_mark_never_crosses_the_wire() -> None:
    for command in (
        Wait(HOST, "e", lease="k", internal_lease=True),
        Run(HOST, "echo", "t", lease="k", internal_lease=True),
    ):
        decoded: Any = decode_command(encode_command(command))
        assert (decoded.lease, decoded.internal_lease) == ("k", False)
    sent = msgspec.msgpack.encode({"type": "Wait", "ref": "e", "lease": "k", "internal_lease": 1})
    with pytest.raises(ArgumentTypeError, match="internal_lease"):
        decode_command(sent)


def test_a_cancelled_wait_async_releases_the_callers_lease_as_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The answer has reached the client's link when its caller cancels (the link's
    # thread is held right there): in process the cancelled wait releases its lease,
    # so the completion is the host's to receive again; over the socket too.
    arrived = threading.Event()
    go = threading.Event()
    session_call = _link.Session.call

    async def holding_call(
        self: _link.Session, command: Command[Any], timeout: float | None, guard: float
    ) -> w.Answer:
        answer = await session_call(self, command, timeout, guard)
        if isinstance(command, Wait) and not arrived.is_set():
            arrived.set()
            go.wait(HOLD_S)  # the link's loop is held with the answer in hand
        return answer

    monkeypatch.setattr(_link.Session, "call", holding_call)
    with (
        Runtime.open(tmp_path / "s", profiles=ECHO) as rt,
        retinue.connect(rt.path) as remote,
    ):
        remote.spawn("echo", "back", name="e")

        async def scenario() -> Completion:
            first = asyncio.ensure_future(remote.wait_async("e", HOLD_S, lease="mine"))
            assert await asyncio.to_thread(arrived.wait, HOLD_S)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            go.set()
            assert await remote.leases_async() == {}  # released, as in process
            return await remote.wait_async("e", HOLD_S, lease="again")

        done = asyncio.run(scenario())
        assert (done.generation, done.output) == (1, "back")
        assert set(rt.leases()) == {"again"}


def test_a_callers_lease_outlives_a_connection_that_closed_unconfirmed(tmp_path: Path) -> None:
    # The caller's lease is the caller's to acknowledge: an answer read but never
    # confirmed (the client died) keeps it stored, and a retry with it gets the same
    # completion; the socket's own lease, on the same connection, is released.
    with Runtime.open(tmp_path / "s", profiles=ECHO) as rt:
        rt.spawn("echo", "kept", name="e")
        rt.spawn("echo", "other", name="f")
        raw = socket.socket(socket.AF_UNIX)
        raw.settimeout(30)
        raw.connect(str(rt.path / "control.sock"))
        with raw:
            assert isinstance(w.decode_server(_read(raw)), w.Hello)
            for call_id, wait in ((1, Wait(HOST, "e", lease="mine")), (2, Wait(HOST, "f"))):
                call = w.Call(id=call_id, command=encode_command(wait), timeout=30)
                raw.sendall(w.framed(w.encode(call), 1 << 20))
            for _ in range(2):
                answer = w.decode_server(_read(raw))
                assert isinstance(answer, w.Answer) and answer.confirm and answer.error is None
            assert len(rt.leases()) == 2
        wait_until(lambda: set(rt.leases()) == {"mine"}, 30, "the socket's lease released")
        assert rt.wait("f", 30).output == "other"
        with retinue.connect(rt.path) as remote:
            assert remote.wait("e", 30, lease="mine").output == "kept"
            assert remote.ack_lease("mine")
        assert rt.leases() == {}
