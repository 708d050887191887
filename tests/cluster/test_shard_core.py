"""A shard's core without Ray: request ids answered once, leases, inbox waits, reopen.

:class:`~retinue.cluster.shard.ShardCore` is what each Ray actor hosts; here
it runs over a real store in ``tmp_path`` and is fed the same encoded calls a
face sends, on an event loop of the test's own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import wait_until

from retinue import (
    AgentInfo,
    AgentState,
    Completion,
    DuplicateAgentPath,
    InvalidArgument,
    Message,
    NothingToWaitFor,
    RuntimeClosed,
)
from retinue.actors.commands import (
    HOST,
    AckLease,
    Agents,
    CloseTree,
    Get,
    HostMessages,
    Inspect,
    ReleaseLease,
    Send,
    Spawn,
    Wait,
)
from retinue.cluster import wire as w
from retinue.cluster._released import Released
from retinue.cluster.shard import ShardCore
from retinue.protocol.details import AgentDetail
from retinue.testing import wait_settled


def call(core: ShardCore, message: w.Call, kind: type[Any] = AgentInfo) -> Any:
    return w.decode_reply(asyncio.run(core.handle(w.encode_call(message))), kind)


def leased(lease: str, local: str, timeout: float) -> w.Run:
    """A host wait on ``local`` under ``lease``, as the face sends it."""
    return w.run(Wait(HOST, local, lease=lease), timeout=timeout)


def inbox(rid: str, timeout: float) -> w.Run:
    """A look at the host's inbox under request id ``rid``, as the face sends it."""
    return w.run(HostMessages(HOST), rid=rid, timeout=timeout)


def test_a_repeated_request_id_is_answered_from_the_log(open_core: Any) -> None:
    core = open_core()
    spawn = w.run(Spawn(HOST, "worker", "t", "a", "/root", "~rid-1"), rid="rid-1")
    first = asyncio.run(core.handle(w.encode_call(spawn)))
    again = asyncio.run(core.handle(w.encode_call(spawn)))
    assert again == first
    info = w.decode_reply(first, AgentInfo)
    assert info.id.startswith("s1-")
    assert len(core.rt.agents()) == 1
    # Refusals are answers too: the same request id gets the same refusal.
    clash = w.run(Spawn(HOST, "worker", "t", "a", "/root", "~rid-2"), rid="rid-2")
    with pytest.raises(DuplicateAgentPath):
        call(core, clash)
    core.rt.close_tree(info.id.removeprefix("s1-"))
    with pytest.raises(DuplicateAgentPath):
        call(core, clash)  # recorded: not run again although the name is free now


def test_the_log_outlives_the_shard_process(open_core: Any, tmp_path: Path) -> None:
    core = open_core()
    spawn = w.run(Spawn(HOST, "worker", "t", "a", "/root", "~rid-1"), rid="rid-1")
    first = call(core, spawn)
    core.close()
    again = open_core()
    assert call(again, spawn) == first
    assert len(again.rt.agents()) == 1


def test_a_crash_between_the_runtime_and_the_log_still_spawns_and_sends_once(
    open_core: Any,
) -> None:
    core = open_core()
    # What the runtime committed before a crash that the log never recorded:
    made = core.rt.spawn("worker", "t", name="a", idempotency_key="~rid-1")
    sent = core.rt.send(made.id, "hi", dedup_key="~rid-2")
    # The retried calls carry the same keys: the runtime's own commit answers them.
    info = call(core, w.run(Spawn(HOST, "worker", "t", "a", "/root", "~rid-1"), rid="rid-1"))
    assert info.id == f"s1-{made.id}"
    message = call(core, w.run(Send(HOST, made.id, "hi", "~rid-2"), rid="rid-2"), Message)
    assert message.id == f"s1-{sent.id}"
    assert len(core.rt.agents()) == 1
    assert [m.id for m in core.rt.inspect(made.id).unread] == [sent.id]


def test_concurrent_repeats_run_the_call_once(open_core: Any) -> None:
    core = open_core()
    spawn = w.run(Spawn(HOST, "worker", "t", None, "/root", "~rid-1"), rid="rid-1")

    async def both() -> list[bytes]:
        payload = w.encode_call(spawn)
        return list(await asyncio.gather(*(core.handle(payload) for _ in range(5))))

    replies = asyncio.run(both())
    assert len(set(replies)) == 1
    assert len(core.rt.agents()) == 1


