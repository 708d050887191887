"""A call sent after a cancelled wait is served after that wait gave back what it took.

Both ends keep the order: the writer serves a call that arrives after a
``Cancel`` once the cancelled call ended, and the client sends a cancelled
call's ``Cancel`` (or gives back an answer that came as its caller gave up)
before any call its caller makes afterwards.

The control socket serves a client's wait under a lease of its own; a wait the
client cancels once the writer claimed its answer gives the completion back
(``ReleaseLease``) only when the answer has landed. A wait the client sends
right after the cancel must reach the supervisor after that give-back: if it
came first, it found the completion still leased and ended with
``NothingToWaitFor`` although the completion was coming back. The writer runs
in this process here, so the interleaving is forced with events (no sleeps):
the claimed answer is held on the store's writer thread until the second wait
has reached the socket.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import wait_until

import retinue
from retinue import (
    Completion,
    ControlError,
    InvalidArgument,
    NothingToWaitFor,
    Profile,
    Runtime,
)
from retinue.actors.calls import _engine
from retinue.actors.commands import Command, Wait
from retinue.actors.supervisor import _host_waits, _transition
from retinue.control import _connection, _link
from retinue.control import _wire as w
from retinue.testing import Gate

HOLD_S = 30.0


def test_a_wait_sent_after_a_cancelled_wait_gets_what_it_gave_back(
    tmp_path: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = threading.Event()  # the first wait's answer is claimed, committed, held
    release = threading.Event()  # ... until the second wait reached the socket
    second = threading.Event()
    waits = 0

    resolve: Callable[[Any, Any], None] = _transition.resolve_future

    def holding_resolve(future: Any, value: Any) -> None:
        if isinstance(value, Completion) and not held.is_set():
            held.set()
            release.wait(HOLD_S)
        resolve(future, value)

    start_call = _connection.Connection._start_call

    async def noting_start_call(self: _connection.Connection, call: w.Call) -> None:
        nonlocal waits
        await start_call(self, call)  # the call's task is queued on the loop
        if isinstance(w.decode_command(call.command), Wait):
            waits += 1
            if waits == 2:
                second.set()

    monkeypatch.setattr(_transition, "resolve_future", holding_resolve)
    monkeypatch.setattr(_connection.Connection, "_start_call", noting_start_call)
    store = tmp_path / "store"
    with (
        Runtime.open(store, profiles=[Profile("gated", runner=gate)]),
        retinue.connect(store) as remote,
    ):
        remote.spawn("gated", "t", name="b")
        gate.release()

        async def scenario() -> Completion:
            first = asyncio.ensure_future(remote.wait_async("b", HOLD_S))
            assert await asyncio.to_thread(held.wait, HOLD_S)
            first.cancel()  # the writer claimed its answer: the cancel must give it back
            with pytest.raises(asyncio.CancelledError):
                await first
            again = asyncio.ensure_future(remote.wait_async("b", HOLD_S))
            assert await asyncio.to_thread(second.wait, HOLD_S)
            release.set()  # the held answer lands; the give-back follows it
            return await again

        done = asyncio.run(scenario())
        assert (done.generation, done.output) == (1, "released:t")
        assert remote.leases() == {}


def test_an_answer_that_came_as_its_caller_gave_up_is_given_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client's link has the first wait's answer, but its caller cancels before the
    # answer is handed over (the link's thread is held right there): the link gives
    # the completion back, before the next wait goes out, instead of dropping the reply
    # (the socket kept its lease until the connection closed: NothingToWaitFor).
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
    store = tmp_path / "store"
    echo = [Profile("echo", runner=lambda t: t.task)]
    with Runtime.open(store, profiles=echo), retinue.connect(store) as remote:
        remote.spawn("echo", "back", name="e")

        async def scenario() -> Completion:
            first = asyncio.ensure_future(remote.wait_async("e", HOLD_S))
            assert await asyncio.to_thread(arrived.wait, HOLD_S)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            go.set()
            return await remote.wait_async("e", HOLD_S)

        done = asyncio.run(scenario())
        assert (done.generation, done.output) == (1, "back")
        assert remote.leases() == {}


def test_a_call_behind_a_cancelled_wait_ends_with_runtime_closed_as_the_runtime_closes(
    tmp_path: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A call queued behind a cancelled wait waits for that wait's answer (its give-back
    # goes first). The answer always lands: every claimed answer is settled by its
    # commit (or failed with the commit's error), and a closing runtime's Shutdown
    # commits behind it, so the close itself waits for it. Here the answer is held on
    # the store's writer thread and the runtime starts closing meanwhile: once the
    # answer lands the queued call goes on and ends with RuntimeClosed, well inside the
    # give-back's 30 s bound (the guard below), not with a dropped connection.
    held = threading.Event()
    release = threading.Event()
    second = threading.Event()
    waits = 0
    resolve: Callable[[Any, Any], None] = _transition.resolve_future

    def holding_resolve(future: Any, value: Any) -> None:
        if isinstance(value, Completion) and not held.is_set():
            held.set()
            release.wait(HOLD_S)
        resolve(future, value)

    start_call = _connection.Connection._start_call

    async def noting_start_call(self: _connection.Connection, call: w.Call) -> None:
        nonlocal waits
        await start_call(self, call)
        if isinstance(w.decode_command(call.command), Wait):
            waits += 1
            if waits == 2:
                second.set()

    monkeypatch.setattr(_transition, "resolve_future", holding_resolve)
    monkeypatch.setattr(_connection.Connection, "_start_call", noting_start_call)
    store = tmp_path / "store"
    rt = Runtime.open(store, profiles=[Profile("gated", runner=gate)])
    closing = threading.Thread(target=rt.shutdown)
    try:
        with retinue.connect(store) as remote:
            remote.spawn("gated", "t", name="b")
            gate.release()

            async def scenario() -> BaseException | Completion:
                first = asyncio.ensure_future(remote.wait_async("b", HOLD_S))
                assert await asyncio.to_thread(held.wait, HOLD_S)
                first.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await first
                again = asyncio.ensure_future(remote.wait_async("b", HOLD_S))
                assert await asyncio.to_thread(second.wait, HOLD_S)
                closing.start()  # new commands are refused from now on
                await asyncio.to_thread(wait_closing, rt)
                release.set()  # the held answer lands; its give-back, then the call
                try:
                    return await asyncio.wait_for(again, HOLD_S / 2)
                except retinue.RetinueError as exc:
                    return exc

            outcome = asyncio.run(scenario())
        assert isinstance(outcome, retinue.RuntimeClosed), outcome
    finally:
        release.set()
        if closing.ident is not None:
            closing.join(HOLD_S)
        rt.shutdown()  # idempotent: returns once the close is done
    with Runtime.open(store, profiles=[Profile("gated", runner=gate)]) as again:
        # the socket's lease of the cancelled wait is released at the latest by the next
        # writer's socket; the completion is there to receive
        assert again.wait("b", 30).output == "released:t"
        assert again.leases() == {}


def wait_closing(rt: Runtime) -> None:
    """Return once ``rt`` refuses new commands (its close has begun)."""
    wait_until(lambda: rt.state is not retinue.RuntimeState.OPEN, HOLD_S, "the close began")


def test_a_call_behind_a_cancelled_wait_whose_claimed_answer_was_undone_goes_on(
    tmp_path: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The one answer that never lands: a command claims a blocked wait's answer, the
    # wait is cancelled meanwhile (too late: the answer is claimed), and the command then
    # fails: its rollback puts the wait back, unanswered and no longer awaited. The
    # cancelled wait gives it up too, so it ends at once (not after the give-back's 30 s
    # bound) and the call queued behind it on the socket goes on.
    registered = threading.Event()
    claimed = threading.Event()
    cancelled = threading.Event()
    failing = threading.Event()
    serve_host = _host_waits.HostWaits.serve_host
    register = _host_waits.HostWaits._register

    def noting_register(self: _host_waits.HostWaits, tx: Any, record: Any, lease: Any) -> None:
        register(self, tx, record, lease)
        registered.set()

    def failing_serve_host(self: _host_waits.HostWaits, tx: Any, agent_id: str) -> None:
        serve_host(self, tx, agent_id)
        if failing.is_set() and not claimed.is_set():
            claimed.set()
            cancelled.wait(HOLD_S)  # the remote wait is cancelled while its answer is claimed
            raise InvalidArgument("a command that failed after it served a host wait")

    give_back_in_order = _engine._give_back_in_order

    async def noting_give_back(future: Any, receipt: Any) -> None:
        cancelled.set()
        await give_back_in_order(future, receipt)

    monkeypatch.setattr(_host_waits.HostWaits, "serve_host", failing_serve_host)
    monkeypatch.setattr(_host_waits.HostWaits, "_register", noting_register)
    monkeypatch.setattr(_engine, "_give_back_in_order", noting_give_back)
    store = tmp_path / "store"
    with (
        Runtime.open(store, profiles=[Profile("gated", runner=gate)]) as rt,
        retinue.connect(store) as remote,
    ):
        rt.spawn("gated", "t", name="b")
        gate.release("t")  # only the first turn: the follow-up's blocks
        assert rt.wait("b", HOLD_S, lease="held").generation == 1
        rt.follow_up("b", "more")  # b runs again (gated): a host wait on it blocks
        registered.clear()

        async def scenario() -> BaseException | Completion:
            first = asyncio.ensure_future(remote.wait_async("b", HOLD_S))
            assert await asyncio.to_thread(registered.wait, HOLD_S)  # blocked on b
            failing.set()
            releasing = asyncio.ensure_future(asyncio.to_thread(rt.release_lease, "held"))
            assert await asyncio.to_thread(claimed.wait, HOLD_S)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            again = asyncio.ensure_future(remote.wait_async("b", 0))
            with pytest.raises(InvalidArgument):
                await releasing  # rolled back: the lease holds generation 1 again
            try:
                return await asyncio.wait_for(again, HOLD_S / 2)
            except retinue.RetinueError as exc:
                return exc

        outcome = asyncio.run(scenario())
        assert isinstance(outcome, retinue.WaitTimeout), outcome  # b still runs: nothing new
        assert set(rt.leases()) == {"held"}
        gate.release()
        assert (rt.wait("b", HOLD_S).generation, rt.release_lease("held")) == (2, True)
        assert rt.wait("b", HOLD_S).generation == 1  # what the lease held, given back


def test_a_wait_cancelled_while_its_answer_waits_to_be_written_gives_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer was claimed and is queued behind another call's write (the connection's
    send lock held) when the client's Cancel lands: the completion is given back, and a
    wait sent after the cancel gets it (review54: the cancel of an answer being sent was
    outside the give-back, so the completion stayed leased until the client went)."""
    conns: list[tuple[_connection.Connection, asyncio.AbstractEventLoop]] = []
    start_call = _connection.Connection._start_call

    async def noting(self: _connection.Connection, call: w.Call) -> None:
        if not conns:
            conns.append((self, asyncio.get_running_loop()))
        await start_call(self, call)

    monkeypatch.setattr(_connection.Connection, "_start_call", noting)
    store = tmp_path / "store"
    echo = [Profile("echo", runner=lambda t: t.task)]
    with Runtime.open(store, profiles=echo), retinue.connect(store) as remote:
        remote.spawn("echo", "back", name="e")
        remote.wait_idle(HOLD_S)
        conn, loop = conns[0]
        locked, release = threading.Event(), threading.Event()

        async def hold() -> None:  # what another call's answer being written does
            async with conn._sending:
                locked.set()
                await asyncio.to_thread(release.wait, HOLD_S)

        holder = asyncio.run_coroutine_threadsafe(hold(), loop)
        assert locked.wait(HOLD_S)

        async def scenario() -> Any:
            first = asyncio.ensure_future(remote.wait_async("e", HOLD_S))
            await asyncio.to_thread(wait_until, lambda: bool(conn._unconfirmed), HOLD_S)
            (answering,) = conn._calls.values()  # answered; its write waits for the lock
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            again = asyncio.ensure_future(remote.wait_async("e", HOLD_S))
            # the Cancel ended the first call, and the second reached the socket
            await asyncio.to_thread(
                wait_until, lambda: answering.done() and bool(conn._calls), HOLD_S
            )
            release.set()
            return await again

        got = asyncio.run(scenario())
        holder.result(HOLD_S)
        assert isinstance(got, Completion) and got.output == "back"
        assert remote.leases() == {}


