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
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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


def _get(ref: _Ref, timeout: float | None = None) -> bytes:
    """``ray.get`` of the sync transport."""
    return ref.future().result(timeout)


def _ray(cancels: list[Any]) -> Any:
    """A stand-in for Ray whose ``cancel`` is noted and never reaches the shard."""
    exceptions = SimpleNamespace(
        RayActorError=_Failure, GetTimeoutError=_Failure, ActorDiedError=_Failure
    )
    return SimpleNamespace(exceptions=exceptions, cancel=cancels.append, get=_get)


@dataclass
class _Face:
    """A face (transport and router) over one in-process shard, and the shard's parts."""

    core: ShardCore
    shard: _Shard
    transport: Transport
    router: Router
    ray: Any  # the stand-in for Ray (tests give it ``get`` for the sync transport)
    cancels: list[Any]  # the refs ``ray.cancel`` was called with (it never reaches the shard)
    gates: Path

    def started(self, task: str) -> str:
        """Spawn a gated agent ``task`` on the shard; return its cluster id."""
        spawn = w.run(Spawn(HOST, "gated", task, task, "/root", f"~{task}"), rid=task)
        served = asyncio.run_coroutine_threadsafe(
            self.core.handle(w.encode_call(spawn)), self.shard.loop
        )
        return w.decode_reply(served.result(30), AgentInfo).id

    def settle(self, task: str) -> None:
        """Open ``task``'s gate: its turn settles."""
        (self.gates / task).touch()


FaceMaker = Callable[..., _Face]


def _cluster(f: _Face) -> Cluster:
    """A :class:`Cluster` face over ``f``'s transport and router (no Ray started)."""
    cluster = Cluster.__new__(Cluster)
    cluster._lock, cluster._closed = threading.Lock(), False
    cluster._transport = f.transport
    cluster._router = f.router
    return cluster