def test_a_closing_runtime_is_not_recorded_as_the_answer(open_core: Any) -> None:
    core = open_core()
    core.rt.shutdown()
    with pytest.raises(RuntimeClosed):
        call(core, w.run(Spawn(HOST, "worker", "t", "a", "/root", "~rid-1"), rid="rid-1"))
    assert core.log.get("rid-1") is None  # the retry after a restart runs it


def test_a_lease_is_held_until_acknowledged(open_core: Any) -> None:
    core = open_core()
    a = call(core, w.run(Spawn(HOST, "worker", "t", "a", "/root", "~r1"), rid="r1"))
    local = a.id.removeprefix("s1-")
    done = call(core, leased("L1", local, 10.0), Completion)
    assert done.id == f"{a.id}:1"
    assert call(core, leased("L1", local, 0.0), Completion) == done  # the reply was lost
    assert call(core, w.Ping(), w.Pong).leases == 1
    assert call(core, w.run(AckLease("L1")), bool) is True
    assert call(core, w.Ping(), w.Pong).leases == 0
    with pytest.raises(NothingToWaitFor):
        call(core, leased("L2", local, 0.0), Completion)


def test_a_lease_never_acknowledged_is_released_after_its_timeout(open_core: Any) -> None:
    core = open_core(lease_timeout_s=0.2)
    a = call(core, w.run(Spawn(HOST, "worker", "t", "a", "/root", "~r1"), rid="r1"))
    local = a.id.removeprefix("s1-")
    done = call(core, leased("L1", local, 10.0), Completion)
    wait_until(lambda: not core.rt.leases(), what="the lease released")
    assert call(core, leased("L2", local, 5.0), Completion) == done  # handed out again


def test_leases_restored_on_reopen_are_released_if_never_acknowledged(open_core: Any) -> None:
    core = open_core()
    a = call(core, w.run(Spawn(HOST, "worker", "t", "a", "/root", "~r1"), rid="r1"))
    local = a.id.removeprefix("s1-")
    done = call(core, leased("L1", local, 10.0), Completion)
    core.close()  # the face never acknowledged; the shard restarts
    again = open_core(lease_timeout_s=0.2)
    assert call(again, w.Ping(), w.Pong).leases == 1
    assert call(again, leased("L1", local, 0.0), Completion) == done
    wait_until(lambda: not again.rt.leases(), what="the restored lease released")
    assert call(again, leased("L2", local, 5.0), Completion) == done


def test_a_stopped_inbox_wait_ends_empty_and_loses_nothing(open_core: Any) -> None:
    core = open_core()

    async def scenario() -> None:
        blocked = asyncio.ensure_future(core.handle(w.encode_call(inbox("m1", 30.0))))
        await asyncio.sleep(0.1)
        await core.handle(w.encode_call(w.StopWaiting(("m1",))))
        assert w.decode_reply(await blocked, list[Message]) == []
        await core.handle(
            w.encode_call(w.run(Spawn(HOST, "talker", "t", "t", "/root", "~r1"), rid="r1"))
        )
        for attempt in range(200):
            poll = inbox(f"poll-{attempt}", 0.05)
            got = w.decode_reply(await core.handle(w.encode_call(poll)), list[Message])
            if got:
                assert [m.content for m in got] == ["hello from t"]
                assert got[0].id.startswith("s1-/root:")
                return
        raise AssertionError("the talker's message never arrived")

    asyncio.run(scenario())


def test_reads_map_every_id(open_core: Any) -> None:
    core = open_core()
    a = call(core, w.run(Spawn(HOST, "worker", "t", "a", "/root", "~r1"), rid="r1"))
    # Its turn settles on its own: read it once settled, or the two reads may differ.
    wait_until(lambda: not core.rt.get("/root/a").state.busy, what="the worker settled")
    assert call(core, w.run(Get(HOST, "/root/a"))) == call(
        core, w.run(Get(HOST, a.id.removeprefix("s1-")))
    )
    (listed,) = call(core, w.run(Agents(HOST, False)), list[AgentInfo])
    assert listed.id == a.id
    detail = call(core, w.run(Inspect(HOST, "/root/a", 5)), AgentDetail)
    assert detail.info.id == a.id
    closed = call(core, w.run(CloseTree(HOST, a.id.removeprefix("s1-")), rid="r2"), list[AgentInfo])
    assert [(c.id, c.state) for c in closed] == [(a.id, AgentState.CLOSED)]


