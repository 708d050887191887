"""The host-facing facade: open a store, spawn agents, wait, message, close.

``Runtime`` is thread-safe: every call becomes one request in the supervisor
actor's inbox and is answered through a future once its transition is
committed. The ``*_async`` methods bridge those futures into asyncio without
blocking the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import pykka

from retinue.actors.compaction import CompactionReport
from retinue.actors.core import AFTER_CLOSE
from retinue.actors.events import EventBus, Subscriber
from retinue.actors.profile import Profile, Runner
from retinue.actors.supervisor import Call, Supervisor, SupervisorActor, info_of
from retinue.actors.tree import Tree
from retinue.actors.turn import resolve_timeout, wait_result
from retinue.errors import (
    ConfigurationError,
    RetinueError,
    RuntimeClosed,
    StoreReadOnly,
    StoreVersionError,
    UnknownAgent,
)
from retinue.persistence.restore import Diagnostic, restore
from retinue.persistence.store import DEFAULT_MAP_SIZE, Durability, Store
from retinue.protocol.graph import validate_graph
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, AgentState, Completion, Message

__all__ = ["Runtime"]

CLOSE_GRACE_S = 5.0


def _fail(future: concurrent.futures.Future[Any], error: BaseException) -> None:
    if future.set_running_or_notify_cancel():
        future.set_exception(error)


def _profile_table(
    profiles: Iterable[Profile], runner: Runner | None, limits: Limits
) -> tuple[dict[str, Profile], dict[str, Runner]]:
    table: dict[str, Profile] = {}
    runners: dict[str, Runner] = {}
    for profile in profiles:
        if not isinstance(profile, Profile):
            raise ConfigurationError(f"profiles must be Profile objects, not {profile!r}")
        if profile.name in table:
            raise ConfigurationError(f"profile {profile.name!r} is defined twice")
        chosen = profile.runner or runner
        if chosen is None:
            raise ConfigurationError(
                f"profile {profile.name!r} has no runner and the runtime has no default runner"
            )
        table[profile.name] = profile
        runners[profile.name] = chosen
    validate_graph({p.name: list(p.subagents) for p in table.values()}, cap=limits.depth_cap)
    return table, runners


class Runtime:
    """A supervised tree of agents kept in one LMDB store. Open it with :meth:`open`."""

    def __init__(self) -> None:
        """Use :meth:`Runtime.open`; the constructor only declares the fields."""
        self.path: Path = Path()
        self.limits = Limits()
        self.readonly = False
        self.diagnostics: list[Diagnostic] = []
        self._store: Store | None = None
        self._actor: pykka.ActorRef[Any] | None = None
        self._bus = EventBus()
        self._lock = threading.Lock()
        self._closed = False
        self._closing = False
        self._temporary = False
        self._profiles: dict[str, Profile] = {}
        self._stopping = threading.Event()
        self._compactor: threading.Thread | None = None

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None,
        *,
        profiles: Iterable[Profile] = (),
        runner: Runner | None = None,
        limits: Limits | None = None,
        durability: Durability | str = Durability.FULL,
        readonly: bool = False,
        map_size: int = DEFAULT_MAP_SIZE,
        group_commit: bool = True,
    ) -> Runtime:
        """Open (or create) the store at ``path`` and restore its tree.

        ``path=None`` makes a temporary store removed on close. ``durability``
        is ``"full"`` (fsync before answering) or ``"buffered"`` (survives a
        killed process; synced every second). ``map_size`` is the initial
        LMDB map, grown as needed; ``group_commit=False`` commits every
        transition alone (for benchmarks). Agents that
        were queued or running when the store was last used come back
        ``interrupted``; restore problems are listed in :attr:`diagnostics`.

        Raises:
            ConfigurationError: a profile without a runner, or defined twice.
            DelegationCycleError, DelegationDepthError: a bad profile graph.
            StoreLocked: another writer holds the store.
            StoreVersionError: the store was written by a newer schema.
        """
        rt = cls()
        rt.limits = limits if limits is not None else Limits.from_env()
        rt.readonly = readonly
        if readonly:
            if path is None:
                raise ConfigurationError("a read-only runtime needs the path of a store")
            rt.path = Path(path)
            rt._store = Store(rt.path, readonly=True)
            try:
                rt._store.refuse_newer()
            except StoreVersionError:
                rt._store.close()
                raise
            rt.diagnostics = list(restore(rt._store.snapshot(), rt.limits.depth_cap).diagnostics)
            return rt
        rt._profiles, runners = _profile_table(profiles, runner, rt.limits)
        if path is None:
            rt.path = Path(tempfile.mkdtemp(prefix="retinue-"))
            rt._temporary = True
        else:
            rt.path = Path(path)
        store = Store(rt.path, durability=durability, map_size=map_size, group_commit=group_commit)
        rt._store = store
        try:
            restored = restore(store.snapshot(), rt.limits.depth_cap)
            rt.diagnostics = list(restored.diagnostics) + [
                Diagnostic(
                    database="meta",
                    key="schema_version",
                    code="migrated",
                    message=f"store migrated from schema version {v}",
                )
                for v in store.migrated_from
            ]
            tree = Tree()
            tree.load(restored.agents, restored.messages, restored.completions)
            for record in restored.rewritten:
                tree.put_agent(record)
            rt._actor = SupervisorActor.start()
            core = Supervisor(
                store=store,
                tree=tree,
                profiles=rt._profiles,
                runners=runners,
                limits=rt.limits,
                bus=rt._bus,
                caller=rt._submit,
            )
            core.recover()
            store.write_now(tree.take_writes())
            rt._actor.tell(("attach", core))
            rt._compactor = threading.Thread(
                target=rt._compact_loop, name="retinue-compactor", daemon=True
            )
            rt._compactor.start()
        except BaseException:
            if rt._actor is not None:
                rt._actor.stop()
            store.close()
            raise
        return rt

    # -- plumbing --------------------------------------------------------------

    def _submit(
        self, method: str, *args: Any, reply: concurrent.futures.Future[Any] | None = None
    ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = reply or concurrent.futures.Future()
        if self.readonly:
            raise StoreReadOnly(f"runtime on {self.path} is read-only; {method} is refused")
        with self._lock:
            if self._actor is None or self._closed:
                raise RuntimeClosed("the runtime is closed")
            if self._closing and method not in AFTER_CLOSE:
                raise RuntimeClosed("the runtime is closing")
            try:
                self._actor.tell(Call(method, args, future))
            except pykka.ActorDeadError:
                raise RuntimeClosed("the runtime's supervisor has stopped") from None
        return future

    def _call(self, method: str, *args: Any) -> Any:
        return self._submit(method, *args).result()

    async def _call_async(self, method: str, *args: Any) -> Any:
        return await asyncio.wrap_future(self._submit(method, *args))

    def _read_tree(self) -> Tree:
        assert self._store is not None
        restored = restore(self._store.snapshot(), self.limits.depth_cap)
        tree = Tree()
        tree.load(restored.agents, restored.messages, restored.completions)
        return tree

    # -- host API ----------------------------------------------------------------

    def spawn(
        self, profile: str, task: str, *, name: str | None = None, parent: str = "/root"
    ) -> AgentInfo:
        """Record a new agent under ``parent`` and queue its first turn; return it.

        Raises:
            UnknownProfile, NotPermitted, DuplicateAgentPath, DepthLimitExceeded,
            FanoutLimitExceeded, AgentLimitExceeded, InvalidAgentPath, UnknownAgent.
        """
        info: AgentInfo = self._call("spawn", None, profile, task, name, parent)
        return info

    def wait(self, ref: str, timeout: float | None = None) -> Completion:
        """Return the completion of the agent's oldest turn the host has not received.

        Blocks until that turn settles; ``timeout=None`` means ``wait_default_s``.

        Raises:
            WaitTimeout: it did not settle in time; the agent keeps running.
            UnknownAgent: no such agent.
        """
        seconds = resolve_timeout(timeout, self.limits)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._submit("host_wait", ref, reply=future)
        result: Completion = wait_result(
            future, seconds, lambda: self._give_up_wait(future, seconds)
        )
        return result

    def _give_up_wait(self, future: concurrent.futures.Future[Any], seconds: float) -> None:
        try:
            self._submit("give_up_host_wait", future, seconds)
        except RetinueError as exc:  # closed meanwhile: nobody will answer the wait
            _fail(future, exc)

    def send(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Put a message in an agent's durable mailbox (read by its next turn).

        The same ``dedup_key`` returns the original message instead of a second one.

        Raises:
            MessageTooLarge, DedupKeyTooLong, MailboxFull, AgentClosed, UnknownAgent.
        """
        message: Message = self._call("send", None, ref, content, dedup_key)
        return message

    def follow_up(self, ref: str, task: str) -> AgentInfo:
        """Queue a new turn for an idle agent.

        Raises:
            AgentBusy: a turn is queued or running. AgentClosed: it is closed.
            CompletionBacklogFull: too many of its completions are unreceived.
        """
        info: AgentInfo = self._call("follow_up", None, ref, task)
        return info

    def resume(self, ref: str) -> AgentInfo:
        """Re-run an interrupted agent's task as a new turn.

        Raises:
            AgentStateError: the agent is not interrupted.
        """
        info: AgentInfo = self._call("resume", None, ref)
        return info

    def interrupt(self, ref: str) -> AgentInfo:
        """Cancel an agent's queued or running turn; it settles ``interrupted`` at once."""
        info: AgentInfo = self._call("interrupt", None, ref)
        return info

    def close(self, ref: str | None = None) -> Any:
        """Close agent ``ref``; with no argument, close the runtime itself.

        Closing an agent interrupts its turn first and frees its name.
        Closing the runtime interrupts running turns, waits a bounded time
        for runner threads, persists everything and stops every actor.

        Raises:
            ActiveDescendants: the agent still has live children.
            AgentClosed: it is already closed.
        """
        if ref is None:
            self.shutdown()
            return None
        info: AgentInfo = self._call("close", None, ref)
        return info

    def close_tree(self, ref: str) -> list[AgentInfo]:
        """Close an agent and its whole live subtree, children first; return them in order."""
        infos: list[AgentInfo] = self._call("close_tree", None, ref)
        return infos

    def get(self, ref: str) -> AgentInfo:
        """Return an agent by id or live path.

        Raises:
            UnknownAgent: no such agent.
        """
        if self.readonly:
            tree = self._read_tree()
            record = tree.agents.get(ref) or tree.agents.get(tree.live_paths.get(ref, ""))
            if record is None:
                raise UnknownAgent(f"no agent {ref!r}")
            return info_of(record)
        info: AgentInfo = self._call("get", None, ref)
        return info

    def agents(self, *, include_closed: bool = False) -> list[AgentInfo]:
        """Return every agent, oldest first; closed ones only with ``include_closed``."""
        if self.readonly:
            records = sorted(self._read_tree().agents.values(), key=lambda r: r.created_at)
            return [
                info_of(r) for r in records if include_closed or r.state is not AgentState.CLOSED
            ]
        infos: list[AgentInfo] = self._call("agents", include_closed)
        return infos

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(event)`` for every committed transition; return unsubscribe.

        Events arrive on one dispatcher thread, in commit order.
        """
        return self._bus.subscribe(callback)

    def backup(self, dest: str | os.PathLike[str]) -> Path:
        """Write a compacted hot copy of the live store to ``dest``; return its path."""
        assert self._store is not None
        if not self.readonly:
            self._call("barrier")
        return self._store.backup(dest)

    def compact(self) -> CompactionReport:
        """Compact now (it also runs every ``compact_interval_s``); return what went.

        Removes closed agents, read messages and delivered completions beyond
        the ``retain_*`` limits; never anything unread, undelivered or live.
        """
        report: CompactionReport = self._call("compact")
        return report

    def _compact_loop(self) -> None:
        while not self._stopping.wait(self.limits.compact_interval_s):
            try:
                self._submit("compact")
            except RetinueError:
                return

    # -- asyncio faces ---------------------------------------------------------------

    async def spawn_async(
        self, profile: str, task: str, *, name: str | None = None, parent: str = "/root"
    ) -> AgentInfo:
        """Like :meth:`spawn`, without blocking the event loop."""
        info: AgentInfo = await self._call_async("spawn", None, profile, task, name, parent)
        return info

    async def wait_async(self, ref: str, timeout: float | None = None) -> Completion:
        """Like :meth:`wait`, without blocking the event loop."""
        seconds = resolve_timeout(timeout, self.limits)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._submit("host_wait", ref, reply=future)
        waiting = asyncio.wrap_future(future)
        try:
            done, _ = await asyncio.wait({waiting}, timeout=seconds)
        except asyncio.CancelledError:
            if future.cancel():  # nothing was received: forget the wait
                self._give_up_wait(future, seconds)
            else:  # a completion was (or is being) handed over: give it back
                future.add_done_callback(self._unreceive)
            raise
        if not done:
            self._give_up_wait(future, seconds)
        result: Completion = await waiting
        return result

    def _unreceive(self, future: concurrent.futures.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        completion: Completion = future.result()
        with contextlib.suppress(RetinueError):
            self._submit("unreceive_host", completion.agent_id, completion.generation)

    async def send_async(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        message: Message = await self._call_async("send", None, ref, content, dedup_key)
        return message

    async def follow_up_async(self, ref: str, task: str) -> AgentInfo:
        """Like :meth:`follow_up`, without blocking the event loop."""
        info: AgentInfo = await self._call_async("follow_up", None, ref, task)
        return info

    async def interrupt_async(self, ref: str) -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        info: AgentInfo = await self._call_async("interrupt", None, ref)
        return info

    async def close_async(self, ref: str) -> AgentInfo:
        """Like :meth:`close` of an agent, without blocking the event loop."""
        info: AgentInfo = await self._call_async("close", None, ref)
        return info

    async def resume_async(self, ref: str) -> AgentInfo:
        """Like :meth:`resume`, without blocking the event loop."""
        info: AgentInfo = await self._call_async("resume", None, ref)
        return info

    async def close_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        infos: list[AgentInfo] = await self._call_async("close_tree", None, ref)
        return infos

    async def agents_async(self, *, include_closed: bool = False) -> list[AgentInfo]:
        """Like :meth:`agents`, without blocking the event loop."""
        if self.readonly:
            return self.agents(include_closed=include_closed)
        infos: list[AgentInfo] = await self._call_async("agents", include_closed)
        return infos

    async def compact_async(self) -> CompactionReport:
        """Like :meth:`compact`, without blocking the event loop."""
        report: CompactionReport = await self._call_async("compact")
        return report

    async def get_async(self, ref: str) -> AgentInfo:
        """Like :meth:`get`, without blocking the event loop."""
        info: AgentInfo = await self._call_async("get", None, ref)
        return info

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the runtime is closed."""
        return self._closed

    def shutdown(self) -> None:
        """Close the runtime (idempotent); see :meth:`close`."""
        if self._closed:
            return
        self._stopping.set()
        if self._compactor is not None:
            self._compactor.join()
        with self._lock:
            self._closing = True
        actor = self._actor
        actors: list[pykka.ActorRef[Any]] = []
        if actor is not None:
            # A failed store cannot record the interrupts; the turns are cancelled anyway.
            with contextlib.suppress(RetinueError):
                actors = self._call("shutdown")
        with self._lock:
            self._closed = True
        deadline = time.monotonic() + CLOSE_GRACE_S
        for ref in actors:
            with contextlib.suppress(pykka.Timeout):
                ref.stop(block=True, timeout=max(0.01, deadline - time.monotonic()))
        if actor is not None:
            actor.stop(block=True)
        if self._store is not None:
            self._store.close()
        self._bus.close()
        if self._temporary:
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> Runtime:
        """Return the runtime itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the runtime."""
        self.shutdown()