@pytest.fixture
def face(
    open_core: Any,
    shard_loop: asyncio.AbstractEventLoop,
    transports: list[Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> FaceMaker:
    """Return ``make(retry_s=5, call_timeout_s=30, **ShardConfig options) -> _Face``: shard 1's
    core (gated agents) on its own loop, and a face's transport (outbox closed at the end) and
    router over it with those bounds."""
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("RETINUE_CLUSTER_GATES", str(gates))

    def make(*, retry_s: float = 5.0, call_timeout_s: float = 30.0, **options: Any) -> _Face:
        core = open_core(**options)
        shard = _Shard(core, shard_loop)
        cancels: list[Any] = []
        ray = _ray(cancels)
        transport = Transport(
            ray, [None, shard], None, retry_s=retry_s, call_timeout_s=call_timeout_s
        )
        transports.append(transport)
        router = Router(2, Limits(), retry_s=retry_s, call_timeout_s=call_timeout_s)
        return _Face(core, shard, transport, router, ray, cancels, gates)

    return make


@pytest.mark.parametrize("delay", [None, 0.0, 0.001, 0.005, 0.02, 0.05, 0.1])
def test_a_cancelled_face_wait_whose_ray_cancel_is_lost_gives_its_completion_back(
    face: FaceMaker, delay: float | None
) -> None:
    f = face()
    core, transport, router, cancels = f.core, f.transport, f.router, f.cancels
    agent = f.started("g")

    async def scenario() -> Completion | None:
        waiting = asyncio.ensure_future(transport.run_async(router.wait(agent, 30.0)))
        while not core._leased:
            await asyncio.sleep(0.001)  # the shard's wait is in progress
        if delay is None:  # cancelled while the shard's wait is blocked
            waiting.cancel()
            await asyncio.sleep(0)
        f.settle("g")  # the turn settles: the wait takes it, or is about to
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


def test_a_face_wait_cancelled_in_its_back_off_releases_its_lease(
    face: FaceMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wait's call took the completion under its lease and its answer was lost: the face
    # backs off before asking again under the same lease. A cancel landing in that back-off
    # must release the lease, or the completion stays leased for lease_timeout_s and a wait
    # on the agent meanwhile finds nothing to wait for.
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (30.0,))  # the cancel lands in it
    f = face(retry_s=60, lease_timeout_s=600.0)
    core, transport, router = f.core, f.transport, f.router
    agent = f.started("b")
    f.settle("b")
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
    face: FaceMaker, fault: str
) -> None:
    # Face A's wait returns the completion; its ack fails (Ray reports the call failed) or is
    # refused by a shard in trouble (a closing runtime, a failed commit): the lease stays.
    # Face A waits no more, so no later wait carries the ack: if nothing sends it again,
    # the shard hands the completion out again after lease_timeout_s, and face B (another
    # host process) receives it a second time.
    f = face(lease_timeout_s=3.0)
    core, shard, transport, face_a = f.core, f.shard, f.transport, f.router
    (shard.lose if fault == "lost" else shard.refuse)["ack"] = 1
    agent = f.started("a")
    f.settle("a")
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
    face: FaceMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wait cancelled in its back-off sends the release; that call fails (the shard is
    # restarting): the outbox sends it again, and the completion comes back before
    # lease_timeout_s.
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (30.0,))
    f = face(retry_s=60, lease_timeout_s=600.0)
    core, shard, transport, router = f.core, f.shard, f.transport, f.router
    shard.lose["release"] = 2
    agent = f.started("r")
    f.settle("r")
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
    face: FaceMaker,
) -> None:
    # The cancel awaits the release's answer for call_timeout_s at most (so a wait right
    # after it finds the completion back); a release the shard does not answer in that time
    # is not dropped: the outbox sends it again, and the completion the wait then took comes
    # back without lease_timeout_s.
    f = face(retry_s=60, call_timeout_s=0.5, lease_timeout_s=600.0)
    core, shard, transport, router = f.core, f.shard, f.transport, f.router
    shard.hang["release"] = 1
    agent = f.started("h")

    async def scenario() -> None:
        waiting = asyncio.ensure_future(transport.run_async(router.wait(agent, 30.0)))
        while not core._leased:
            await asyncio.sleep(0.001)  # the shard's wait is blocked; ray.cancel is lost
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting  # ends although the shard never answers the first release

    asyncio.run(scenario())
    f.settle("h")  # the turn settles
    wait_until(lambda: shard.calls.count("release") >= 2, what="the release sent again")
    wait_until(lambda: not core._leased and core.rt.leases() == {}, what="nothing kept")
    again = asyncio.run(transport.run_async(router.wait(agent, 30.0)))
    assert (again.generation, again.output) == (1, "done:h")


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_face_wait_that_gives_up_releases_what_its_lost_answers_took(
    face: FaceMaker, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # The shard is reachable but its answers are lost until retry_s has passed: the wait
    # raises ShardUnavailable ("repeating it is safe"). Its calls took the completion under
    # the lease: the give-up releases it, so the repeat gets it (not NothingToWaitFor until
    # lease_timeout_s).
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (0.05,))
    f = face(retry_s=0.2, call_timeout_s=5, lease_timeout_s=600.0)
    core, shard, transport, router = f.core, f.shard, f.transport, f.router
    agent = f.started("u")
    f.settle("u")
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
    face: FaceMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first call took the completion and its answer was lost; the repeat under the same
    # lease meets a closing shard (RuntimeClosed, unserved) and the wait raises it: the lease
    # is released as it raises, so the caller's next wait gets the completion.
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (0.3,))
    f = face(retry_s=60, call_timeout_s=5, lease_timeout_s=600.0)
    core, shard, transport, router = f.core, f.shard, f.transport, f.router
    agent = f.started("k")
    f.settle("k")
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
    face: FaceMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The release a cancel sends fails (the shard's process restarting) and so does the
    # outbox's first re-send: the cancel still ends only once the outbox's next re-send was
    # answered, so a wait right after the cancel gets the completion (not NothingToWaitFor).
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (30.0,))
    monkeypatch.setattr("retinue.cluster._outbox.BACKOFF_S", (0.2,))  # a slow outbox
    f = face(retry_s=60, lease_timeout_s=600.0)
    core, shard, transport, router = f.core, f.shard, f.transport, f.router
    shard.lose["release"] = 2
    agent = f.started("e")
    f.settle("e")
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
    face: FaceMaker,
) -> None:
    # The wait's ack reaches a shard that never answers it (no failure either): past
    # call_timeout_s the face counts it as owed, and a close that cannot deliver it says so.
    f = face(call_timeout_s=0.2, lease_timeout_s=600.0)
    core, shard, transport, router = f.core, f.shard, f.transport, f.router
    shard.hang["ack"] = 1
    agent = f.started("k")
    f.settle("k")
    assert asyncio.run(transport.run_async(router.wait(agent, 30.0))).output == "done:k"
    wait_until(lambda: transport.outbox.owed() == {1: 1}, what="the hung ack owed")
    assert shard.calls.count("ack") == 1  # awaited, not sent again while it hangs
    transport.close(0.3)
    assert core.rt.leases() != {}  # never delivered ...
    assert (transport.outbox.dropped, transport.outbox.delivered) == (1, 0)  # ... and counted


