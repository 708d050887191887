"""A shard: one ordinary :class:`~retinue.runtime.Runtime` behind the wire, with its request log.

:class:`ShardCore` is what the Ray actor (:mod:`retinue.cluster.actors`)
hosts, and holds no Ray code: it opens the runtime over its own store
(``<store_root>/shard-<k>``) and its request log beside it, and serves
encoded calls (:mod:`retinue.cluster.wire`) on the actor's event loop
through the runtime's ``*_async`` faces.

Exactly once across the wire:

- a mutating call's answer is recorded under its request id; a call whose
  id is recorded gets the recorded answer and runs nothing; one that is
  still running is awaited, not run twice;
- a spawn carries an idempotency key and a send a dedup key in the
  runtime's own commit, so a crash between that commit and the log's still
  spawns or sends once;
- a wait is leased (``Runtime.wait_async(..., lease=...)``): the lease is
  stored in the commit that marks the completion received; the face
  acknowledges it once it has the completion; a lease not acknowledged
  within ``lease_timeout_s`` is released (its completion is handed out again).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from retinue.actors.admission import ProviderGate
from retinue.cluster import ids
from retinue.cluster import wire as w
from retinue.cluster.eventwire import CloseStream, OpenStream, TakeEvents
from retinue.cluster.leasebook import leased
from retinue.cluster.limits import Broker, LeasedCapacity
from retinue.cluster.requests import RequestLog
from retinue.cluster.shardstreams import ShardStreams
from retinue.cluster.specs import ShardConfig, config_digest, profile_of
from retinue.errors import RetinueError, StoreLocked
from retinue.runtime import Runtime
from retinue.team import Team

__all__ = ["ShardCore"]

REQUESTS_FOLDER = "requests"
LOCK_POLL_S = 0.1


class ShardCore:
    """One shard's runtime, request log and leases; serves encoded calls."""

    def __init__(self, shard: int, folder: Path, config: ShardConfig, rt: Runtime) -> None:
        """Use :meth:`open`."""
        self.shard = shard
        self.folder = folder
        self.config = config
        self.rt = rt
        self.node_id = ""
        self.digest = config_digest(config)
        self.restored_at = time.time()
        self.log = RequestLog(
            folder / REQUESTS_FOLDER,
            sync=config.durability == "full",
            ttl_s=config.request_ttl_s,
            max_entries=config.max_requests,
        )
        self._inflight: dict[str, asyncio.Future[bytes]] = {}
        self._waiting: dict[str, asyncio.Task[Any]] = {}  # blocked ``messages`` by request id
        self._faults: dict[str, tuple[frozenset[str], int]] = {}
        self.streams = ShardStreams(
            rt, shard, idle_s=config.stream_idle_s, max_streams=config.max_streams
        )
        self._grants_lock = threading.Lock()
        # Leases handed out and not acknowledged, with when; restored ones count from now.
        self._grants = {lease: time.monotonic() for lease in rt.leases()}
        self._stop = threading.Event()
        self._sweeper = threading.Thread(
            target=self._sweep_leases, name="retinue-lease-sweeper", daemon=True
        )
        self._sweeper.start()
        self.capacity: LeasedCapacity | None = None

    def share_limits(self, broker: Broker, holder: str) -> None:
        """Lease the cluster's provider limits from ``broker`` as ``holder`` (this process):
        every model call the runtime admits then also takes its share of the account's
        capacity (:mod:`retinue.cluster.limits`)."""
        matches = [limit.match for limit in self.config.provider_limits if leased(limit)]
        system = self.rt._system
        gate = getattr(system, "admission", None)  # a writer's gate (None: no limit)
        if not matches or not isinstance(gate, ProviderGate):
            return
        self.capacity = LeasedCapacity(
            broker, holder, matches, lease_s=self.config.provider_lease_s
        ).start()
        gate.share(self.capacity)

    @classmethod
    def open(cls, shard: int, folder: Path, config: ShardConfig) -> ShardCore:
        """Open shard ``shard``'s runtime over ``folder`` (restored as any reopen) and its log.

        A store another process still holds (the shard's previous process on
        its way out) is tried again for up to ``config.lock_wait_s``.

        Raises:
            ConfigurationError, TeamFileError: a runner does not import here.
            StoreError (and its kinds): as ``Runtime.open`` raises.
        """
        profiles = [profile_of(spec) for spec in config.profiles]
        team = (
            None
            if config.team is None
            else Team.from_toml(config.team.text, source=config.team.source)
        )
        deadline = time.monotonic() + config.lock_wait_s
        while True:
            try:
                rt = Runtime.open(
                    folder,
                    profiles=profiles,
                    team=team,
                    limits=config.limits,
                    durability=config.durability,
                    provider_limits=config.provider_limits or None,
                )
                break
            except StoreLocked:
                # The process this one replaces may still be on its way out.
                if time.monotonic() > deadline:
                    raise
                time.sleep(LOCK_POLL_S)
        try:
            return cls(shard, folder, config, rt)
        except BaseException:
            rt.shutdown()
            raise

    # -- serving -------------------------------------------------------------------------

    async def handle(self, payload: bytes) -> bytes:
        """Serve one encoded call; return the encoded reply (never raises for a refusal)."""
        try:
            call = w.decode_call(payload)
        except RetinueError as exc:
            return w.error_reply(exc)
        if w.is_recorded(call):
            return await self._recorded(call)
        try:
            return w.ok_reply(await self._serve(call))
        except Exception as exc:
            return w.error_reply(exc)

    async def _recorded(self, call: Any) -> bytes:
        """Serve a mutating call once per request id; answer a repeat with the recorded reply."""
        rid: str = call.rid
        stored = self.log.get(rid)
        if stored is not None:
            return stored
        running = self._inflight.get(rid)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._inflight[rid] = future
        try:
            reply, keep = await self._run_recorded(call)
            if keep:
                self._fault("after_runtime", call)
                await self.log.record(rid, reply)
                self._fault("after_record", call)
            future.set_result(reply)
            return reply
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a repeat that awaits it gets it too
            raise
        finally:
            del self._inflight[rid]

    async def _run_recorded(self, call: Any) -> tuple[bytes, bool]:
        """Run a mutating call; return its reply and whether it is the call's answer for good."""
        try:
            return w.ok_reply(await self._serve(call)), True
        except Exception as exc:
            return w.error_reply(exc), w.recordable(exc)

    async def _serve(self, call: w.Call) -> Any:
        """Run one decoded call on the runtime; return its (id-mapped) answer.

        Raises:
            RetinueError: the runtime's refusal, as the caller will see it.
        """
        k, rt = self.shard, self.rt
        match call:
            case w.Spawn():
                info = await rt.spawn_async(
                    call.profile,
                    call.task,
                    name=call.name,
                    parent=call.parent,
                    idempotency_key=call.key,
                )
                return ids.map_info(k, info)
            case w.Send():
                message = await rt.send_async(call.ref, call.content, dedup_key=call.dedup_key)
                return ids.map_message(k, message)
            case w.Wait():
                return await self._wait(call)
            case w.Ack():
                with self._grants_lock:
                    self._grants.pop(call.lease, None)
                return await rt.ack_lease_async(call.lease)
            case w.Release():
                with self._grants_lock:
                    self._grants.pop(call.lease, None)
                return await rt.release_lease_async(call.lease)
            case w.Messages():
                return await self._messages(call)
            case w.StopWaiting():
                for rid in call.rids:
                    task = self._waiting.get(rid)
                    if task is not None:
                        task.cancel()
                return None
            case w.Get():
                return ids.map_info(k, await rt.get_async(call.ref))
            case w.Inspect():
                detail = await rt.inspect_async(call.ref, transcript_tail=call.transcript_tail)
                return ids.map_detail(k, detail)
            case w.Agents():
                agents = await rt.agents_async(include_closed=call.include_closed)
                return [ids.map_info(k, a) for a in agents]
            case w.Approvals():
                return [ids.map_request(k, r) for r in await rt.approvals_async(call.ref)]
            case w.Approve():
                return await rt.approve_async(call.request_id, note=call.note)
            case w.Deny():
                return await rt.deny_async(call.request_id, reason=call.reason)
            case OpenStream():
                return self.streams.open(call.stream_id, call.ref)
            case TakeEvents():
                return await self.streams.take(call.stream_id, call.max_events, call.wait_s)
            case CloseStream():
                return self.streams.close(call.stream_id)
            case _:
                return await self._serve_other(call)

    async def _serve_other(self, call: w.Call) -> Any:
        """The calls on one agent that answer one agent or a list, and the shard's own calls."""
        k, rt = self.shard, self.rt
        one: dict[type[Any], Callable[..., Awaitable[Any]]] = {
            w.FollowUp: lambda c: rt.follow_up_async(c.ref, c.task),
            w.Resume: lambda c: rt.resume_async(c.ref),
            w.Interrupt: lambda c: rt.interrupt_async(c.ref),
            w.Close: lambda c: rt.close_async(c.ref),
        }
        many: dict[type[Any], Callable[..., Awaitable[Any]]] = {
            w.InterruptTree: lambda c: rt.interrupt_tree_async(c.ref),
            w.CloseTree: lambda c: rt.close_tree_async(c.ref),
        }
        kind = type(call)
        if kind in one:
            return ids.map_info(k, await one[kind](call))
        if kind in many:
            return [ids.map_info(k, a) for a in await many[kind](call)]
        match call:
            case w.Ping():
                return self.pong()
            case w.Shutdown():
                self.close()
                return None
            case w.SetFault():
                self._faults[call.point] = (frozenset(call.calls), call.times)
                return None
        raise TypeError(f"not a shard call: {call!r}")

    async def _wait(self, call: w.Wait) -> Any:
        completion = await self.rt.wait_async(call.ref, call.timeout, lease=call.lease)
        with self._grants_lock:
            self._grants[call.lease] = time.monotonic()
        return ids.map_completion(self.shard, completion)

    async def _messages(self, call: w.Messages) -> Any:
        """The host inbox, waiting up to the timeout; a :class:`StopWaiting` ends it empty."""
        task = asyncio.ensure_future(self.rt.messages_async(call.timeout))
        self._waiting[call.rid] = task
        try:
            messages = await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise  # the call itself is cancelled
            messages = []  # stopped: what it had taken was given back, unread
        finally:
            self._waiting.pop(call.rid, None)
        return [ids.map_message(self.shard, m) for m in messages]

    def pong(self) -> w.Pong:
        """Describe this shard for a :class:`~retinue.cluster.wire.Ping`."""
        with self._grants_lock:
            leases = len(self._grants)
        return w.Pong(
            shard=self.shard,
            pid=os.getpid(),
            node_id=self.node_id,
            config_digest=self.digest,
            leases=leases,
            restored_at=self.restored_at,
            streams=len(self.streams),
        )

    # -- leases, faults, close -----------------------------------------------------------

    def _sweep_leases(self) -> None:
        """Release leases not acknowledged within ``lease_timeout_s`` (their face is gone);
        close event streams not polled within ``stream_idle_s`` (see ShardStreams)."""
        timeout = self.config.lease_timeout_s
        every = min(timeout, self.config.stream_idle_s) / 4
        while not self._stop.wait(min(max(every, 0.05), 5.0)):
            self.streams.sweep()
            now = time.monotonic()
            with self._grants_lock:
                expired = [lease for lease, at in self._grants.items() if now - at > timeout]
                for lease in expired:
                    del self._grants[lease]
            for lease in expired:
                with contextlib.suppress(RetinueError):
                    self.rt.release_lease(lease)

    def _fault(self, point: str, call: Any) -> None:
        """Kill this process if a test asked for it at ``point`` for this call."""
        fault = self._faults.get(point)
        if fault is None or fault[1] <= 0 or call.__struct_config__.tag not in fault[0]:
            return
        self._faults[point] = (fault[0], fault[1] - 1)
        os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        """Close the runtime and the request log (idempotent)."""
        self._stop.set()
        self.rt.shutdown()  # its event streams end after the events queued before
        if self.capacity is not None:
            self.capacity.close()
        self.log.close()