def test_a_call_reopening_its_connection_as_the_client_disconnects_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer dropped the client's connection; a call is opening a new one when the
    client disconnects: the call ends with ControlError, its caller does not wait for ever
    (review54: the close stopped the link's loop under the call, whose answer never came)."""
    conns: list[tuple[_connection.Connection, asyncio.AbstractEventLoop]] = []
    start_call = _connection.Connection._start_call

    async def noting(self: _connection.Connection, call: w.Call) -> None:
        conns.append((self, asyncio.get_running_loop()))
        await start_call(self, call)

    monkeypatch.setattr(_connection.Connection, "_start_call", noting)
    store = tmp_path / "store"
    echo = [Profile("echo", runner=lambda t: t.task)]
    with Runtime.open(store, profiles=echo):
        remote = retinue.connect(store)
        remote.agents()
        conn, loop = conns[-1]
        loop.call_soon_threadsafe(conn.writer.close)  # the writer drops the connection
        session = remote._link._session
        assert session is not None
        wait_until(lambda: session.closed, HOLD_S)
        opening = threading.Event()

        async def never_opens(*args: Any) -> Any:  # a reconnect that does not end by itself
            opening.set()
            await asyncio.Event().wait()

        monkeypatch.setattr(_link.Session, "open", never_opens)
        got: list[BaseException] = []

        def caller() -> None:
            try:
                remote.agents()
            except BaseException as exc:  # what the caller is told
                got.append(exc)

        thread = threading.Thread(target=caller)
        thread.start()
        assert opening.wait(HOLD_S)
        remote.disconnect()
        thread.join(HOLD_S)
        assert not thread.is_alive(), "the call outlived the disconnect"
        assert len(got) == 1 and isinstance(got[0], ControlError), got


def wait_cut_by_a_disconnect(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spawn ``e`` (an echo) and wait for it remotely, with the client's ``disconnect()``
    landing between the answer and its confirm; the wait must end ``ControlError``."""
    remote = retinue.connect(store)
    remote.spawn("echo", "back", name="e")
    remote.wait_idle(HOLD_S)
    decode = w.decode_value

    def disconnect_first(*args: Any) -> Any:  # another thread's disconnect, just then
        remote._link.close()
        return decode(*args)

    monkeypatch.setattr(w, "decode_value", disconnect_first)
    with pytest.raises(ControlError, match="the writer gives back what it took"):
        remote.wait("e", HOLD_S)
    monkeypatch.setattr(w, "decode_value", decode)


def test_an_answer_the_client_cannot_confirm_is_not_kept_by_the_caller_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``disconnect()`` lands between a wait's answer and its confirm: the writer gives the
    completion back as the connection ends, so the caller gets ControlError, not the value
    as well (review55: both had it, and the next wait received it a second time)."""
    store = tmp_path / "store"
    with Runtime.open(store, profiles=[Profile("echo", runner=lambda t: t.task)]):
        wait_cut_by_a_disconnect(store, monkeypatch)
        with retinue.connect(store) as again:
            wait_until(lambda: not again.leases(), HOLD_S)  # the writer saw the drop
            got = again.wait("e", HOLD_S)
            assert isinstance(got, Completion) and got.output == "back"
            with pytest.raises(NothingToWaitFor):
                again.wait("e", 0)  # once, not twice


def test_a_wait_on_a_new_connection_right_after_a_disconnect_finds_what_was_given_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``disconnect()`` raced a wait's answer (ControlError: lost nothing, call again) and the
    caller waits again at once on a new connection: the writer's give-back reaches the
    supervisor first (review55: the new wait came first and was told NothingToWaitFor,
    though the completion was on its way back)."""
    released = threading.Event()  # the writer's end of the dropped connection is held
    end = _connection.Connection._end

    async def held_end(self: _connection.Connection) -> None:
        # Held until the next wait is answered, or half a second (within the client's
        # _END_WAIT_S): a client that does not wait for the writer's end sends its next
        # wait meanwhile; one that does waits this long.
        await asyncio.to_thread(released.wait, _link._END_WAIT_S / 2)
        await end(self)

    monkeypatch.setattr(_connection.Connection, "_end", held_end)
    store = tmp_path / "store"
    with Runtime.open(store, profiles=[Profile("echo", runner=lambda t: t.task)]):
        wait_cut_by_a_disconnect(store, monkeypatch)
        with retinue.connect(store) as again:
            try:
                got = again.wait("e", HOLD_S)  # at once: no wait for the writer's give-back
            finally:
                released.set()
            assert isinstance(got, Completion) and got.output == "back"


def test_a_confirm_decided_before_a_disconnect_is_written_before_the_connection_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client decided to keep an answer (its confirm queued) and ``disconnect()`` runs
    before the confirm is written: the close writes it before ending the connection, so
    the writer keeps the completion for this caller and does not give it to a next wait
    (review56: the queued confirm was dropped by the close, and the next wait received the
    completion a second time)."""
    confirm = _link.Session.confirm
    store = tmp_path / "store"
    with Runtime.open(store, profiles=[Profile("echo", runner=lambda t: t.task)]):
        remote = retinue.connect(store)
        remote.spawn("echo", "back", name="e")
        remote.wait_idle(HOLD_S)

        def then_disconnect(self: _link.Session, frame: Any) -> bool:
            kept = confirm(self, frame)
            remote._link.close()  # another thread's disconnect, before the write
            return kept

        monkeypatch.setattr(_link.Session, "confirm", then_disconnect)
        first = remote.wait("e", HOLD_S)
        monkeypatch.setattr(_link.Session, "confirm", confirm)
        assert isinstance(first, Completion) and first.output == "back"
        with retinue.connect(store) as again:
            wait_until(lambda: not again.leases(), HOLD_S)  # the writer saw the confirm
            with pytest.raises(NothingToWaitFor):
                again.wait("e", 0)  # received once, not twice