# -- a released lease: whatever the order its release and its wait arrive in --------------


def release(lease: str) -> w.Run:
    """The release a face fires when its wait under ``lease`` is cancelled."""
    return w.run(ReleaseLease(lease))


def settled(core: ShardCore, name: str) -> str:
    """Spawn a worker ``name`` and wait until its turn settled; return its shard-local id.

    The spawn is answered before its turn starts, so the turn may still run as the
    answer arrives: the tests' waits of 0 s need it settled.
    """
    info = call(core, w.run(Spawn(HOST, "worker", "t", name, "/root", f"~{name}"), rid=name))
    local: str = info.id.removeprefix("s1-")
    wait_settled(core.rt, local)
    return local


def test_a_release_before_its_wait_makes_the_wait_take_nothing(open_core: Any) -> None:
    core = open_core()
    local = settled(core, "a")
    assert call(core, release("L1"), bool) is False  # nothing under it yet: remembered
    assert core.released_leases() == 1
    with pytest.raises(InvalidArgument, match="released"):
        call(core, leased("L1", local, 10.0), Completion)
    assert core.rt.leases() == {}
    assert call(core, w.Ping(), w.Pong).leases == 0
    # As soon as the turn settles, not after lease_timeout_s (120 s).
    done = call(core, leased("L2", local, 10.0), Completion)
    assert done.id.endswith(":1")


