"""The cluster's host face offers a Runtime's host calls, same names and arguments; no Ray."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

from retinue import ArgumentTypeError, ConfigurationError, InvalidArgument, Profile, Runtime
from retinue.cluster import Cluster, OutboxFull
from retinue.cluster._router import Router
from retinue.cluster._transport import One, Transport
from retinue.protocol.limits import Limits


def shape(signature: inspect.Signature, skip: str = "") -> list[tuple[object, ...]]:
    """Each parameter's name, kind, annotation and default (a bare sentinel as such)."""
    return [
        (
            p.name,
            p.kind,
            p.annotation,
            "<no argument>" if type(p.default) is object else p.default,
        )
        for p in signature.parameters.values()
        if p.name != skip
    ]


HOST_CALLS = [
    "agents",
    "approvals",
    "approve",
    "close",
    "close_tree",
    "deny",
    "follow_up",
    "get",
    "inspect",
    "interrupt",
    "interrupt_tree",
    "messages",
    "resume",
    "run",
    "send",
    "spawn",
    "wait",
]


@pytest.mark.parametrize("name", HOST_CALLS)
def test_each_call_takes_the_runtimes_arguments_and_has_an_async_twin(name: str) -> None:
    face = inspect.signature(getattr(Cluster, name))
    twin = inspect.signature(getattr(Cluster, f"{name}_async"))
    runtime = inspect.signature(getattr(Runtime, name))
    # The face leases its waits itself: Runtime.wait's lease is not the host's to pass.
    expected = shape(runtime, skip="lease")
    assert shape(face) == expected
    assert shape(twin) == expected
    assert face.return_annotation == runtime.return_annotation == twin.return_annotation
    assert inspect.iscoroutinefunction(getattr(Cluster, f"{name}_async"))


def test_bad_arguments_are_refused_before_ray_is_touched(tmp_path: Path) -> None:
    with pytest.raises(ArgumentTypeError, match="shards must be an int"):
        Cluster.open(tmp_path, shards="4")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="shards must be 1 to"):
        Cluster.open(tmp_path, shards=0)
    with pytest.raises(ArgumentTypeError, match="store_root must name a folder"):
        Cluster.open(7)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="cannot reach the cluster's workers"):
        Cluster.open(tmp_path, profiles=[Profile("p", runner=lambda turn: "x")])


def test_stream_takes_the_runtimes_arguments() -> None:
    for name in ("stream", "stream_async"):
        face = inspect.signature(getattr(Cluster, name))
        assert shape(face) == shape(inspect.signature(getattr(Runtime, name)))
        assert not inspect.iscoroutinefunction(getattr(Cluster, name))


def test_bad_stream_bounds_are_refused_before_ray_is_touched(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="stream_poll_s must be a positive"):
        Cluster.open(tmp_path, stream_poll_s=0)
    with pytest.raises(ArgumentTypeError, match="stream_batch must be an int"):
        Cluster.open(tmp_path, stream_batch=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="max_streams must be at least 1"):
        Cluster.open(tmp_path, max_streams=0)
    with pytest.raises(InvalidArgument, match="must be above stream_poll_s"):
        Cluster.open(tmp_path, stream_poll_s=10, stream_idle_s=5)


def test_a_bad_max_released_leases_is_refused_before_ray_is_touched(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="max_released_leases must be at least 1"):
        Cluster.open(tmp_path, max_released_leases=0)
    with pytest.raises(ArgumentTypeError, match="max_released_leases must be an int"):
        Cluster.open(tmp_path, max_released_leases="9")  # type: ignore[arg-type]


def test_a_bad_max_owed_calls_is_refused_before_ray_is_touched(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="max_owed_calls must be at least 1"):
        Cluster.open(tmp_path, max_owed_calls=0)
    with pytest.raises(ArgumentTypeError, match="max_owed_calls must be an int"):
        Cluster.open(tmp_path, max_owed_calls=True)


def test_a_lease_bound_below_the_waits_leases_is_refused_before_ray_is_touched(
    tmp_path: Path,
) -> None:
    # a wait's lease (32 hex) is bounded as a dedup key: below it every wait would fail
    with pytest.raises(ConfigurationError, match="raise it to at least 32"):
        Cluster.open(tmp_path, limits=Limits(dedup_key_max_length=31))


def test_a_face_owing_max_owed_calls_refuses_new_waits_and_runs(tmp_path: Path) -> None:
    # Acks and releases owed to unreachable shards are never dropped for room: at the bound
    # the face starts no new leased wait (nothing sent, nothing spawned) until they land.
    exceptions = SimpleNamespace(
        RayActorError=OSError, GetTimeoutError=OSError, ActorDiedError=OSError
    )
    transport = Transport(
        SimpleNamespace(exceptions=exceptions), [], None, retry_s=1.0, call_timeout_s=1.0
    )
    transport.outbox.max_calls = 1
    transport.outbox._thread = SimpleNamespace()  # type: ignore[assignment]  # nothing sends
    transport.outbox.post(One(3, b"ack"))
    cluster = Cluster()
    cluster._transport = transport
    cluster._router = Router(4, Limits(), retry_s=1.0, call_timeout_s=1.0)
    with pytest.raises(OutboxFull, match="shard 3: 1"):
        cluster.wait("s3-a")
    with pytest.raises(OutboxFull):
        cluster.run("p", "task")
    with pytest.raises(OutboxFull):
        asyncio.run(cluster.wait_async("s3-a"))
    with pytest.raises(OutboxFull):
        asyncio.run(cluster.run_async("p", "task"))
