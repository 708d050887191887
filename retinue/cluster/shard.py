"""A shard: one ordinary :class:`~retinue.runtime.Runtime` behind the wire, with its request log.

:class:`ShardCore` is what the Ray actor (:mod:`retinue.cluster._actors`)
hosts, and holds no Ray code: it opens the runtime over its own store
(``<store_root>/shard-<k>``) and its request log beside it, and serves
encoded calls (:mod:`retinue.cluster.wire`) on the actor's event loop: a
host call arrives as the runtime's own command, which the shard submits to its
runtime as the host (a wait and the host's inbox through ``wait_async`` and
``messages_async``, which take a timeout), and answers with every id a cluster id.

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
  within ``lease_timeout_s`` is released (its completion is handed out again);
- a face whose wait is cancelled sends ``ReleaseLease`` for its lease, which may
  reach the shard before, during or after the wait: a wait under that lease in
  progress is cancelled (what it took is given back), one that arrives later is
  refused without taking anything (the lease is remembered for
  ``lease_timeout_s``, :mod:`retinue.cluster._released`), and one that took a
  completion meanwhile gives it back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from retinue.actors.admission import ProviderGate
from retinue.actors.commands import AckLease, Command, HostMessages, ReleaseLease, Wait
from retinue.cluster import ids
from retinue.cluster import wire as w
from retinue.cluster._released import Released
from retinue.cluster._shardstreams import ShardStreams
from retinue.cluster.eventwire import CloseStream, OpenStream, TakeEvents
from retinue.cluster.leasebook import leased
from retinue.cluster.limits import Broker, LeasedCapacity
from retinue.cluster.requests import RequestLog
from retinue.cluster.specs import ShardConfig, config_digest, profile_of
from retinue.errors import InvalidArgument, RetinueError, StoreLocked
from retinue.runtime import Runtime
from retinue.team import Team

log = logging.getLogger("retinue.cluster.shard")

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
        self._leased: dict[str, set[asyncio.Task[Any]]] = {}  # leased waits in progress
        # leases a face released, each remembered for lease_timeout_s
        self._released = Released(config.lease_timeout_s, config.max_released_leases)
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
            command = w.command_of(call) if isinstance(call, w.Run) else None
        except RetinueError as exc:
            return w.error_reply(exc)
        if isinstance(call, w.Run) and call.rid is not None and command is not None:
            return await self._recorded(call, call.rid, command)
        try:
            return w.ok_reply(await self._serve(call, command))
        except Exception as exc:
            return w.error_reply(exc)

    async def _recorded(self, call: w.Run, rid: str, command: Command[Any]) -> bytes:
        """Serve a mutating call once per request id; answer a repeat with the recorded reply."""
        stored = self.log.get(rid)
        if stored is not None:
            return stored
        running = self._inflight.get(rid)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._inflight[rid] = future
        try:
            reply, keep = await self._run_recorded(call, command)
            if keep:
                self._fault("after_runtime", command)
                await self.log.record(rid, reply)
                self._fault("after_record", command)
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

    async def _run_recorded(self, call: w.Run, command: Command[Any]) -> tuple[bytes, bool]:
        """Run a mutating call; return its reply and whether it is the call's answer for good."""
        try:
            return w.ok_reply(await self._serve(call, command)), True
        except Exception as exc:
            return w.error_reply(exc), w.recordable(exc)

    async def _serve(self, call: w.Call, command: Command[Any] | None) -> Any:
        """Run one decoded call (a :class:`~retinue.cluster.wire.Run`'s ``command`` on the
        runtime, or one of the cluster's own calls); return its (id-mapped) answer.

        Raises:
            RetinueError: the runtime's refusal, as the caller will see it.
        """
        if isinstance(call, w.Run) and command is not None:
            return ids.map_answer(self.shard, await self._command(call, command))
        match call:
            case w.StopWaiting():
                for rid in call.rids:
                    task = self._waiting.get(rid)
                    if task is not None:
                        task.cancel()
                return None
            case OpenStream():
                return self.streams.open(call.stream_id, call.ref)
            case TakeEvents():
                return await self.streams.take(call.stream_id, call.max_events, call.wait_s)
            case CloseStream():
                return self.streams.close(call.stream_id)
            case w.Ping():
                return self.pong()
            case w.Shutdown():
                self.close()
                return None
            case w.SetFault():
                self._faults[call.point] = (frozenset(call.calls), call.times)
                return None
        raise TypeError(f"not a shard call: {call!r}")

    async def _command(self, call: w.Run, command: Command[Any]) -> Any:
        """Submit ``command`` to the runtime as the host; a wait and the host's inbox wait up
        to the call's timeout, and the shard keeps count of the leases it hands out."""
        match command:
            case Wait():
                return await self._wait(command, call.timeout)
            case HostMessages():
                return await self._messages(call.rid or "", call.timeout)
            case ReleaseLease():
                return await self._release(command)
            case AckLease():
                with self._grants_lock:
                    self._grants.pop(command.lease, None)
        return await self.rt._ask_async(command)

    async def _wait(self, command: Wait, timeout: float | None) -> Any:
        """A host wait; a leased one ends without keeping anything once its lease is released.

        Raises:
            InvalidArgument: the lease was released (its face's caller is gone) before
                or while the wait ran; what it took was given back.
        """
        lease = command.lease
        if lease is None:
            return await self.rt.wait_async(command.ref, timeout)
        if self._released.has(lease, time.monotonic()):
            raise _released(lease)
        task = asyncio.ensure_future(self.rt.wait_async(command.ref, timeout, lease=lease))
        waits = self._leased.setdefault(lease, set())
        waits.add(task)
        try:
            completion = await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():  # the call itself is cancelled
                if task.done() and not task.cancelled() and task.exception() is None:
                    # Its wait took the completion just before the cancel reached this
                    # call, which nobody will answer now: give the completion back (a
                    # wait cancelled earlier gave back what it took itself).
                    await asyncio.shield(self.rt._ask_async(ReleaseLease(lease)))
                raise
            raise _released(lease) from None  # cancelled by the release
        finally:
            waits.discard(task)
            if not waits:
                self._leased.pop(lease, None)
        if self._released.has(lease, time.monotonic()):
            # Released between the take and here: give it back (if the release has not).
            await self.rt._ask_async(ReleaseLease(lease))
            raise _released(lease)
        with self._grants_lock:
            self._grants[lease] = time.monotonic()
        return completion

    async def _release(self, command: ReleaseLease) -> bool:
        """Release ``command.lease`` for good: a wait under it in progress here is cancelled
        (and gives back what it took), and one that arrives later is refused."""
        lease = command.lease
        tombstones = self._released
        dropped = tombstones.dropped_early
        tombstones.add(lease, time.monotonic())
        if tombstones.dropped_early != dropped:
            log.warning(
                "shard %d remembers %d released leases (max_released_leases): the oldest was "
                "forgotten before lease_timeout_s; a wait under it arriving now takes its "
                "completion, handed out again after lease_timeout_s (%d forgotten early so far)",
                self.shard,
                len(tombstones),
                tombstones.dropped_early,
            )
        waits = self._leased.get(lease)
        if waits:
            for task in waits:
                task.cancel()
            await asyncio.wait(set(waits))  # each gave back what it took, in order
        with self._grants_lock:
            self._grants.pop(lease, None)
        released: bool = await self.rt._ask_async(command)
        return released

    async def _messages(self, rid: str, timeout: float | None) -> Any:
        """The host inbox, waiting up to ``timeout``; a :class:`StopWaiting` ends it empty."""
        task = asyncio.ensure_future(self.rt.messages_async(timeout))
        self._waiting[rid] = task
        try:
            messages = await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise  # the call itself is cancelled
            messages = []  # stopped: what it had taken was given back, unread
        finally:
            self._waiting.pop(rid, None)
        return messages

    def released_leases(self) -> int:
        """How many released leases this shard remembers now (for tests and diagnostics)."""
        self._released.expire(time.monotonic())
        return len(self._released)

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
            released_dropped_early=self._released.dropped_early,
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

    def _fault(self, point: str, command: Command[Any]) -> None:
        """Kill this process if a test asked for it at ``point`` for this command."""
        fault = self._faults.get(point)
        if fault is None or fault[1] <= 0 or w.call_name(command) not in fault[0]:
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


def _released(lease: str) -> InvalidArgument:
    """The refusal of a wait whose lease was released (its caller cancelled it)."""
    return InvalidArgument(
        f"lease {lease!r} was released (its wait was cancelled): this wait took nothing"
    )
