"""The Ray actors of a cluster: one async actor per shard, the directory, the provider limits.

Imported only once Ray is (``retinue.cluster.Cluster.open``). Both are named,
detached actors in a namespace derived from the store root, so a new driver
finds the ones a cluster still runs, and are created with
``max_restarts=-1``: when a shard's process dies, Ray starts the actor again
and its constructor reopens its store (restore as any reopen). A shard is
pinned to the node its store lives on (hard node affinity; the directory
records each shard's node address), the directory to the head node.
Neither asks for a CPU: a shard's turns run on its runtime's own threads.
Under provider limits, one more named actor on the head node,
:class:`ProviderLimitsActor`, keeps the account's
:class:`~retinue.cluster.leasebook.LeaseBook` and leases its capacity to the
shards (each reaches it as a :class:`RayBroker`; a restart starts an empty
book).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from pathlib import Path
from typing import Any

import msgspec
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from retinue.cluster._calls import answer_of
from retinue.cluster.directory import Directory
from retinue.cluster.leasebook import LeaseBook
from retinue.cluster.shard import ShardCore
from retinue.cluster.specs import ShardConfig
from retinue.errors import ClusterError
from retinue.protocol.provider_limits import ProviderLimit

__all__ = [
    "LIMITS_ACTOR",
    "DirectoryActor",
    "ProviderLimitsActor",
    "RayBroker",
    "ShardActor",
    "alive_nodes",
    "namespace_of",
    "start_directory",
    "start_provider_limits",
    "start_shards",
]

HEAD_RESOURCE = "node:__internal_head__"
LIMITS_ACTOR = "provider-limits"
"""The name of the cluster's provider-limits actor (in the cluster's namespace)."""


@ray.remote(max_restarts=-1, max_task_retries=0)
class ShardActor:
    """One shard: a :class:`~retinue.cluster.shard.ShardCore` on the actor's event loop."""

    def __init__(self, shard: int, folder: str, config: bytes, limits: Any = None) -> None:
        """Open shard ``shard``'s runtime over ``folder`` (a restart reopens it); lease the
        provider limits from ``limits`` (the provider-limits actor, None: none)."""
        core = ShardCore.open(shard, Path(folder), msgspec.msgpack.decode(config, type=ShardConfig))
        core.node_id = ray.get_runtime_context().get_node_id()
        self.core = core
        if limits is not None:
            core.share_limits(RayBroker(limits), f"shard-{shard}:{os.getpid()}")

    async def handle(self, payload: bytes) -> bytes:
        """Serve one encoded call (see :mod:`retinue.cluster.wire`)."""
        return await self.core.handle(payload)


@ray.remote(max_restarts=-1, max_task_retries=0)
class DirectoryActor:
    """The cluster's :class:`~retinue.cluster.directory.Directory`, one call at a time."""

    def __init__(self, folder: str, shards: int) -> None:
        """Open the directory in ``folder`` for ``shards`` shards."""
        self.directory = Directory(Path(folder), shards)

    def shards(self) -> int:
        """Return the shard count."""
        return self.directory.shards

    def place(self, name: str) -> int:
        """See :meth:`Directory.place`."""
        return self.directory.place(name)

    def place_key(self, key: str) -> int:
        """See :meth:`Directory.place_key`."""
        return self.directory.place_key(key)

    def pick(self) -> int:
        """See :meth:`Directory.pick`."""
        return self.directory.pick()

    def lookup(self, name: str) -> int | None:
        """See :meth:`Directory.lookup`."""
        return self.directory.lookup(name)

    def record(self, name: str, shard: int) -> int:
        """See :meth:`Directory.record`."""
        return self.directory.record(name, shard)

    def nodes(self) -> dict[int, str]:
        """See :meth:`Directory.nodes`."""
        return self.directory.nodes()

    def set_node(self, shard: int, address: str) -> None:
        """See :meth:`Directory.set_node`."""
        self.directory.set_node(shard, address)

    def close(self) -> None:
        """Close the directory's store."""
        self.directory.close()


@ray.remote(max_restarts=-1, max_task_retries=0)
class ProviderLimitsActor:
    """The cluster's :class:`~retinue.cluster.leasebook.LeaseBook`, one call at a time."""

    def __init__(self, limits: bytes, window_s: float, lease_s: float) -> None:
        """Keep the book of ``limits`` (msgpack-encoded ProviderLimits)."""
        decoded = msgspec.msgpack.decode(limits, type=tuple[ProviderLimit, ...])
        self.book = LeaseBook(decoded, window_s=window_s, lease_s=lease_s)

    def take(self, holder: str, match: str, calls: int, tokens_each: int) -> int:
        """See :meth:`LeaseBook.take`."""
        return self.book.take(holder, match, calls, tokens_each, time.monotonic())

    def end(self, holder: str, match: str, calls: int, tokens: int) -> None:
        """See :meth:`LeaseBook.end`."""
        self.book.end(holder, match, calls, tokens, time.monotonic())

    def give_back(self, holder: str, match: str, calls: int) -> None:
        """See :meth:`LeaseBook.give_back`."""
        self.book.give_back(holder, match, calls, time.monotonic())

    def renew(self, holder: str) -> None:
        """See :meth:`LeaseBook.renew`."""
        self.book.renew(holder, time.monotonic())

    def snapshot(self) -> bytes:
        """Every leased limit now (msgpack-encoded ``LeaseSnapshot`` values)."""
        return msgspec.msgpack.encode(self.book.snapshot(time.monotonic()))


