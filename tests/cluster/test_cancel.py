"""A cancelled face wait over an in-process shard (no Ray): its completion comes back at once.

The face's :class:`~retinue.cluster._transport.Transport` and
:class:`~retinue.cluster._router.Router` drive a real
:class:`~retinue.cluster.shard.ShardCore` through a stand-in for Ray whose
``ray.cancel`` never reaches the shard (the worst a best-effort cancel can
do): the lease's release alone must end the shard's wait, and the cancelled
await returns only once the shard has given back what its wait took, so the
next wait gets the completion without waiting out ``lease_timeout_s``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support import wait_until

from retinue import AgentInfo, Completion, Limits, NothingToWaitFor
from retinue.actors.commands import HOST, Spawn
from retinue.cluster import wire as w
from retinue.cluster._face import Cluster
from retinue.cluster._router import Router
from retinue.cluster._transport import OutboxFull, Transport
from retinue.cluster.shard import ShardCore
from retinue.errors import RuntimeClosed, ShardUnavailable


class _Failure(Exception):
    """No call here fails as Ray would."""


class _Ref:
    """A shard call in flight: the core serving it on the shard's own loop."""

    def __init__(self, future: concurrent.futures.Future[bytes]) -> None:
        self._future = future

    def future(self) -> concurrent.futures.Future[bytes]:
        return self._future


class _Shard:
    """An actor handle whose ``handle.remote(payload)`` serves the payload on ``core``, on
    an event loop of the shard's own (in a thread, as the actor's is in its process).

    ``lose[name]`` calls of that name (``AckLease``, ...) fail as Ray reports a call whose
    process died before it ran; ``refuse[name]`` are answered with ``refusal`` unserved.
    """

    def __init__(self, core: ShardCore, loop: asyncio.AbstractEventLoop) -> None:
        self.handle = SimpleNamespace(remote=self._remote)
        self.core = core
        self.loop = loop
        self.lose: dict[str, int] = {}
        self.refuse: dict[str, int] = {}
        self.hang: dict[str, int] = {}  # calls that reach a hung shard: never answered
        self.refusal = w.error_reply(RuntimeClosed("the runtime is closing"))
        self.calls: list[str] = []

    def _remote(self, payload: bytes) -> _Ref:
        if self.loop.is_closed():
            raise _Failure("the shard's process is gone")
        call = w.decode_call(payload)
        name = w.call_name(w.command_of(call) if isinstance(call, w.Run) else call)
        self.calls.append(name)
        if self.hang.get(name, 0) > 0:
            self.hang[name] -= 1
            return _Ref(concurrent.futures.Future())
        for table, outcome in ((self.lose, _Failure("lost")), (self.refuse, self.refusal)):
            if table.get(name, 0) > 0:
                table[name] -= 1
                future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
                if isinstance(outcome, bytes):
                    future.set_result(outcome)
                else:
                    future.set_exception(outcome)
                return _Ref(future)
        return _Ref(asyncio.run_coroutine_threadsafe(self.core.handle(payload), self.loop))


@pytest.fixture
def transports() -> Iterator[list[Transport]]:
    """The transports a test makes: their outboxes are closed at its end."""
    made: list[Transport] = []
    yield made
    for transport in made:
        transport.close(5.0)


