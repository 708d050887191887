"""Opening a cluster: the store root, the connection to Ray, the directory and the shards.

:meth:`retinue.cluster.Cluster.open` is these steps in order: check the
store root and the shard count, connect to Ray (or start a local one on
loopback), start or find the directory and the shard actors (where their
stores live), and wait for every shard to answer with the configuration this
face gave. A shard that cannot start fails the open with its own error and
leaves no other shard holding a store.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retinue.cluster import wire as w
from retinue.cluster._streaming import StreamBounds
from retinue.cluster._transport import One, Transport, failure_text, raw_reply
from retinue.cluster.local import LocalRay, load_ray, start_local_ray
from retinue.cluster.specs import ShardConfig, config_digest
from retinue.errors import ArgumentTypeError, ClusterError, ConfigurationError, InvalidArgument
from retinue.protocol.limits import Limits
from retinue.protocol.provider_limits import ProviderLimit, merge_provider_limits
from retinue.team import Team, load_team

__all__ = [
    "Connection",
    "connect",
    "face_limits",
    "kill",
    "namespace_of",
    "positive_int",
    "start",
    "stop",
    "store_folder",
    "stream_bounds",
]

START_TIMEOUT_S = 120.0
MAX_SHARDS = 10_000


def store_folder(store_root: Any, shards: Any) -> Path:
    """Return the store root as an absolute folder (made if missing), checking ``shards``.

    Raises:
        ArgumentTypeError: ``store_root`` is not a path, ``shards`` not an int.
        ConfigurationError: ``shards`` is out of range.
    """
    if not isinstance(store_root, str | os.PathLike) or not str(store_root).strip():
        raise ArgumentTypeError(
            f"store_root must name a folder (a str or PathLike), not {store_root!r}"
        )
    if isinstance(shards, bool) or not isinstance(shards, int):
        raise ArgumentTypeError(f"shards must be an int, not {type(shards).__name__}")
    if not 1 <= shards <= MAX_SHARDS:
        raise ConfigurationError(f"shards must be 1 to {MAX_SHARDS}, not {shards}")
    folder = Path(store_root).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


LEASE_LENGTH = 32
"""The length of the leases a face's waits take (an id's 32 hex digits)."""


def face_limits(team: Team | str | os.PathLike[str] | None, limits: Limits | None) -> Limits:
    """Return the limits the face's own checks use (wait times): as the shards get them.

    Raises:
        ConfigurationError: ``dedup_key_max_length`` is below :data:`LEASE_LENGTH`: a
            lease is bounded as a dedup key, so every wait would fail with
            ``DedupKeyTooLong``.
    """
    if limits is not None:
        found = limits
    elif team is not None:
        found = (team if isinstance(team, Team) else load_team(team)).limits
    else:
        found = Limits.from_env()
    if found.dedup_key_max_length < LEASE_LENGTH:
        raise ConfigurationError(
            f"a cluster's waits take leases of {LEASE_LENGTH} characters, and "
            f"dedup_key_max_length is {found.dedup_key_max_length}: raise it to at least "
            f"{LEASE_LENGTH}"
        )
    return found


@dataclass(frozen=True)
class Connection:
    """Ray as :func:`connect` left it: who connected, and what the actors need on top."""

    ray: Any
    local: LocalRay | None  # a local Ray started for this face (it goes with the face)
    made_here: bool  # this face called ray.init (and disconnects at the end)
    actor_env: dict[str, Any] | None  # the runtime environment each actor gets


def cluster_provider_limits(given: Any) -> tuple[ProviderLimit, ...]:
    """Check ``Cluster.open``'s ``provider_limits`` (None: none).

    Raises:
        ArgumentTypeError: one ProviderLimit, or not an iterable.
        InvalidLimits: an item is not a ProviderLimit, or a match is named twice.
    """
    if given is None:
        return ()
    if isinstance(given, ProviderLimit | str) or not isinstance(given, Iterable):
        raise ArgumentTypeError(
            "provider_limits must be a list of retinue.ProviderLimit, not "
            f"{type(given).__name__}; write provider_limits=[ProviderLimit(...)]"
        )
    return merge_provider_limits(list(given))


def positive_seconds(name: str, value: Any) -> float:
    """Check a number of seconds.

    Raises:
        InvalidArgument: ``value`` is not a positive finite number.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise InvalidArgument(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)