class RayBroker:
    """A shard's :class:`~retinue.cluster.limits.Broker`: the provider-limits actor.

    A take the actor cannot answer (it is restarting) grants nothing (the call
    asks again); an end, a give-back or a renewal it cannot take is dropped
    (a restarted actor's book starts empty).
    """

    def __init__(self, handle: Any, timeout_s: float = 10.0) -> None:
        """Reach the actor ``handle``; a renewal waits at most ``timeout_s``."""
        self.handle = handle
        self.timeout_s = timeout_s

    async def take(self, holder: str, match: str, calls: int, tokens_each: int) -> int:
        """See :meth:`LeaseBook.take` (0 when the actor does not answer)."""
        ref = self.handle.take.remote(holder, match, calls, tokens_each)
        try:
            granted: int = await asyncio.wrap_future(answer_of(ref))
        except Exception:
            return 0
        return granted

    def end(self, holder: str, match: str, calls: int, tokens: int) -> None:
        """See :meth:`LeaseBook.end` (not awaited)."""
        with contextlib.suppress(Exception):
            self.handle.end.remote(holder, match, calls, tokens)

    def give_back(self, holder: str, match: str, calls: int) -> None:
        """See :meth:`LeaseBook.give_back` (not awaited)."""
        with contextlib.suppress(Exception):
            self.handle.give_back.remote(holder, match, calls)

    def renew(self, holder: str) -> None:
        """See :meth:`LeaseBook.renew` (waits for the actor, at most ``timeout_s``)."""
        ray.get(self.handle.renew.remote(holder), timeout=self.timeout_s)


def namespace_of(store_root: Path) -> str:
    """Return the Ray namespace of the cluster whose stores are under ``store_root``."""
    digest = hashlib.sha256(str(store_root.resolve()).encode()).hexdigest()[:16]
    return f"retinue-{digest}"


def alive_nodes() -> list[dict[str, Any]]:
    """Return the cluster's live nodes, in a stable order (address, then node id)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return sorted(nodes, key=lambda n: (n["NodeManagerAddress"], n["NodeID"]))


def _remote(actor_class: Any) -> Any:
    """The Ray actor class ``@ray.remote`` made (typed ``Any``: Ray is not analysed)."""
    return actor_class


def _affinity(node_id: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def start_directory(
    namespace: str, store_root: Path, shards: int, runtime_env: dict[str, Any] | None
) -> Any:
    """Return the cluster's directory actor (created on the head node if it is not running).

    Raises:
        ClusterError: the cluster has no live node.
    """
    nodes = alive_nodes()
    if not nodes:
        raise ClusterError("the Ray cluster has no live node")
    head = next((n for n in nodes if HEAD_RESOURCE in n.get("Resources", {})), nodes[0])
    options: dict[str, Any] = {
        "name": "directory",
        "namespace": namespace,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "scheduling_strategy": _affinity(head["NodeID"]),
    }
    if runtime_env is not None:
        options["runtime_env"] = runtime_env
    return _remote(DirectoryActor).options(**options).remote(str(store_root / "directory"), shards)


def start_provider_limits(
    namespace: str,
    limits: tuple[ProviderLimit, ...],
    window_s: float,
    lease_s: float,
    runtime_env: dict[str, Any] | None,
) -> Any:
    """Return the cluster's provider-limits actor (created on the head node if not running)."""
    nodes = alive_nodes()
    head = next((n for n in nodes if HEAD_RESOURCE in n.get("Resources", {})), nodes[0])
    options: dict[str, Any] = {
        "name": LIMITS_ACTOR,
        "namespace": namespace,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "scheduling_strategy": _affinity(head["NodeID"]),
    }
    if runtime_env is not None:
        options["runtime_env"] = runtime_env
    payload = msgspec.msgpack.encode(limits)
    return _remote(ProviderLimitsActor).options(**options).remote(payload, window_s, lease_s)


def start_shards(
    namespace: str,
    store_root: Path,
    shards: int,
    config: ShardConfig,
    recorded: dict[int, str],
    runtime_env: dict[str, Any] | None,
    limits: Any = None,
) -> tuple[list[Any], dict[int, str]]:
    """Return the shard actors (created where their stores live if they are not running).

    A shard whose node address is ``recorded`` goes to a live node with that
    address; a new one goes to the next live node in turn. Returns the
    handles and the node address of every shard (to record). ``limits`` is the
    provider-limits actor the shards lease from (None: none).

    Raises:
        ClusterError: a shard's store lives on a node the cluster does not have.
    """
    nodes = alive_nodes()
    payload = msgspec.msgpack.encode(config)
    handles: list[Any] = []
    where: dict[int, str] = {}
    for k in range(shards):
        candidates = nodes
        if k in recorded:
            candidates = [n for n in nodes if n["NodeManagerAddress"] == recorded[k]]
            if not candidates:
                raise ClusterError(
                    f"shard {k}'s store lives on the node at {recorded[k]}, which is not in "
                    "the Ray cluster; start a node there (or move "
                    f"{store_root / f'shard-{k}'} and its record)"
                )
        node = candidates[k % len(candidates)]
        where[k] = node["NodeManagerAddress"]
        options: dict[str, Any] = {
            "name": f"shard-{k}",
            "namespace": namespace,
            "lifetime": "detached",
            "get_if_exists": True,
            "num_cpus": 0,
            "scheduling_strategy": _affinity(node["NodeID"]),
        }
        if runtime_env is not None:
            options["runtime_env"] = runtime_env
        folder = str(store_root / f"shard-{k}")
        handles.append(_remote(ShardActor).options(**options).remote(k, folder, payload, limits))
    return handles, where