def test_concurrent_waits_owe_no_more_than_max_owed_calls(
    face: FaceMaker,
) -> None:
    # Eight waits start at once while the shard's acks fail: each wait holds a slot of
    # max_owed_calls (2) from its start, so the ones past the bound are refused and the face
    # never owes more than 2 calls; none owed is dropped (all delivered once acks take).
    f = face(retry_s=30, call_timeout_s=5, lease_timeout_s=600.0)
    shard, transport = f.shard, f.transport
    shard.lose["ack"] = 10_000
    transport.outbox.max_calls = 2  # Cluster.open(max_owed_calls=2)
    cluster = _cluster(f)
    agents = [f.started(f"a{i}") for i in range(8)]
    for i in range(8):
        f.settle(f"a{i}")

    async def waits() -> list[Any]:
        return await asyncio.gather(
            *(cluster.wait_async(a, 30.0) for a in agents), return_exceptions=True
        )

    got = asyncio.run(waits())
    assert [type(r) for r in got].count(Completion) == 2
    assert all(isinstance(r, (Completion, OutboxFull)) for r in got)
    assert len(transport.outbox) == 2
    with pytest.raises(OutboxFull):
        cluster.wait(agents[0], 1.0)
    shard.lose["ack"] = 0
    wait_until(lambda: transport.outbox.delivered == 2, what="the owed acks delivered")
    assert transport.outbox.dropped == 0


