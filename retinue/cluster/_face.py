"""The host face of a cluster: the calls a host makes on a ``Runtime``, over shards on Ray.

``Cluster.open(store_root, shards=4, ...)`` connects to Ray (or starts a
local Ray on loopback), starts or finds the directory and the shard actors,
and returns a face whose calls have the names and semantics of
:class:`~retinue.runtime.Runtime`'s, sync and ``*_async``. Each call is one
line over a :class:`~retinue.cluster._router.Router` operation run by the
:class:`~retinue.cluster._transport.Transport`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from retinue.actors import Profile
from retinue.cluster import _startup as startup
from retinue.cluster import wire as w
from retinue.cluster._router import Router
from retinue.cluster._streaming import (
    AsyncClusterStream,
    ClusterStream,
    Part,
    StreamBounds,
    close_op,
    open_op,
)
from retinue.cluster._transport import Faults, One, Op, Transport, raw_reply
from retinue.cluster.leasebook import LeaseSnapshot, decode_leases
from retinue.cluster.local import LocalRay
from retinue.cluster.specs import ShardConfig, shard_config
from retinue.errors import ArgumentTypeError, RuntimeClosed
from retinue.persistence.store import Durability
from retinue.protocol.details import AgentDetail
from retinue.protocol.ids import new_id
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message
from retinue.protocol.paging import check_page, page_of
from retinue.protocol.provider_limits import ProviderLimit
from retinue.protocol.supervision import ApprovalRequest
from retinue.team import Team

__all__ = ["Cluster"]

T = TypeVar("T")
S = TypeVar("S", ClusterStream, AsyncClusterStream)
_NO_REF: Any = object()


class Cluster:
    """Top-level trees sharded over Ray actors, each shard a ``Runtime`` over its own store.

    Every host call is one method (and its ``*_async`` twin) over the
    :class:`~retinue.cluster._router.Router` operation of the same name, run by
    the :class:`~retinue.cluster._transport.Transport` from a thread or on the
    running event loop.
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
        self._stream_bounds = StreamBounds(poll_s=5.0, batch=1_000)
        self._open_streams: weakref.WeakSet[ClusterStream | AsyncClusterStream] = weakref.WeakSet()

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
        max_released_leases: int = 100_000,
        max_owed_calls: int = 100_000,
    ) -> Cluster:
        """Open the cluster whose shards keep their stores under ``store_root``.

        Shard ``k`` hosts one ``Runtime`` over ``<store_root>/shard-<k>`` (reopened, so
        restored, if it exists) with ``profiles``, ``team`` and ``limits`` as ``Runtime.open``
        takes them; runners must import by name on every worker (see
        :mod:`retinue.cluster.specs`). ``address=None`` uses the Ray this process is connected
        to, else starts a local Ray on loopback
        (:func:`~retinue.cluster.local.start_local_ray`); an address joins that cluster.
        ``runtime_env`` goes to every actor (how code reaches workers that lack it).
        ``lease_timeout_s``: a completion handed out and not acknowledged is handed out again
        after it; ``retry_s``: how long a call to a shard that does not answer is repeated (a
        restart takes seconds); ``call_timeout_s``: one attempt's bound beyond a wait's own;
        ``request_ttl_s`` and ``max_requests`` bound each shard's request log; ``remember``
        bounds the names and returned completions a face keeps. Event streams: a take waits up
        to ``stream_poll_s`` and returns up to ``stream_batch`` events; a shard closes a stream
        no take reached for ``stream_idle_s`` and keeps at most ``max_streams`` open.
        ``provider_limits`` hold across the shards: one actor leases their capacity to the
        shards in small batches; a shard silent for ``provider_lease_s`` loses its lease (see
        :mod:`retinue.cluster.limits`). ``max_released_leases`` bounds the cancelled waits'
        leases a shard remembers; ``max_owed_calls`` the acks and releases the face owes
        shards (at it, a new wait or run raises ``OutboxFull``; none is dropped for room).

        Raises:
            ArgumentTypeError, InvalidArgument: a bad argument.
            ConfigurationError, TeamFileError: unusable profiles or team (a runner not importable
                by name), fewer shards than the store root had, shards with other profiles, or
                a ``dedup_key_max_length`` below the waits' 32-character leases.
            ClusterError: Ray is missing or did not start, or a shard did not open its store.
        """
        cluster = cls()
        cluster.store_root = startup.store_folder(store_root, shards)
        cluster.shards = shards
        cluster.limits = startup.face_limits(team, limits)
        cluster._stream_bounds = startup.stream_bounds(
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
            max_released_leases=startup.positive_int("max_released_leases", max_released_leases),
        )
        owed = startup.positive_int("max_owed_calls", max_owed_calls)
        cluster._start(address, runtime_env, config, retry_s, call_timeout_s, remember, owed)
        return cluster

    def _start(
        self,
        address: str | None,
        runtime_env: dict[str, Any] | None,
        config: ShardConfig,
        retry_s: float,
        call_timeout_s: float,
        remember: int,
        max_owed: int,
    ) -> None:
        """Connect to Ray and start (or find) the directory and the shards; make the router
        (remembering ``remember``) and bound the outbox at ``max_owed`` calls."""
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
        self._transport.outbox.max_calls = max_owed
        self._router = Router(
            self.shards,
            self.limits,
            retry_s=retry_s,
            call_timeout_s=call_timeout_s,
            remember=remember,
        )

    # -- what the calls run on ----------------------------------------------------------

    def _ops(self) -> tuple[Transport, Router]:
        with self._lock:
            if self._closed or self._transport is None or self._router is None:
                raise RuntimeClosed("the cluster is closed; open it again to continue")
            return self._transport, self._router

    def _run(self, operation: Callable[[Router], Op[T]], *, leased: bool = False) -> T:
        """Run the router's operation that ``operation`` picks, from this thread.

        Raises:
            OutboxFull: ``leased`` (a wait) while the face owes ``max_owed_calls``.
        """
        transport, router = self._ops()
        if not leased:
            return transport.run(operation(router))
        transport.outbox.reserve()
        try:
            return transport.run(operation(router))
        finally:
            transport.outbox.unreserve()

    async def _run_async(self, operation: Callable[[Router], Op[T]], *, leased: bool = False) -> T:
        """Run the router's operation that ``operation`` picks, on the running event loop.

        Raises:
            OutboxFull: ``leased`` (a wait) while the face owes ``max_owed_calls``.
        """
        transport, router = self._ops()
        if not leased:
            return await transport.run_async(operation(router))
        transport.outbox.reserve()
        try:
            return await transport.run_async(operation(router))
        finally:
            transport.outbox.unreserve()

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
        return self._run(lambda r: r.spawn(profile, task, name, parent, idempotency_key))

    def run(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Completion:
        """Like ``Runtime.run``: spawn an agent and wait for its first completion.

        A :meth:`spawn` on the agent's shard (a new top-level agent's is the
        directory's), then a :meth:`wait` there, as two shard calls (not one
        command, as in process): the wait is leased and acknowledged as every
        cluster wait is, and never returns one completion twice. ``timeout``
        (None: ``wait_default_s``) is checked before anything is spawned and
        counts from the call. With ``idempotency_key`` a retried run spawns
        nothing new and waits on the agent the first made: the host's next
        completion of it, so a retry after the first run returned raises
        ``NothingToWaitFor``. There is no ``lease``: cluster waits lease and
        acknowledge on their own.

        Raises:
            UnknownProfile, NotPermitted, DuplicateAgentPath: as :meth:`spawn` raises
                them, and InvalidArgument, ArgumentTypeError for a bad ``timeout``
                (nothing was spawned).
            WaitTimeout: the agent did not settle in time; it keeps running and
                the error's ``path`` names it (:meth:`wait` on it later).
            AgentClosed, NothingToWaitFor: as :meth:`wait`.
            ShardUnavailable: the shard did not come back in time.
            OutboxFull: the face owes ``max_owed_calls`` lease calls (nothing spawned).
        """
        return self._run(
            lambda r: r.run(profile, task, name, parent, idempotency_key, timeout), leased=True
        )

    def wait(self, ref: str, timeout: float | None = None) -> Completion:
        """Like ``Runtime.wait``: the oldest completion the host has not received, once.

        A wait in flight when the face is closed (:meth:`shutdown`, :meth:`detach`) does
        not return what it was handed: it releases its lease and raises RuntimeClosed,
        so the next wait on the agent, from any face, gets the completion once.
        """
        return self._run(lambda r: r.wait(ref, timeout), leased=True)

    def send(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like ``Runtime.send``."""
        return self._run(lambda r: r.send(ref, content, dedup_key))

    def messages(self, timeout: float | None = None) -> list[Message]:
        """Like ``Runtime.messages``, over every shard's host inbox (oldest first)."""
        return self._run(lambda r: r.messages(timeout))

    def follow_up(self, ref: str, task: str) -> AgentInfo:
        """Like ``Runtime.follow_up``."""
        return self._run(lambda r: r.follow_up(ref, task))

    def resume(self, ref: str) -> AgentInfo:
        """Like ``Runtime.resume``."""
        return self._run(lambda r: r.resume(ref))

    def interrupt(self, ref: str) -> AgentInfo:
        """Like ``Runtime.interrupt``."""
        return self._run(lambda r: r.interrupt(ref))

    def interrupt_tree(self, ref: str) -> list[AgentInfo]:
        """Like ``Runtime.interrupt_tree``."""
        return self._run(lambda r: r.interrupt_tree(ref))

    def close(self, ref: str = _NO_REF) -> AgentInfo:
        """Like ``Runtime.close`` of one agent (the cluster itself: :meth:`shutdown`)."""
        agent = _agent_ref(ref, "close")
        return self._run(lambda r: r.close(agent))

    def close_tree(self, ref: str) -> list[AgentInfo]:
        """Like ``Runtime.close_tree``."""
        return self._run(lambda r: r.close_tree(ref))

    def get(self, ref: str) -> AgentInfo:
        """Like ``Runtime.get``."""
        return self._run(lambda r: r.get(ref))

    def agents(
        self, *, include_closed: bool = False, limit: int | None = None, after: str | None = None
    ) -> list[AgentInfo]:
        """Like ``Runtime.agents``: every shard's agents, oldest first, or one page by path
        (cut from every shard's agents here: a page costs what the whole list does)."""
        check_page(limit, after, self.limits.agents_page_max)
        result = self._run(lambda r: r.agents(include_closed))
        return _page(result, include_closed, limit, after)

    def inspect(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Like ``Runtime.inspect``."""
        return self._run(lambda r: r.inspect(ref, transcript_tail))

    def approvals(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Like ``Runtime.approvals``: the pending requests of ``ref``'s subtree, or of every
        shard, oldest first (their ids carry their shard).

        Raises:
            UnknownAgent, InvalidAgentPath: a bad ``ref``.
        """
        return self._run(lambda r: r.approvals(ref))

    def approve(self, request_id: str, *, note: str | None = None) -> None:
        """Like ``Runtime.approve``: the call runs and the model gets its result. The id
        carries its shard, so the answer goes straight there, under a request id the shard
        records (a retry after a lost reply answers once).

        Raises:
            UnknownApproval: no shard of this cluster made that id.
            ApprovalAlreadyAnswered: it was answered (or cancelled) before.
            ArgumentTypeError, InvalidArgument: a bad id or note.
        """
        self._run(lambda r: r.approve(request_id, note))

    def deny(self, request_id: str, *, reason: str) -> None:
        """Like ``Runtime.deny``: the model gets ``{"error": "denied: <reason>"}``.

        Raises:
            UnknownApproval, ApprovalAlreadyAnswered: as :meth:`approve`.
            ArgumentTypeError, InvalidArgument: a bad id, or a blank reason.
        """
        self._run(lambda r: r.deny(request_id, reason))

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
        return await self._run_async(
            lambda r: r.spawn(profile, task, name, parent, idempotency_key)
        )

    async def run_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Completion:
        """Like :meth:`run`, without blocking the event loop.

        A cancelled await loses nothing: the agent, once spawned, keeps
        running, and a completion already handed to the wait is given back
        (its lease released) for the next :meth:`wait` on it.
        """
        return await self._run_async(
            lambda r: r.run(profile, task, name, parent, idempotency_key, timeout), leased=True
        )

    async def wait_async(self, ref: str, timeout: float | None = None) -> Completion:
        """Like :meth:`wait`; a cancelled wait gives back what it was handed, at once.

        A cancel (during the shard's call or the back-off after a failed one)
        releases the wait's lease on its shard: a wait under it still running
        there ends, one that reaches the shard after the release takes nothing,
        and a completion already taken goes back, so the next wait on the agent
        gets it (not only after ``lease_timeout_s``). The cancel ends once the
        shard answered the release for good (the first send's answer, or the
        outbox's re-send of one that failed), or after ``call_timeout_s``; a
        release not answered by then is sent again in the background until it is.
        """
        return await self._run_async(lambda r: r.wait(ref, timeout), leased=True)

    async def send_async(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        return await self._run_async(lambda r: r.send(ref, content, dedup_key))

    async def messages_async(self, timeout: float | None = None) -> list[Message]:
        """Like :meth:`messages`, without blocking the event loop."""
        return await self._run_async(lambda r: r.messages(timeout))

    async def follow_up_async(self, ref: str, task: str) -> AgentInfo:
        """Like :meth:`follow_up`, without blocking the event loop."""
        return await self._run_async(lambda r: r.follow_up(ref, task))

    async def resume_async(self, ref: str) -> AgentInfo:
        """Like :meth:`resume`, without blocking the event loop."""
        return await self._run_async(lambda r: r.resume(ref))

    async def interrupt_async(self, ref: str) -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        return await self._run_async(lambda r: r.interrupt(ref))

    async def interrupt_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`interrupt_tree`, without blocking the event loop."""
        return await self._run_async(lambda r: r.interrupt_tree(ref))

    async def close_async(self, ref: str = _NO_REF) -> AgentInfo:
        """Like :meth:`close`, without blocking the event loop."""
        agent = _agent_ref(ref, "close_async")
        return await self._run_async(lambda r: r.close(agent))

    async def close_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        return await self._run_async(lambda r: r.close_tree(ref))

    async def get_async(self, ref: str) -> AgentInfo:
        """Like :meth:`get`, without blocking the event loop."""
        return await self._run_async(lambda r: r.get(ref))

    async def agents_async(
        self, *, include_closed: bool = False, limit: int | None = None, after: str | None = None
    ) -> list[AgentInfo]:
        """Like :meth:`agents`, without blocking the event loop."""
        check_page(limit, after, self.limits.agents_page_max)
        result = await self._run_async(lambda r: r.agents(include_closed))
        return _page(result, include_closed, limit, after)

    async def inspect_async(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Like :meth:`inspect`, without blocking the event loop."""
        return await self._run_async(lambda r: r.inspect(ref, transcript_tail))

    async def approvals_async(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Like :meth:`approvals`, without blocking the event loop."""
        return await self._run_async(lambda r: r.approvals(ref))

    async def approve_async(self, request_id: str, *, note: str | None = None) -> None:
        """Like :meth:`approve`, without blocking the event loop."""
        await self._run_async(lambda r: r.approve(request_id, note))

    async def deny_async(self, request_id: str, *, reason: str) -> None:
        """Like :meth:`deny`, without blocking the event loop."""
        await self._run_async(lambda r: r.deny(request_id, reason))

    # -- event streams -------------------------------------------------------------------

    def stream(self, ref: str | None = None) -> ClusterStream:
        """Like ``Runtime.stream``: iterate over the events of ``ref``'s subtree as they happen
        (None: every shard's), merged as they come, each shard's in order.

        Ids in the events are cluster ids. A shard that restarted (or that
        closed the stream after ``stream_idle_s`` without a take) yields one
        ``EventsDropped(dropped=0)`` where the gap is, and the stream goes on.
        Ends when the loop is left (``break``, ``close()``, a ``with`` block),
        at :meth:`shutdown`, or when every shard it listens on closes.

        Raises:
            RuntimeClosed: the cluster (or a shard's runtime) is closed.
            ArgumentTypeError, InvalidAgentPath, UnknownAgent: a bad ``ref``.
            LimitExceeded: a shard has ``max_streams`` streams open.
            ShardUnavailable: a shard did not answer within ``retry_s``.
        """
        return self._kept(ClusterStream(self._opened(ref)))

    def stream_async(self, ref: str | None = None) -> AsyncClusterStream:
        """Like :meth:`stream`, as an async iterator that never blocks the event loop while
        it waits (opening it waits for the shards' answers, one round trip)."""
        return self._kept(AsyncClusterStream(self._opened(ref)))

    def _opened(self, ref: str | None) -> Part:
        """Open a stream of ``ref`` on the shards it listens on."""
        transport, router = self._ops()
        targets = transport.run(router.stream_targets(ref))
        part = Part(transport, new_id(), targets, self._stream_bounds)
        try:
            transport.run(open_op(part.stream_id, targets))
        except BaseException:
            with contextlib.suppress(Exception):
                transport.run(close_op(part.stream_id, targets))
            raise
        return part

    def _kept(self, stream: S) -> S:
        self._open_streams.add(stream)
        return stream

    def _close_streams(self) -> None:
        """Close every stream this face opened and still has (at shutdown)."""
        for stream in list(self._open_streams):
            stream.close()

    # -- tests and the crash loop --------------------------------------------------------

    @property
    def faults(self) -> Faults:
        """Lost replies to inject, by call name (for tests and the crash loop)."""
        transport, _ = self._ops()
        return transport.faults

    def set_fault(self, shard: int, point: str, calls: Iterable[str], times: int = 1) -> None:
        """Make shard ``shard`` kill its own process at ``point`` (for tests; see the wire)."""
        transport, _ = self._ops()
        call = w.encode_call(w.SetFault(point, tuple(calls), times))
        transport.run(raw_reply(One(shard, call)))

    def ping(self) -> list[w.Pong]:
        """Return what every shard says about itself (pid, node, leases held)."""
        transport, _ = self._ops()
        ping = w.encode_call(w.Ping())
        return [
            w.decode_reply(transport.run(raw_reply(One(k, ping, "ping"))), w.Pong)
            for k in range(self.shards)
        ]

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`shutdown` (or :meth:`detach`) ran."""
        return self._closed

    def shutdown(self) -> None:
        """Close every shard's runtime and stop the cluster's actors; idempotent.

        Each shard commits what it was doing and releases its store; the
        actors are then killed without a restart, and a local Ray this face
        started is stopped. First the lease acknowledgements and releases the
        face owes are flushed for up to ``call_timeout_s``; what is still owed
        then is dropped, counted and logged (its shard's ``lease_timeout_s``
        settles it).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close_streams()
        if self._transport is not None:
            self._transport.close(self._transport.call_timeout_s)  # acks and releases owed
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
        stores keep every committed step, as after a crash). The lease
        acknowledgements and releases the face owes are flushed first, for up to
        ``call_timeout_s``; what is still owed then is dropped, counted and logged
        (its shard's ``lease_timeout_s`` settles it: another face may get such a
        completion again).
        """
        with self._lock:
            self._closed = True
        self._close_streams()
        if self._transport is not None:
            self._transport.close(self._transport.call_timeout_s)  # acks and releases owed
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
