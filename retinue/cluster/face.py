"""The host face of a cluster: the calls a host makes on a ``Runtime``, over shards on Ray.

``Cluster.open(store_root, shards=4, ...)`` connects to Ray (or starts a
local Ray on loopback), starts or finds the directory and the shard actors,
and returns a face whose calls have the names and semantics of
:class:`~retinue.runtime.Runtime`'s, sync and ``*_async``. Each call is one
line over a :class:`~retinue.cluster.router.Router` operation run by the
:class:`~retinue.cluster.transport.Transport`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from retinue.actors import Profile
from retinue.cluster import startup
from retinue.cluster import wire as w
from retinue.cluster.approvals import ApprovalFace
from retinue.cluster.leasebook import LeaseSnapshot, decode_leases
from retinue.cluster.local import LocalRay
from retinue.cluster.plumbing import FaceBase
from retinue.cluster.router import Router
from retinue.cluster.specs import ShardConfig, shard_config
from retinue.cluster.streamface import StreamFace, stream_bounds
from retinue.cluster.transport import Transport
from retinue.errors import ArgumentTypeError
from retinue.persistence.store import Durability
from retinue.protocol.details import AgentDetail
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message
from retinue.protocol.paging import check_page, page_of
from retinue.protocol.provider_limits import ProviderLimit
from retinue.team import Team

__all__ = ["Cluster"]

T = TypeVar("T")
_NO_REF: Any = object()


class Cluster(FaceBase, ApprovalFace, StreamFace):
    """Top-level trees sharded over Ray actors, each shard a ``Runtime`` over its own store.

    The approval calls (``approvals``, ``approve``, ``deny`` and their twins)
    come from :class:`~retinue.cluster.approvals.ApprovalFace`, ``stream`` and
    ``stream_async`` from :class:`~retinue.cluster.streamface.StreamFace`,
    what they run on from :class:`~retinue.cluster.plumbing.FaceBase`.
    """

    def __init__(self) -> None:
        """Use :meth:`Cluster.open`."""
        self.store_root = Path()
        self.shards = 0
        self.namespace = ""
        self.limits = Limits()
        self.local: LocalRay | None = None
        self._ray: Any = None
        self._connected_here = False
        self._transport: Transport | None = None
        self._router: Router | None = None
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(
        cls,
        store_root: str | os.PathLike[str],
        *,
        shards: int = 4,
        team: Team | str | os.PathLike[str] | None = None,
        profiles: Iterable[Profile] | None = None,
        limits: Limits | None = None,
        address: str | None = None,
        durability: Durability | str = Durability.FULL,
        runtime_env: dict[str, Any] | None = None,
        lease_timeout_s: float = 120.0,
        retry_s: float = 60.0,
        call_timeout_s: float = 30.0,
        request_ttl_s: float = 3600.0,
        max_requests: int = 1_000_000,
        remember: int = 100_000,
        stream_poll_s: float = 5.0,
        stream_batch: int = 1_000,
        stream_idle_s: float = 60.0,
        max_streams: int = 1_000,
        provider_limits: Iterable[ProviderLimit] | None = None,
        provider_lease_s: float = 10.0,
    ) -> Cluster:
        """Open the cluster whose shards keep their stores under ``store_root``.

        Shard ``k`` hosts one ``Runtime`` over ``<store_root>/shard-<k>``
        (reopened, so restored, if it exists) with ``profiles``, ``team`` and
        ``limits`` as ``Runtime.open`` takes them; runners must import by name
        on every worker (see :mod:`retinue.cluster.specs`). ``address=None``
        uses the Ray this process is connected to, else starts a local Ray on
        loopback (:func:`~retinue.cluster.local.start_local_ray`); an address
        joins that cluster. ``runtime_env`` goes to every actor (how code
        reaches workers that lack it). ``lease_timeout_s``: a completion
        handed out and not acknowledged is handed out again after it;
        ``retry_s``: how long a call to a shard that does not answer is
        repeated (a restart takes seconds); ``call_timeout_s``: one attempt's
        bound beyond a wait's own; ``request_ttl_s`` and ``max_requests``
        bound each shard's request log; ``remember`` bounds the names and
        returned completions a face keeps. Event streams: a take waits up to
        ``stream_poll_s`` and returns up to ``stream_batch`` events; a shard
        closes a stream no take reached for ``stream_idle_s`` and keeps at
        most ``max_streams`` open. ``provider_limits`` hold across the shards: one
        actor leases their capacity to the shards in small batches; a shard silent
        for ``provider_lease_s`` loses its lease (see :mod:`retinue.cluster.limits`).

        Raises:
            ArgumentTypeError, InvalidArgument: a bad argument.
            ConfigurationError, TeamFileError: unusable profiles or team (a
                runner that cannot be imported by name), fewer shards than
                the store root had, or shards running with other profiles.
            ClusterError: Ray is missing, did not start, or a shard did not open
                its store (the message carries the shard's error).
        """
        cluster = cls()
        cluster.store_root = startup.store_folder(store_root, shards)
        cluster.shards = shards
        cluster.limits = startup.face_limits(team, limits)
        cluster._stream_bounds = stream_bounds(
            stream_poll_s, stream_batch, stream_idle_s, max_streams
        )
        config = shard_config(
            profiles=profiles,
            team=team,
            limits=limits,
            durability=str(Durability(durability)),
            lease_timeout_s=float(lease_timeout_s),
            request_ttl_s=float(request_ttl_s),
            max_requests=int(max_requests),
            stream_idle_s=float(stream_idle_s),
            max_streams=max_streams,
            provider_limits=startup.cluster_provider_limits(provider_limits),
            provider_lease_s=startup.positive_seconds("provider_lease_s", provider_lease_s),
        )
        cluster._start(address, runtime_env, config, retry_s, call_timeout_s)
        router = Router(shards, cluster.limits, retry_s=retry_s, call_timeout_s=call_timeout_s)
        router.remember = remember
        cluster._router = router
        return cluster

    def _start(
        self,
        address: str | None,
        runtime_env: dict[str, Any] | None,
        config: ShardConfig,
        retry_s: float,
        call_timeout_s: float,
    ) -> None:
        """Connect to Ray and start (or find) the directory and the shards."""
        try:
            connection = startup.connect(address, runtime_env)
            self._ray, self.local = connection.ray, connection.local
            self._connected_here = connection.made_here
            self.namespace = startup.namespace_of(self.store_root)
            self._transport = startup.start(
                connection.ray,
                self.namespace,
                self.store_root,
                self.shards,
                config,
                connection.actor_env,
                retry_s=retry_s,
                call_timeout_s=call_timeout_s,
            )
        except BaseException:
            self._disconnect()
            raise

    # -- host API ------------------------------------------------------------------------

    def spawn(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
    ) -> AgentInfo:
        """Like ``Runtime.spawn``; a new top-level agent goes to its shard (see the directory)."""
        result: AgentInfo = self._run("spawn", profile, task, name, parent, idempotency_key)
        return result

    def wait(self, ref: str, timeout: float | None = None) -> Completion:
        """Like ``Runtime.wait``: the oldest completion the host has not received, once."""
        result: Completion = self._run("wait", ref, timeout)
        return result

    def send(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like ``Runtime.send``."""
        result: Message = self._run("send", ref, content, dedup_key)
        return result

    def messages(self, timeout: float | None = None) -> list[Message]:
        """Like ``Runtime.messages``, over every shard's host inbox (oldest first)."""
        result: list[Message] = self._run("messages", timeout)
        return result

    def follow_up(self, ref: str, task: str) -> AgentInfo:
        """Like ``Runtime.follow_up``."""
        return self._one(w.FollowUp, ref, task)

    def resume(self, ref: str) -> AgentInfo:
        """Like ``Runtime.resume``."""
        return self._one(w.Resume, ref)

    def interrupt(self, ref: str) -> AgentInfo:
        """Like ``Runtime.interrupt``."""
        return self._one(w.Interrupt, ref)

    def interrupt_tree(self, ref: str) -> list[AgentInfo]:
        """Like ``Runtime.interrupt_tree``."""
        result: list[AgentInfo] = self._run("subtree", w.InterruptTree, ref)
        return result

    def close(self, ref: str = _NO_REF) -> AgentInfo:
        """Like ``Runtime.close`` of one agent (the cluster itself: :meth:`shutdown`)."""
        return self._one(w.Close, _agent_ref(ref, "close"))

    def close_tree(self, ref: str) -> list[AgentInfo]:
        """Like ``Runtime.close_tree``."""
        result: list[AgentInfo] = self._run("subtree", w.CloseTree, ref)
        return result

    def get(self, ref: str) -> AgentInfo:
        """Like ``Runtime.get``."""
        result: AgentInfo = self._run("get", ref)
        return result

    def agents(
        self, *, include_closed: bool = False, limit: int | None = None, after: str | None = None
    ) -> list[AgentInfo]:
        """Like ``Runtime.agents``: every shard's agents, oldest first, or one page by path
        (cut from every shard's agents here: a page costs what the whole list does)."""
        check_page(limit, after, self.limits.agents_page_max)
        result: list[AgentInfo] = self._run("agents", include_closed)
        return _page(result, include_closed, limit, after)

    def inspect(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Like ``Runtime.inspect``."""
        result: AgentDetail = self._run("inspect", ref, transcript_tail)
        return result

    def _one(self, kind: type[Any], ref: Any, *extra: Any) -> AgentInfo:
        result: AgentInfo = self._run("one", kind, ref, *extra)
        return result

    # -- asyncio faces -------------------------------------------------------------------

    async def spawn_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
    ) -> AgentInfo:
        """Like :meth:`spawn`, without blocking the event loop."""
        result: AgentInfo = await self._run_async(
            "spawn", profile, task, name, parent, idempotency_key
        )
        return result

    async def wait_async(self, ref: str, timeout: float | None = None) -> Completion:
        """Like :meth:`wait`; a cancelled wait gives back what it was handed."""
        result: Completion = await self._run_async("wait", ref, timeout)
        return result

    async def send_async(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        result: Message = await self._run_async("send", ref, content, dedup_key)
        return result

    async def messages_async(self, timeout: float | None = None) -> list[Message]:
        """Like :meth:`messages`, without blocking the event loop."""
        result: list[Message] = await self._run_async("messages", timeout)
        return result

    async def follow_up_async(self, ref: str, task: str) -> AgentInfo:
        """Like :meth:`follow_up`, without blocking the event loop."""
        return await self._one_async(w.FollowUp, ref, task)

    async def resume_async(self, ref: str) -> AgentInfo:
        """Like :meth:`resume`, without blocking the event loop."""
        return await self._one_async(w.Resume, ref)

    async def interrupt_async(self, ref: str) -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        return await self._one_async(w.Interrupt, ref)

    async def interrupt_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`interrupt_tree`, without blocking the event loop."""
        result: list[AgentInfo] = await self._run_async("subtree", w.InterruptTree, ref)
        return result

    async def close_async(self, ref: str = _NO_REF) -> AgentInfo:
        """Like :meth:`close`, without blocking the event loop."""
        return await self._one_async(w.Close, _agent_ref(ref, "close_async"))

    async def close_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        result: list[AgentInfo] = await self._run_async("subtree", w.CloseTree, ref)
        return result

    async def get_async(self, ref: str) -> AgentInfo:
        """Like :meth:`get`, without blocking the event loop."""
        result: AgentInfo = await self._run_async("get", ref)
        return result

    async def agents_async(
        self, *, include_closed: bool = False, limit: int | None = None, after: str | None = None
    ) -> list[AgentInfo]:
        """Like :meth:`agents`, without blocking the event loop."""
        check_page(limit, after, self.limits.agents_page_max)
        result: list[AgentInfo] = await self._run_async("agents", include_closed)
        return _page(result, include_closed, limit, after)

    async def inspect_async(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Like :meth:`inspect`, without blocking the event loop."""
        result: AgentDetail = await self._run_async("inspect", ref, transcript_tail)
        return result

    async def _one_async(self, kind: type[Any], ref: Any, *extra: Any) -> AgentInfo:
        result: AgentInfo = await self._run_async("one", kind, ref, *extra)
        return result

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`shutdown` (or :meth:`detach`) ran."""
        return self._closed

    def shutdown(self) -> None:
        """Close every shard's runtime and stop the cluster's actors; idempotent.

        Each shard commits what it was doing and releases its store; the
        actors are then killed without a restart, and a local Ray this face
        started is stopped.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close_streams()
        if self._transport is not None:
            startup.stop(self._transport)
        self._disconnect()

    def provider_leases(self) -> tuple[LeaseSnapshot, ...]:
        """What the provider-limits actor leased: per leased limit, the calls each shard's
        process holds, what its windows hold, grants made, leases expired (empty without
        provider limits)."""
        transport = self._transport
        if transport is None or transport.provider_limits is None:
            return ()
        raw = transport.ray.get(transport.provider_limits.snapshot.remote(), timeout=30)
        return decode_leases(raw)

    def detach(self) -> None:
        """Leave the cluster running for other drivers; only this face is closed.

        A local Ray this face started cannot outlive it: it is stopped (the
        stores keep every committed step, as after a crash).
        """
        with self._lock:
            self._closed = True
        self._close_streams()
        self._disconnect()

    def _disconnect(self) -> None:
        if self.local is not None:
            self.local.shutdown()
        elif self._connected_here and self._ray is not None:
            self._ray.shutdown()
        self._connected_here = False

    def __enter__(self) -> Cluster:
        """Return the cluster itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Shut the cluster down (see :meth:`shutdown`)."""
        self.shutdown()


def _agent_ref(ref: Any, method: str) -> Any:
    if ref is _NO_REF or ref is None:
        given = "no argument" if ref is _NO_REF else "None"
        raise ArgumentTypeError(
            f"{method}() closes one agent and needs its id or path, got {given}; "
            "to close the cluster use shutdown() or a with block"
        )
    return ref


def _page(
    infos: list[AgentInfo], include_closed: bool, limit: int | None, after: str | None
) -> list[AgentInfo]:
    """Every shard's agents as ``agents()`` lists them (all oldest first, or a page)."""
    if limit is None and after is None:
        return infos
    by_id = {info.id: info for info in infos}
    return page_of(infos, include_closed=True, limit=limit, after=after, find=by_id.get)