@pytest.fixture
def shard_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread of its own, stopped at the end."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="shard-loop", daemon=True)
    thread.start()
    yield loop
    asyncio.run_coroutine_threadsafe(_cancel_the_rest(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


async def _cancel_the_rest() -> None:
    """Cancel every other task of the running loop and wait for their ends."""
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _ray(cancels: list[Any]) -> Any:
    """A stand-in for Ray whose ``cancel`` is noted and never reaches the shard."""
    exceptions = SimpleNamespace(
        RayActorError=_Failure, GetTimeoutError=_Failure, ActorDiedError=_Failure
    )
    return SimpleNamespace(exceptions=exceptions, cancel=cancels.append)


@pytest.mark.parametrize("delay", [None, 0.0, 0.001, 0.005, 0.02, 0.05, 0.1])
def test_a_cancelled_face_wait_whose_ray_cancel_is_lost_gives_its_completion_back(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    delay: float | None,
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    core = open_core()
    cancels: list[Any] = []
    transport = Transport(
        _ray(cancels), [None, _Shard(core, shard_loop)], None, retry_s=5, call_timeout_s=30
    )
    transports.append(transport)
    router = Router(2, Limits(), retry_s=5, call_timeout_s=30)
    spawn = w.run(Spawn(HOST, "gated", "g", "g", "/root", "~g"), rid="g")
    served = asyncio.run_coroutine_threadsafe(core.handle(w.encode_call(spawn)), shard_loop)
    agent = w.decode_reply(served.result(30), AgentInfo).id

    async def scenario() -> Completion | None:
        waiting = asyncio.ensure_future(transport.run_async(router.wait(agent, 30.0)))
        while not core._leased:
            await asyncio.sleep(0.001)  # the shard's wait is in progress
        if delay is None:  # cancelled while the shard's wait is blocked
            waiting.cancel()
            await asyncio.sleep(0)
        (gates / "g").touch()  # the turn settles: the wait takes it, or is about to
        if delay is not None:
            await asyncio.sleep(delay)
            waiting.cancel()
        try:
            got: Completion = await waiting
        except asyncio.CancelledError:
            return None
        return got  # the cancel came after the face had it: the face returned it

    got = asyncio.run(scenario())
    if got is not None:
        with pytest.raises(NothingToWaitFor):  # returned once, acknowledged: not twice
            asyncio.run(transport.run_async(router.wait(agent, 5.0)))
        return
    assert cancels, "the face cancelled the shard's call"
    again = asyncio.run(transport.run_async(router.wait(agent, 30.0)))  # not NothingToWaitFor
    assert (again.generation, again.output) == (1, "done:g")
    # Acknowledged (the ack goes on its own), and the released lease holds nothing.
    wait_until(lambda: core.rt.leases() == {}, what="the lease acknowledged")


def _started(core: ShardCore, shard_loop: asyncio.AbstractEventLoop, task: str) -> str:
    """Spawn a gated agent ``task`` on ``core``; return its cluster id."""
    spawn = w.run(Spawn(HOST, "gated", task, task, "/root", f"~{task}"), rid=task)
    served = asyncio.run_coroutine_threadsafe(core.handle(w.encode_call(spawn)), shard_loop)
    return w.decode_reply(served.result(30), AgentInfo).id


def test_a_face_wait_cancelled_in_its_back_off_releases_its_lease(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The wait's call took the completion under its lease and its answer was lost: the face
    # backs off before asking again under the same lease. A cancel landing in that back-off
    # must release the lease, or the completion stays leased for lease_timeout_s and a wait
    # on the agent meanwhile finds nothing to wait for.
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (30.0,))  # the cancel lands in it
    core = open_core(lease_timeout_s=600.0)
    cancels: list[Any] = []
    transport = Transport(
        _ray(cancels), [None, _Shard(core, shard_loop)], None, retry_s=60, call_timeout_s=30
    )
    transports.append(transport)
    router = Router(2, Limits(), retry_s=60, call_timeout_s=30)
    agent = _started(core, shard_loop, "b")
    (gates / "b").touch()
    transport.faults.drop["wait"] = 1  # the shard's answer to the first wait call is lost

    async def scenario() -> None:
        waiting = asyncio.ensure_future(transport.run_async(router.wait(agent, 30.0)))
        while not transport.faults.dropped:
            await asyncio.sleep(0.001)
        assert len(core.rt.leases()) == 1  # the lost answer's completion is leased
        waiting.cancel()  # in the 30 s back-off
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(scenario())
    assert core.rt.leases() == {}  # released by the cancel, not left to lease_timeout_s
    again = asyncio.run(transport.run_async(router.wait(agent, 5.0)))  # not NothingToWaitFor
    assert (again.generation, again.output) == (1, "done:b")


@pytest.mark.parametrize("fault", ["lost", "refused"])
def test_an_ack_that_did_not_take_is_sent_again_without_another_wait(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
) -> None:
    # Face A's wait returns the completion; its ack fails (Ray reports the call failed) or is
    # refused by a shard in trouble (a closing runtime, a failed commit): the lease stays.
    # Face A waits no more, so no later wait carries the ack: if nothing sends it again,
    # the shard hands the completion out again after lease_timeout_s, and face B (another
    # host process) receives it a second time.
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    core = open_core(lease_timeout_s=3.0)
    shard = _Shard(core, shard_loop)
    (shard.lose if fault == "lost" else shard.refuse)["ack"] = 1
    transport = Transport(_ray([]), [None, shard], None, retry_s=5, call_timeout_s=30)
    transports.append(transport)
    agent = _started(core, shard_loop, "a")
    (gates / "a").touch()
    face_a = Router(2, Limits(), retry_s=5, call_timeout_s=30)
    got = asyncio.run(transport.run_async(face_a.wait(agent, 30.0)))
    assert got.output == "done:a"
    wait_until(lambda: core.rt.leases() == {}, what="the lease acknowledged")
    assert shard.calls.count("ack") == 2  # the failed one and the outbox's
    wait_until(lambda: transport.outbox.delivered == 1, what="the outbox's delivery")
    assert len(transport.outbox) == 0
    # Past lease_timeout_s (and a sweep), face B still finds nothing: not handed out again.
    face_b = Router(2, Limits(), retry_s=5, call_timeout_s=30)
    time.sleep(3.5)
    with pytest.raises(NothingToWaitFor):
        asyncio.run(transport.run_async(face_b.wait(agent, 1.0)))


def test_a_release_that_did_not_take_is_sent_again(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A wait cancelled in its back-off sends the release; that call fails (the shard is
    # restarting): the outbox sends it again, and the completion comes back before
    # lease_timeout_s.
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (30.0,))
    core = open_core(lease_timeout_s=600.0)
    shard = _Shard(core, shard_loop)
    shard.lose["release"] = 2
    transport = Transport(_ray([]), [None, shard], None, retry_s=60, call_timeout_s=30)
    transports.append(transport)
    router = Router(2, Limits(), retry_s=60, call_timeout_s=30)
    agent = _started(core, shard_loop, "r")
    (gates / "r").touch()
    transport.faults.drop["wait"] = 1

    async def scenario() -> None:
        waiting = asyncio.ensure_future(transport.run_async(router.wait(agent, 30.0)))
        while not transport.faults.dropped:
            await asyncio.sleep(0.001)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(scenario())
    wait_until(lambda: core.rt.leases() == {}, what="the lease released")
    assert shard.calls.count("release") == 3
    again = asyncio.run(transport.run_async(router.wait(agent, 5.0)))
    assert (again.generation, again.output) == (1, "done:r")


def test_a_cancel_whose_release_meets_a_hung_shard_ends_and_the_release_still_lands(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The cancel awaits the release's answer for call_timeout_s at most (so a wait right
    # after it finds the completion back); a release the shard does not answer in that time
    # is not dropped: the outbox sends it again, and the completion the wait then took comes
    # back without lease_timeout_s.
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    core = open_core(lease_timeout_s=600.0)
    shard = _Shard(core, shard_loop)
    shard.hang["release"] = 1
    transport = Transport(_ray([]), [None, shard], None, retry_s=60, call_timeout_s=0.5)
    transports.append(transport)
    router = Router(2, Limits(), retry_s=60, call_timeout_s=0.5)
    agent = _started(core, shard_loop, "h")

    async def scenario() -> None:
        waiting = asyncio.ensure_future(transport.run_async(router.wait(agent, 30.0)))
        while not core._leased:
            await asyncio.sleep(0.001)  # the shard's wait is blocked; ray.cancel is lost
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting  # ends although the shard never answers the first release

    asyncio.run(scenario())
    (gates / "h").touch()  # the turn settles
    wait_until(lambda: shard.calls.count("release") >= 2, what="the release sent again")
    wait_until(lambda: not core._leased and core.rt.leases() == {}, what="nothing kept")
    again = asyncio.run(transport.run_async(router.wait(agent, 30.0)))
    assert (again.generation, again.output) == (1, "done:h")


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_face_wait_that_gives_up_releases_what_its_lost_answers_took(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    # The shard is reachable but its answers are lost until retry_s has passed: the wait
    # raises ShardUnavailable ("repeating it is safe"). Its calls took the completion under
    # the lease: the give-up releases it, so the repeat gets it (not NothingToWaitFor until
    # lease_timeout_s).
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (0.05,))
    core = open_core(lease_timeout_s=600.0)
    shard = _Shard(core, shard_loop)
    ray = _ray([])
    ray.get = lambda ref, timeout=None: ref.future().result(timeout)  # the sync transport's
    transport = Transport(ray, [None, shard], None, retry_s=0.2, call_timeout_s=5)
    transports.append(transport)
    router = Router(2, Limits(), retry_s=0.2, call_timeout_s=5)
    agent = _started(core, shard_loop, "u")
    (gates / "u").touch()
    transport.faults.drop["wait"] = 1_000
    with pytest.raises(ShardUnavailable):
        if mode == "async":
            asyncio.run(transport.run_async(router.wait(agent, 30.0)))
        else:
            transport.run(router.wait(agent, 30.0))
    assert core.rt.leases() == {}  # released before the wait raised
    assert shard.calls.count("release") == 1
    transport.faults.drop["wait"] = 0
    again = transport.run(router.wait(agent, 5.0))
    assert (again.generation, again.output) == (1, "done:u")


def test_a_face_wait_refused_after_a_lost_answer_releases_its_lease(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first call took the completion and its answer was lost; the repeat under the same
    # lease meets a closing shard (RuntimeClosed, unserved) and the wait raises it: the lease
    # is released as it raises, so the caller's next wait gets the completion.
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (0.3,))
    core = open_core(lease_timeout_s=600.0)
    shard = _Shard(core, shard_loop)
    transport = Transport(_ray([]), [None, shard], None, retry_s=60, call_timeout_s=5)
    transports.append(transport)
    router = Router(2, Limits(), retry_s=60, call_timeout_s=5)
    agent = _started(core, shard_loop, "k")
    (gates / "k").touch()
    transport.faults.drop["wait"] = 1  # the first answer is lost: its call took the completion

    async def scenario() -> None:
        waiting = asyncio.ensure_future(transport.run_async(router.wait(agent, 30.0)))
        while not transport.faults.dropped:
            await asyncio.sleep(0.001)
        shard.refuse["wait"] = 1  # the repeat, after the back-off, meets a closing shard
        with pytest.raises(RuntimeClosed):
            await waiting

    asyncio.run(scenario())
    assert core.rt.leases() == {}
    assert shard.calls.count("release") == 1
    again = asyncio.run(transport.run_async(router.wait(agent, 5.0)))
    assert (again.generation, again.output) == (1, "done:k")


def test_a_cancel_whose_release_fails_ends_once_the_outbox_delivered_it(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The release a cancel sends fails (the shard's process restarting) and so does the
    # outbox's first re-send: the cancel still ends only once the outbox's next re-send was
    # answered, so a wait right after the cancel gets the completion (not NothingToWaitFor).
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (30.0,))
    monkeypatch.setattr("retinue.cluster._outbox.BACKOFF_S", (0.2,))  # a slow outbox
    core = open_core(lease_timeout_s=600.0)
    shard = _Shard(core, shard_loop)
    shard.lose["release"] = 2
    transport = Transport(_ray([]), [None, shard], None, retry_s=60, call_timeout_s=30)
    transports.append(transport)
    router = Router(2, Limits(), retry_s=60, call_timeout_s=30)
    agent = _started(core, shard_loop, "e")
    (gates / "e").touch()
    transport.faults.drop["wait"] = 1

    async def scenario() -> None:
        waiting = asyncio.ensure_future(transport.run_async(router.wait(agent, 30.0)))
        while not transport.faults.dropped:
            await asyncio.sleep(0.001)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(scenario())
    assert core.rt.leases() == {}  # at once: the cancel awaited the outbox's delivery
    assert shard.calls.count("release") == 3
    again = asyncio.run(transport.run_async(router.wait(agent, 5.0)))
    assert (again.generation, again.output) == (1, "done:e")


def test_an_ack_sent_to_a_hung_shard_is_owed_past_its_bound_and_counted_at_the_close(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The wait's ack reaches a shard that never answers it (no failure either): past
    # call_timeout_s the face counts it as owed, and a close that cannot deliver it says so.
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    core = open_core(lease_timeout_s=600.0)
    shard = _Shard(core, shard_loop)
    shard.hang["ack"] = 1
    transport = Transport(_ray([]), [None, shard], None, retry_s=5, call_timeout_s=0.2)
    transports.append(transport)
    agent = _started(core, shard_loop, "k")
    (gates / "k").touch()
    router = Router(2, Limits(), retry_s=5, call_timeout_s=0.2)
    assert asyncio.run(transport.run_async(router.wait(agent, 30.0))).output == "done:k"
    wait_until(lambda: transport.outbox.owed() == {1: 1}, what="the hung ack owed")
    assert shard.calls.count("ack") == 1  # awaited, not sent again while it hangs
    transport.close(0.3)
    assert core.rt.leases() != {}  # never delivered ...
    assert (transport.outbox.dropped, transport.outbox.delivered) == (1, 0)  # ... and counted


def test_concurrent_waits_owe_no_more_than_max_owed_calls(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Eight waits start at once while the shard's acks fail: each wait holds a slot of
    # max_owed_calls (2) from its start, so the ones past the bound are refused and the face
    # never owes more than 2 calls; none owed is dropped (all delivered once acks take).
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    core = open_core(lease_timeout_s=600.0)
    shard = _Shard(core, shard_loop)
    shard.lose["ack"] = 10_000
    transport = Transport(_ray([]), [None, shard], None, retry_s=30, call_timeout_s=5)
    transports.append(transport)
    transport.outbox.max_calls = 2  # Cluster.open(max_owed_calls=2)
    face = Cluster.__new__(Cluster)
    face._lock, face._closed = threading.Lock(), False
    face._transport = transport
    face._router = Router(2, Limits(), retry_s=30, call_timeout_s=5)
    agents = [_started(core, shard_loop, f"a{i}") for i in range(8)]
    for i in range(8):
        (gates / f"a{i}").touch()

    async def waits() -> list[Any]:
        return await asyncio.gather(
            *(face.wait_async(a, 30.0) for a in agents), return_exceptions=True
        )

    got = asyncio.run(waits())
    assert [type(r) for r in got].count(Completion) == 2
    assert all(isinstance(r, (Completion, OutboxFull)) for r in got)
    assert len(transport.outbox) == 2
    with pytest.raises(OutboxFull):
        face.wait(agents[0], 1.0)
    shard.lose["ack"] = 0
    wait_until(lambda: transport.outbox.delivered == 2, what="the owed acks delivered")
    assert transport.outbox.dropped == 0


def test_a_wait_after_a_give_up_first_delivers_the_release_the_shard_is_owed(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A wait gives up (its answers lost, the shard cannot take the release yet): the release
    # sits in the outbox's back-off. The retry the error invites, made as soon as the shard
    # is back, sends that release before its own call, so it gets the completion.
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (0.05,))
    monkeypatch.setattr("retinue.cluster._outbox.BACKOFF_S", (30.0,))  # a long back-off
    core = open_core(lease_timeout_s=600.0)
    shard = _Shard(core, shard_loop)
    transport = Transport(_ray([]), [None, shard], None, retry_s=0.2, call_timeout_s=0.3)
    transports.append(transport)
    router = Router(2, Limits(), retry_s=0.2, call_timeout_s=0.3)
    agent = _started(core, shard_loop, "g")
    (gates / "g").touch()
    transport.faults.drop["wait"] = 1000  # the wait's answers are lost
    shard.lose["release"] = 1000  # and the shard cannot take the release yet
    with pytest.raises(ShardUnavailable):
        asyncio.run(transport.run_async(router.wait(agent, 30.0)))
    wait_until(lambda: transport.outbox.owed() == {1: 1}, what="the release owed")
    assert len(core.rt.leases()) == 1
    transport.faults.drop["wait"] = 0
    shard.lose["release"] = 0  # the shard is back
    got = asyncio.run(transport.run_async(router.wait(agent, 5.0)))
    assert got.output == "done:g"
    wait_until(lambda: core.rt.leases() == {}, what="the lease acknowledged")
    assert transport.outbox.dropped == 0