def test_a_release_during_its_wait_ends_the_wait_and_loses_nothing(
    open_core: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    core = open_core()
    info = call(core, w.run(Spawn(HOST, "gated", "g1", "g", "/root", "~g"), rid="g"))
    local = info.id.removeprefix("s1-")

    async def scenario() -> None:
        blocked = asyncio.ensure_future(core.handle(w.encode_call(leased("L1", local, 30.0))))
        while "L1" not in core._leased:
            await asyncio.sleep(0.01)
        reply = await core.handle(w.encode_call(release("L1")))
        assert w.decode_reply(reply, bool) is False  # the wait had taken nothing
        with pytest.raises(InvalidArgument, match="released"):
            w.decode_reply(await blocked, Completion)
        assert not core._leased
        (gates / "g1").touch()
        done = w.decode_reply(
            await core.handle(w.encode_call(leased("L2", local, 30.0))), Completion
        )
        assert (done.generation, done.output) == (1, "done:g1")

    asyncio.run(scenario())
    assert set(core.rt.leases()) == {"L2"}


def test_a_release_after_its_wait_took_the_completion_gives_it_back(open_core: Any) -> None:
    core = open_core()
    local = settled(core, "a")
    done = call(core, leased("L1", local, 10.0), Completion)  # its caller was gone: unread
    assert call(core, w.Ping(), w.Pong).leases == 1
    assert call(core, release("L1"), bool) is True
    assert call(core, w.Ping(), w.Pong).leases == 0
    with pytest.raises(InvalidArgument, match="released"):
        call(core, leased("L1", local, 0.0), Completion)  # a late repeat takes nothing
    assert call(core, leased("L2", local, 0.0), Completion) == done


def test_a_call_cancelled_as_its_wait_takes_the_completion_gives_it_back(
    open_core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cancel (ray.cancel) reaches the call in the pass between its wait taking the
    # completion and the call resuming: nobody will read the answer, so it goes back.
    core = open_core()
    local = settled(core, "a")
    real_wait = core.rt.wait_async

    async def scenario() -> None:
        outer: asyncio.Future[bytes] | None = None

        async def took_then_cancelled(*args: Any, **kwargs: Any) -> Completion:
            done: Completion = await real_wait(*args, **kwargs)
            assert outer is not None
            # Runs once this wait has ended with the completion, before the call resumes.
            asyncio.get_running_loop().call_soon(outer.cancel)
            return done

        monkeypatch.setattr(core.rt, "wait_async", took_then_cancelled)
        outer = asyncio.ensure_future(core.handle(w.encode_call(leased("L1", local, 10.0))))
        with pytest.raises(asyncio.CancelledError):
            await outer
        monkeypatch.setattr(core.rt, "wait_async", real_wait)

    asyncio.run(scenario())
    assert core.rt.leases() == {}
    done = call(core, leased("L2", local, 0.0), Completion)  # at once, not after 120 s
    assert done.id.endswith(":1")


def test_a_wait_repeated_under_its_lease_still_gets_what_it_took(open_core: Any) -> None:
    # Only a release makes a lease dead: a retry (the reply was lost) is served as before.
    core = open_core()
    local = settled(core, "a")
    done = call(core, leased("L1", local, 10.0), Completion)
    assert call(core, leased("L1", local, 0.0), Completion) == done
    assert core.released_leases() == 0


def test_released_leases_are_forgotten_after_the_lease_timeout(open_core: Any) -> None:
    core = open_core(lease_timeout_s=0.2)
    call(core, release("L1"), bool)
    assert core.released_leases() == 1
    wait_until(lambda: core.released_leases() == 0, what="the tombstone forgotten")


def test_past_max_released_leases_the_oldest_is_forgotten_logged_and_counted(
    open_core: Any, caplog: pytest.LogCaptureFixture
) -> None:
    core = open_core(max_released_leases=1)
    local = settled(core, "a")
    call(core, release("L1"), bool)
    with caplog.at_level("WARNING", logger="retinue.cluster.shard"):
        call(core, release("L2"), bool)  # past the bound: L1 is forgotten early
    assert "forgotten before lease_timeout_s" in caplog.text
    assert call(core, w.Ping(), w.Pong).released_dropped_early == 1
    with pytest.raises(InvalidArgument, match="released"):
        call(core, leased("L2", local, 0.0), Completion)  # still remembered: refused
    # L1's late wait takes the completion (held under its lease until acknowledged or
    # lease_timeout_s): delayed at worst, never lost.
    assert call(core, leased("L1", local, 0.0), Completion).id.endswith(":1")


def test_released_leases_are_kept_for_their_window_and_bounded_in_number() -> None:
    released = Released(keep_s=10.0, max_entries=2)
    released.add("a", now=0.0)
    released.add("b", now=1.0)
    assert released.has("a", now=10.0) and released.has("b", now=10.0)
    released.add("c", now=10.0)  # past the bound: the oldest goes early, and is counted
    assert not released.has("a", now=10.0)
    assert released.dropped_early == 1
    assert released.has("b", now=11.0) and not released.has("b", now=11.5)  # its window ended
    assert len(released) == 1 and released.dropped_early == 1


@settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    settle_first=st.booleans(),
    wait_first=st.booleans(),
    steps=st.integers(min_value=0, max_value=12),
    sleep=st.sampled_from([0.0, 0.001, 0.01]),
)
def test_a_release_and_its_wait_in_any_order_leave_the_completion_to_the_next_wait(
    open_core: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settle_first: bool,
    wait_first: bool,
    steps: int,
    sleep: float,
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir(exist_ok=True)
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    core = _cores.get(str(tmp_path)) or _cores.setdefault(str(tmp_path), open_core())
    task = f"t{len(core.rt.agents())}"
    if settle_first:
        (gates / task).touch()
    info = call(core, w.run(Spawn(HOST, "gated", task, task, "/root", f"~{task}"), rid=task))
    local = info.id.removeprefix("s1-")

    async def scenario() -> None:
        first, second = leased("L-" + task, local, 10.0), release("L-" + task)
        if not wait_first:
            first, second = second, first
        one = asyncio.ensure_future(core.handle(w.encode_call(first)))
        for _ in range(steps):
            await asyncio.sleep(sleep)
        two = asyncio.ensure_future(core.handle(w.encode_call(second)))
        (gates / task).touch()
        await asyncio.gather(one, two)
        done = w.decode_reply(
            await core.handle(w.encode_call(leased("N-" + task, local, 10.0))), Completion
        )
        assert (done.generation, done.output) == (1, f"done:{task}")

    asyncio.run(scenario())
    assert set(core.rt.leases()) == {"N-" + task}  # the released one holds nothing
    assert call(core, w.run(AckLease("N-" + task)), bool) is True
    assert not core._leased


_cores: dict[str, ShardCore] = {}  # the property's core, by its run's tmp_path (one per run)