def test_a_wait_after_a_give_up_first_delivers_the_release_the_shard_is_owed(
    face: FaceMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wait gives up (its answers lost, the shard cannot take the release yet): the release
    # sits in the outbox's back-off. The retry the error invites, made as soon as the shard
    # is back, sends that release before its own call, so it gets the completion.
    monkeypatch.setattr("retinue.cluster._router.BACKOFF_S", (0.05,))
    monkeypatch.setattr("retinue.cluster._outbox.BACKOFF_S", (30.0,))  # a long back-off
    f = face(retry_s=0.2, call_timeout_s=0.3, lease_timeout_s=600.0)
    core, shard, transport, router = f.core, f.shard, f.transport, f.router
    agent = f.started("g")
    f.settle("g")
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


def test_a_wait_that_ends_after_the_face_closed_hands_its_completion_out_once(
    face: FaceMaker,
) -> None:
    # detach() / shutdown() close the outbox while a wait is in flight; the wait's ack would
    # then fail with nothing to send it again: a completion returned so is handed out a
    # second time once its lease runs out. The wait raises RuntimeClosed instead and
    # releases the lease, so the next face gets the completion at once, and once.
    f = face(lease_timeout_s=1.0)
    core, shard, transport, router = f.core, f.shard, f.transport, f.router
    shard.lose["ack"] = 1
    agent = f.started("c")

    async def scenario() -> list[Completion]:
        waiting = asyncio.ensure_future(transport.run_async(router.wait(agent, 30.0)))
        while not core._leased:
            await asyncio.sleep(0.001)  # the shard's wait is in progress
        transport.close(0.1)  # the face detaches
        f.settle("c")
        try:
            return [await waiting]
        except RuntimeClosed as exc:
            assert "closed while this call was in flight" in str(exc)
            return []

    received = asyncio.run(scenario())
    other = Transport(f.ray, [None, shard], None, retry_s=5, call_timeout_s=30)
    face_b = Router(2, Limits(), retry_s=5, call_timeout_s=30)
    try:
        if not received:  # given back at once
            received.append(asyncio.run(other.run_async(face_b.wait(agent, 5.0))))
        time.sleep(1.5)  # past lease_timeout_s and a sweep
        with contextlib.suppress(NothingToWaitFor):
            received.append(asyncio.run(other.run_async(face_b.wait(agent, 1.0))))
    finally:
        other.close(5.0)
    assert [(c.generation, c.output) for c in received] == [(1, "done:c")]  # once
    assert shard.calls.count("release") == 1  # the closed face released, did not ack


def test_a_wait_leasing_again_owes_no_more_than_max_owed_calls(face: FaceMaker) -> None:
    # The shard's acks fail. Wait 1 returns the completion; its ack is owed. The lease runs
    # out and the shard hands the completion out again, to wait 2 of the same face: not
    # returned twice, acknowledged (owed too) and wait 2 leases again, and so on each
    # lease_timeout_s. Its one slot held one owed call: leasing again needs a free slot,
    # so the face never owes more than max_owed_calls (2).
    f = face(retry_s=30, call_timeout_s=5, lease_timeout_s=0.5)
    f.shard.lose["ack"] = 10_000
    f.transport.outbox.max_calls = 2  # Cluster.open(max_owed_calls=2)
    cluster = _cluster(f)
    agent = f.started("o")
    f.settle("o")
    assert cluster.wait(agent, 30.0).output == "done:o"
    with pytest.raises(OutboxFull):  # not a WaitTimeout after piling up acks
        cluster.wait(agent, 4.0)
    assert len(f.transport.outbox) == 2
    f.shard.lose["ack"] = 0
    wait_until(lambda: f.transport.outbox.delivered == 2, what="the owed acks delivered")


def _waited(make: Callable[[], Completion]) -> tuple[threading.Thread, list[Any]]:
    """Run ``make`` in a thread of its own; the list gets its return value or error."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(make())
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=run, name="host-wait", daemon=True)
    thread.start()
    return thread, out


def _next_wait(f: _Face, agent: str) -> list[str | None]:
    """What a second face's wait on ``agent`` receives now (nothing left: an empty list)."""
    other = Transport(f.ray, [None, f.shard], None, retry_s=5, call_timeout_s=30)
    face_b = Router(2, Limits(), retry_s=5, call_timeout_s=30)
    try:
        return [other.run(face_b.wait(agent, 5.0)).output]
    except NothingToWaitFor:
        return []
    finally:
        other.close(5.0)


@pytest.mark.parametrize("landed", [False, True], ids=["ack-never-landed", "ack-landed-unseen"])
def test_a_face_closed_during_its_acks_retries_returns_the_completion_once(
    face: FaceMaker, landed: bool
) -> None:
    # A sync wait has its completion; its ack's sends fail (never reaching the shard, or
    # landing with their answers lost) and retry while another thread closes the face:
    # the closed outbox will not send the ack again. The wait sends the release and reads
    # its answer: it took (the ack never landed) -> RuntimeClosed, the next wait gets the
    # completion at once; it found the lease acknowledged -> the wait returns it. Once.
    f = face(retry_s=1.0, call_timeout_s=5, lease_timeout_s=600.0)
    core, shard, transport = f.core, f.shard, f.transport
    if landed:
        transport.faults.drop["ack"] = 10_000  # each ack runs; its answer is lost
    else:
        shard.lose["ack"] = 10_000  # no ack reaches the shard
    agent = f.started("r")
    f.settle("r")
    thread, out = _waited(lambda: _cluster(f).wait(agent, 30.0))
    wait_until(lambda: shard.calls.count("ack") >= 2, what="the ack retried")
    transport.close(0.1)  # detach() / shutdown() from another thread
    thread.join(30)
    shard.lose["ack"] = transport.faults.drop["ack"] = 0  # the next face's ack goes through
    if landed:
        assert [c.output for c in out] == ["done:r"]
        assert _next_wait(f, agent) == []
    else:
        assert isinstance(out[0], RuntimeClosed), out
        assert "acknowledgement was owed to shard 1" in str(out[0])
        assert _next_wait(f, agent) == ["done:r"]  # at once, not after lease_timeout_s
    assert shard.calls.count("release") == 1
    assert core.rt.leases() == {}


@pytest.mark.parametrize("ack", ["fails", "in-flight"])
def test_a_face_closed_as_an_async_wait_sends_its_ack_returns_the_completion_once(
    face: FaceMaker, ack: str
) -> None:
    # On an event loop the ack is sent without awaiting it. The face is closed by another
    # thread just as the ack goes out (after the wait checked the face open): the outbox
    # takes the ack too late to send it again. The ack failed -> the release takes it back
    # and the wait raises RuntimeClosed; the ack is in flight -> the release, served after
    # it, finds the lease acknowledged and the wait returns its completion. Once either way.
    f = face(lease_timeout_s=600.0)
    core, shard, transport, router = f.core, f.shard, f.transport, f.router
    if ack == "fails":
        shard.lose["ack"] = 1
    remote = shard.handle.remote

    def closing_remote(payload: bytes) -> Any:
        call = w.decode_call(payload)
        if isinstance(call, w.Run) and w.call_name(w.command_of(call)) == "ack":
            transport.close(0.1)  # the close lands as the ack is sent
        return remote(payload)

    shard.handle.remote = closing_remote
    agent = f.started("s")
    f.settle("s")
    try:
        got: list[str | None] = [asyncio.run(transport.run_async(router.wait(agent, 30.0))).output]
    except RuntimeClosed:
        got = []
    shard.handle.remote = remote
    assert got + _next_wait(f, agent) == ["done:s"]  # once
    assert got == ([] if ack == "fails" else ["done:s"])
    assert shard.calls.count("release") == 1
    assert core.rt.leases() == {}


def test_a_wait_leasing_again_while_the_face_owes_nothing_is_not_refused(
    face: FaceMaker,
) -> None:
    # max_owed_calls=1 and one wait in flight: its own slot is the bound. Its completion is
    # handed out again after its late ack was delivered (nothing owed): leasing again needs
    # no slot besides its own, so the wait goes on (here: nothing more to wait for), where
    # it was refused with OutboxFull ("owes 0 ... 1 waits in flight").
    f = face(retry_s=0.1, call_timeout_s=5, lease_timeout_s=0.5)
    core, shard, transport = f.core, f.shard, f.transport
    transport.outbox.max_calls = 1  # Cluster.open(max_owed_calls=1)
    shard.lose["ack"] = 10_000
    cluster = _cluster(f)
    agent = f.started("o")
    f.settle("o")
    assert cluster.wait(agent, 30.0).output == "done:o"  # its ack owed to the outbox
    wait_until(lambda: core.rt.leases() == {}, what="the lease run out: handed out again")
    shard.lose["ack"] = 0
    wait_until(lambda: len(transport.outbox) == 0, what="the late ack delivered")
    assert transport.outbox.owed() == {}
    with pytest.raises(NothingToWaitFor):  # handed out again: not returned twice
        cluster.wait(agent, 5.0)
    assert shard.calls.count("wait") == 3  # it leased again after the second take