def positive_int(name: str, value: Any) -> int:
    """Check a count ``Cluster.open`` takes (``max_released_leases``, ``max_owed_calls``,
    ``stream_batch``, ``max_streams``).

    Raises:
        ArgumentTypeError: not an int.
        InvalidArgument: below 1.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise InvalidArgument(f"{name} must be at least 1, not {value}")
    return value


def stream_bounds(poll_s: Any, batch: Any, idle_s: Any, max_streams: Any) -> StreamBounds:
    """Check ``Cluster.open``'s stream bounds; return the face's.

    Raises:
        ArgumentTypeError: a bound is not a number (an int for the counts).
        InvalidArgument: a bound is not positive, or ``idle_s`` is not above ``poll_s``.
    """
    for name, value in (("stream_poll_s", poll_s), ("stream_idle_s", idle_s)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ArgumentTypeError(f"{name} must be a number, not {type(value).__name__}")
        if not (math.isfinite(value) and value > 0):
            raise InvalidArgument(f"{name} must be a positive number of seconds, not {value!r}")
    for name, value in (("stream_batch", batch), ("max_streams", max_streams)):
        positive_int(name, value)
    if idle_s <= poll_s:
        raise InvalidArgument(
            f"stream_idle_s ({idle_s:g}) must be above stream_poll_s ({poll_s:g}): a shard "
            "closes a stream no take reached within stream_idle_s"
        )
    return StreamBounds(poll_s=float(poll_s), batch=batch)


def connect(address: str | None, runtime_env: dict[str, Any] | None) -> Connection:
    """Connect to Ray: the connection this process has, else ``address``, else a local Ray.

    With a connection this process already has, ``runtime_env`` goes to each
    actor (so it must name URIs); a connection made here carries it as the
    job's environment (local folders are uploaded then), which the actors
    inherit. ``address=None`` starts a local Ray on loopback
    (:func:`~retinue.cluster.local.start_local_ray`).

    Raises:
        ClusterError: Ray is missing, shadowed, or did not start.
    """
    ray = load_ray()
    if ray.is_initialized():
        return Connection(ray, None, made_here=False, actor_env=runtime_env)
    local = None
    if address is None:
        local = start_local_ray()
        address = local.address
    try:
        ray.init(address=address, log_to_driver=False, runtime_env=runtime_env)
    except BaseException:
        if local is not None:
            local.shutdown()
        raise
    return Connection(ray, local, made_here=True, actor_env=None)


def namespace_of(store_root: Path) -> str:
    """Return the Ray namespace of the cluster whose stores are under ``store_root``."""
    from retinue.cluster import _actors as actors

    return actors.namespace_of(store_root)


def start(
    ray: Any,
    namespace: str,
    store_root: Path,
    shards: int,
    config: ShardConfig,
    actor_env: dict[str, Any] | None,
    *,
    retry_s: float,
    call_timeout_s: float,
) -> Transport:
    """Start or find the directory, the provider-limits actor (under provider limits) and the
    shards; return the transport to them.

    Raises:
        ConfigurationError: Ray refused ``runtime_env``, or the shards run with
            another configuration (another driver started them).
        ClusterError: the directory or a shard did not start (its error).
    """
    from retinue.cluster import _actors as actors

    env = actor_env
    try:
        directory = actors.start_directory(namespace, store_root, shards, env)
    except ValueError as exc:  # Ray refused the runtime environment
        raise ConfigurationError(f"runtime_env: {exc}") from None
    recorded = started(ray, directory.nodes.remote(), "the directory")
    limits_actor = None
    if config.provider_limits:  # before the shards: each leases from it as it opens
        window_s = 60.0 if config.limits is None else config.limits.provider_window_s
        limits_actor = actors.start_provider_limits(
            namespace, config.provider_limits, window_s, config.provider_lease_s, env
        )
        started(ray, limits_actor.snapshot.remote(), "the provider-limits actor")
    handles, where = actors.start_shards(
        namespace, store_root, shards, config, recorded, env, limits_actor
    )
    for k, node in where.items():
        if recorded.get(k) != node:
            ray.get(directory.set_node.remote(k, node))
    try:
        check_shards(ray, store_root, config, handles)
    except ClusterError:  # a shard that cannot start leaves no other shard holding a store
        for handle in [*handles, directory, *([limits_actor] if limits_actor else [])]:
            kill(ray, handle)
        raise
    transport = Transport(ray, handles, directory, retry_s=retry_s, call_timeout_s=call_timeout_s)
    transport.provider_limits = limits_actor
    return transport


def check_shards(ray: Any, store_root: Path, config: ShardConfig, handles: list[Any]) -> None:
    """Wait for every shard to answer; check they run with ``config``.

    Raises:
        ClusterError: a shard did not start (its constructor's error).
        ConfigurationError: a shard runs with another configuration.
    """
    ping = w.encode_call(w.Ping())
    pongs = [
        w.decode_reply(started(ray, h.handle.remote(ping), f"shard {k}"), w.Pong)
        for k, h in enumerate(handles)
    ]
    digest = config_digest(config)
    for pong in pongs:
        if pong.config_digest != digest:
            raise ConfigurationError(
                f"shard {pong.shard} of {store_root} runs with other profiles, team or "
                "limits (another driver opened it); shut that cluster down first"
            )


def started(ray: Any, ref: Any, what: str) -> Any:
    """Wait for an actor's first answer; its constructor's failure becomes a ClusterError.

    Raises:
        ClusterError: it did not start (the message carries why).
    """
    try:
        return ray.get(ref, timeout=START_TIMEOUT_S)
    except Exception as exc:
        raise ClusterError(f"{what} did not start: {failure_text(exc)}") from None


def kill(ray: Any, handle: Any, *, closing: bool = False) -> None:
    """Kill an actor without a restart (the directory is asked to close its store first)."""
    if closing:
        with contextlib.suppress(Exception):
            ray.get(handle.close.remote(), timeout=10)
    with contextlib.suppress(Exception):
        ray.kill(handle, no_restart=True)


def stop(transport: Transport) -> None:
    """Close every shard's runtime, then kill the shards, the directory and the provider-limits
    actor without a restart.

    A shard that cannot answer is killed all the same.
    """
    stop_call = w.encode_call(w.Shutdown())
    for k, handle in enumerate(transport.shards):
        with contextlib.suppress(Exception):
            transport.run(raw_reply(One(k, stop_call, "shutdown", retry=False)))
        kill(transport.ray, handle)
    kill(transport.ray, transport.directory, closing=True)
    if transport.provider_limits is not None:
        kill(transport.ray, transport.provider_limits)
