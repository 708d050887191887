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
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support import wait_until

from retinue import AgentInfo, Completion, Limits, NothingToWaitFor
from retinue.actors.commands import HOST, Spawn
from retinue.cluster import wire as w
from retinue.cluster._router import Router
from retinue.cluster._transport import Transport
from retinue.cluster.shard import ShardCore


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
    an event loop of the shard's own (in a thread, as the actor's is in its process)."""

    def __init__(self, core: ShardCore, loop: asyncio.AbstractEventLoop) -> None:
        self.handle = SimpleNamespace(remote=self._remote)
        self.core = core
        self.loop = loop

    def _remote(self, payload: bytes) -> _Ref:
        return _Ref(asyncio.run_coroutine_threadsafe(self.core.handle(payload), self.loop))


@pytest.fixture
def shard_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread of its own, stopped at the end."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="shard-loop", daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


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
