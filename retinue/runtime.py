"""The host-facing facade: open a store, spawn agents, wait, message, close.

``Runtime`` is thread-safe and thin: every call builds one typed command
(:mod:`retinue.actors.commands`) and hands it to the supervisor actor, or, on
a read-only runtime, to a :class:`~retinue.actors.reader.StoreReader`; either
answers through a future. Each sync method and its ``*_async`` twin are one
line over the same command: the sync one waits on the future, the async one
awaits it through ``asyncio.wrap_future``, so it never blocks an event loop.
Start-up wiring lives below, in :mod:`retinue.actors.boot`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import pykka

from retinue.actors.agent import running_agent
from retinue.actors.boot import open_reader, profile_table, start
from retinue.actors.commands import (
    HOST,
    AckLease,
    Agents,
    Barrier,
    Close,
    CloseTree,
    Command,
    Compact,
    Envelope,
    FollowUp,
    Get,
    GiveUpWait,
    HostMessages,
    Inspect,
    Interrupt,
    InterruptTree,
    Leases,
    ReleaseLease,
    Resume,
    ReturnHostMessages,
    Send,
    Shutdown,
    Spawn,
    Unreceive,
    Wait,
)
from retinue.actors.compaction import CompactionReport
from retinue.actors.events import EventBus, Subscriber
from retinue.actors.executor import Executor
from retinue.actors.profile import Profile, Runner
from retinue.actors.reader import StoreReader
from retinue.actors.reply import Reply
from retinue.actors.supervisor import Supervisor
from retinue.actors.turn import await_waiter, resolve_timeout, wait_result
from retinue.errors import (
    ArgumentTypeError,
    ConfigurationError,
    RetinueError,
    RuntimeClosed,
)
from retinue.llm import model_runner_factory
from retinue.persistence.options import check_store_options
from retinue.persistence.restore import Diagnostic
from retinue.persistence.store import DEFAULT_MAP_SIZE, Durability, Store
from retinue.protocol.details import AgentDetail
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message
from retinue.team import Team, open_arguments

__all__ = ["Runtime"]

CLOSE_GRACE_S = 5.0
STOP_POLL_S = 0.01  # how often a close looks again at a runner it waits for
R = TypeVar("R")
_NO_REF: Any = object()  # close() called without an agent reference


def _fail(future: concurrent.futures.Future[Any], error: BaseException) -> None:
    if future.set_running_or_notify_cancel():
        future.set_exception(error)


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
        self._reader: StoreReader | None = None
        self._bus = EventBus()
        self._lock = threading.Lock()
        self._closed = False
        self._closing = False
        self._temporary = False
        self._profiles: dict[str, Profile] = {}
        self._stopping = threading.Event()
        self._compactor: threading.Thread | None = None
        self._shutting_down = False
        self._released = threading.Event()  # set once the store is released
        self._closing_runners: set[str] = set()  # agents whose runner is closing the runtime
        # Async host waits whose task has not received the answer yet, with their give-back.
        self._async_waits: dict[
            concurrent.futures.Future[Any], Callable[[concurrent.futures.Future[Any]], None]
        ] = {}
        self._executor: Executor | None = None
        self._core: Supervisor | None = None

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
        workspace: str | os.PathLike[str] | None = None,
        team: Team | str | os.PathLike[str] | None = None,
        create: bool = False,
    ) -> Runtime:
        """Open (or create) the store at ``path`` and restore its tree.

        ``path=None`` makes a temporary store removed on close. ``durability``
        is ``"full"`` (fsync before answering) or ``"buffered"`` (survives a
        killed process; synced every second). ``map_size`` is the initial
        LMDB map, grown as needed; ``group_commit=False`` commits every
        transition alone (for benchmarks). ``workspace`` is the folder the
        built-in tools of the model runners this runtime creates (for profiles
        with a ``model``) are confined to. ``team`` is a
        :class:`~retinue.team.Team` or a team file's path: its profiles come
        first, and its ``[limits]`` and ``[defaults] workspace`` apply unless
        ``limits`` or ``workspace`` is given (its ``[defaults] durability`` is
        for ``retinue run``). A new folder becomes a new store; ``create=True``
        is needed only to start a new, empty store in a folder whose store lost
        its data file (that is refused by default). Agents that
        were queued or running when the store was last used come back
        ``interrupted``; restore problems are listed in :attr:`diagnostics`.
        ``readonly=True`` opens an existing store beside its writer: reads
        (``get``, ``agents``, ``backup``) work, every change raises
        ``StoreReadOnly``.

        Every argument is checked before anything touches the disk, and a
        failed open leaves nothing behind: a temporary folder, or a store
        folder this call created, is removed again.

        Raises:
            ArgumentTypeError: an argument of the wrong type (``path`` an
                int, ``limits`` a dict, ``map_size`` a str, ...).
            InvalidArgument: ``path`` is blank, contains NUL or names a file;
                a bad ``map_size`` or ``durability``.
            ConfigurationError: a profile without a runner, or defined twice; a
                profile whose tools exceed those of a profile that spawns it
                (the capability ceiling; the message names the extra tools).
            TeamFileError: the team file is unusable (named by table and key).
            DelegationCycleError, DelegationDepthError: a bad profile graph.
            InvalidLimits: ``limits`` is None and a ``RETINUE_*`` variable is bad.
            StoreLocked: another writer holds the store.
            StoreVersionError: the store was written by a newer schema.
            StoreCorrupted: the store's data file is truncated, damaged or lost.
            StoreError: the folder cannot be created or LMDB refuses it.
        """
        if team is not None and not readonly:
            profiles, limits, workspace = open_arguments(team, profiles, runner, limits, workspace)
        rt = cls()
        options = check_store_options(
            path,
            durability=durability,
            map_size=map_size,
            readonly=readonly,
            group_commit=group_commit,
        )
        if limits is not None and not isinstance(limits, Limits):
            raise ArgumentTypeError(
                f"limits must be a Limits, not {type(limits).__name__}; "
                "build one with Limits(**fields) or Limits.from_env(**fields)"
            )
        rt.limits = limits if limits is not None else Limits.from_env()
        rt._bus = EventBus(rt.limits.event_queue_capacity)
        rt.readonly = options.readonly
        if options.readonly:
            if options.path is None:
                raise ConfigurationError("a read-only runtime needs the path of a store")
            rt.path = options.path
            rt._store, rt.diagnostics = open_reader(rt.path, rt.limits)
            rt._reader = StoreReader(rt._store, rt.limits)
            return rt
        folder = None if workspace is None else Path(workspace)
        rt._profiles, runners = profile_table(
            profiles, runner, rt.limits, model_runner=model_runner_factory(folder)
        )
        started = start(
            options,
            create=create,
            profiles=rt._profiles,
            runners=runners,
            limits=rt.limits,
            bus=rt._bus,
            caller=rt._submit,
        )
        rt.path, rt._temporary = started.path, started.temporary
        rt._store, rt._executor = started.store, started.executor
        rt._core = started.booted.core
        rt._actor = started.booted.actor
        rt.diagnostics = started.booted.diagnostics
        rt._compactor = threading.Thread(
            target=rt._compact_loop, name="retinue-compactor", daemon=True
        )
        rt._compactor.start()
        return rt

    # -- plumbing --------------------------------------------------------------

    def _submit(
        self, command: Command[Any], reply: concurrent.futures.Future[Any] | None = None
    ) -> concurrent.futures.Future[Any]:
        """Hand ``command`` to the supervisor (or the reader); return the future it answers.

        Raises:
            StoreReadOnly: a change on a read-only runtime.
            RuntimeClosed: the runtime is closed, or closing and the command is
                not served while it closes.
        """
        if self._reader is not None:
            # A closed read-only runtime refuses every call alike, before the
            # reader sorts reads from (refused) changes.
            with self._lock:
                if self._closed or self._closing:
                    raise RuntimeClosed("the runtime is closed")
            return self._reader.submit(command)
        future: concurrent.futures.Future[Any] = reply or Reply()
        with self._lock:
            # Commands served while closing (a settle, a give-back of a cancelled
            # wait's completion) still reach the supervisor until it has stopped.
            if self._actor is None or (self._closed and not command.after_close):
                raise RuntimeClosed("the runtime is closed")
            if self._closing and not command.after_close:
                raise RuntimeClosed("the runtime is closing")
            try:
                self._actor.tell(Envelope(command, future))
            except pykka.ActorDeadError:
                raise RuntimeClosed("the runtime's supervisor has stopped") from None
        return future

    def _ask(self, command: Command[R]) -> R:
        """Submit ``command`` and block until it is answered (committed)."""
        result: R = self._submit(command).result()
        return result

    async def _ask_async(self, command: Command[R]) -> R:
        """Submit ``command`` and await its answer without blocking the loop."""
        result: R = await asyncio.wrap_future(self._submit(command))
        return result

    # -- host API ----------------------------------------------------------------

    def spawn(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
    ) -> AgentInfo:
        """Record a new agent under ``parent`` and queue its first turn; return it.

        ``idempotency_key`` makes a retried spawn safe: a spawn under the same
        parent with the same key returns the agent the first one made (as it
        is now, even closed) instead of a second one, also after a reopen, for
        as long as that agent is stored. Keys are bounded like dedup keys.

        Raises:
            UnknownProfile, NotPermitted, DuplicateAgentPath, DepthLimitExceeded,
            FanoutLimitExceeded, AgentLimitExceeded, InvalidAgentPath, UnknownAgent,
            DedupKeyTooLong; InvalidArgument: a blank task, or the key was used
            for another profile.
        """
        return self._ask(Spawn(HOST, profile, task, name, parent, idempotency_key))

    def wait(
        self, ref: str, timeout: float | None = None, *, lease: str | None = None
    ) -> Completion:
        """Return the completion of the agent's oldest turn the host has not received.

        Blocks until that turn settles; ``timeout=None`` means ``wait_default_s``.

        ``lease`` (an id the host makes, unique per wait) makes the handover
        durable: the commit that marks the completion received also stores it
        under the lease, so a wait repeated with the same lease (its answer
        was lost) returns the same completion, also after a reopen, until
        :meth:`ack_lease` forgets it or :meth:`release_lease` gives it back.

        Raises:
            WaitTimeout: it did not settle in time; the agent keeps running.
            UnknownAgent: no such agent.
            InvalidArgument, DedupKeyTooLong: a blank or too long lease, one a
                blocked wait holds, or one stored for another agent.
        """
        seconds = resolve_timeout(timeout, self.limits)
        future: concurrent.futures.Future[Any] = Reply()
        self._submit(Wait(HOST, ref, lease=lease), reply=future)
        result: Completion = wait_result(
            future, seconds, lambda: self._give_up_wait(future, seconds)
        )
        return result

    def messages(self, timeout: float | None = None) -> list[Message]:
        """Return the messages top-level agents sent to the host, oldest first.

        A top-level agent sends one with ``turn.send("/root", ...)``. The
        host's inbox is a durable mailbox like any other, bounded by
        ``mailbox_capacity`` (a sender gets ``MailboxFull`` while it is full).
        Every unread message is returned and marked read; with none there,
        the call waits up to ``timeout`` (None: ``wait_default_s``; 0: not at
        all) for the first, and returns ``[]`` if none came.

        Raises:
            InvalidArgument: a NaN, infinite, negative or too long timeout.
            RuntimeClosed: the runtime is (or gets) closed.
        """
        seconds = resolve_timeout(timeout, self.limits)
        future: concurrent.futures.Future[Any] = Reply()
        self._submit(HostMessages(HOST), reply=future)
        result: list[Message] = wait_result(
            future, seconds, lambda: self._give_up_wait(future, seconds)
        )
        return result

    def interrupt_tree(self, ref: str) -> list[AgentInfo]:
        """Interrupt the queued and running turns of an agent's live subtree, leaves first.

        Returns every live agent of the subtree in that order (idle ones as
        they were). None of them is woken by another's interrupted completion.

        Raises:
            AgentClosed: the agent is closed. UnknownAgent: no such agent.
        """
        return self._ask(InterruptTree(HOST, ref))

    def ack_lease(self, lease: str) -> bool:
        """Forget ``lease``: the host has the completion its wait returned.

        Returns True if the lease was stored (False: unknown, or acknowledged
        or released before), so acknowledging twice is harmless.

        Raises:
            ArgumentTypeError, InvalidArgument: not a usable lease id.
        """
        return self._ask(AckLease(lease))

    def release_lease(self, lease: str) -> bool:
        """Give back the completion ``lease`` holds: the host never got it.

        The completion goes to the next host wait on its agent (as when a
        ``wait_async`` is cancelled after it was answered), and the lease is
        forgotten. Returns True if the lease was stored.

        Raises:
            ArgumentTypeError, InvalidArgument: not a usable lease id.
        """
        return self._ask(ReleaseLease(lease))

    def leases(self) -> dict[str, Completion]:
        """Return every lease not acknowledged or released yet, with its completion."""
        return self._ask(Leases())

    def _give_up_wait(self, future: concurrent.futures.Future[Any], seconds: float) -> None:
        try:
            self._submit(GiveUpWait(HOST, future, seconds))
        except RetinueError as exc:  # closed meanwhile: nobody will answer the wait
            _fail(future, exc)

    def send(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Put a message in an agent's durable mailbox (read by its next turn).

        The same ``dedup_key`` returns the original message instead of a second one.

        Raises:
            MessageTooLarge, DedupKeyTooLong, MailboxFull, AgentClosed, UnknownAgent.
        """
        return self._ask(Send(HOST, ref, content, dedup_key))

    def follow_up(self, ref: str, task: str) -> AgentInfo:
        """Queue a new turn for an idle agent.

        Raises:
            AgentBusy: a turn is queued or running. AgentClosed: it is closed.
            CompletionBacklogFull: too many of its completions are unreceived.
        """
        return self._ask(FollowUp(HOST, ref, task))

    def resume(self, ref: str) -> AgentInfo:
        """Re-run an interrupted agent's task as a new turn.

        Raises:
            AgentStateError: the agent is not interrupted.
        """
        return self._ask(Resume(HOST, ref))

    def interrupt(self, ref: str) -> AgentInfo:
        """Cancel an agent's queued or running turn; it settles ``interrupted`` at once."""
        return self._ask(Interrupt(HOST, ref))

    def close(self, ref: str = _NO_REF) -> AgentInfo:
        """Close agent ``ref``: interrupt its turn first, then free its name.

        To close the runtime itself use :meth:`shutdown` (or a ``with`` block).

        Raises:
            ArgumentTypeError: no agent reference (or None) was given.
            ActiveDescendants: the agent still has live children.
            AgentClosed: it is already closed.
        """
        return self._ask(Close(HOST, _agent_ref(ref, "close")))

    def close_tree(self, ref: str) -> list[AgentInfo]:
        """Close an agent and its whole live subtree, children first; return them in order."""
        return self._ask(CloseTree(HOST, ref))

    def get(self, ref: str) -> AgentInfo:
        """Return an agent by id or live path.

        Raises:
            UnknownAgent: no such agent.
        """
        return self._ask(Get(HOST, ref))

    def agents(self, *, include_closed: bool = False) -> list[AgentInfo]:
        """Return every agent, oldest first; closed ones only with ``include_closed``."""
        return self._ask(Agents(HOST, include_closed))

    def inspect(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Return one agent in full: its snapshot, unread messages, pending completions
        and the last ``transcript_tail`` messages of its stored transcript.

        Served by a writer and by a read-only runtime alike, from one view of the store.

        Raises:
            UnknownAgent: no such agent. InvalidArgument: a negative ``transcript_tail``.
        """
        return self._ask(Inspect(HOST, ref, transcript_tail))

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(event)`` for every committed transition; return unsubscribe.

        Events arrive on one dispatcher thread, in commit order.

        Raises:
            RuntimeClosed: the runtime is closed (or closing).
        """
        with self._lock:
            if self._closed or self._closing:
                raise RuntimeClosed("the runtime is closed; open it again to subscribe")
            return self._bus.subscribe(callback)

    def backup(self, dest: str | os.PathLike[str]) -> Path:
        """Write a compacted hot copy of the live store to ``dest``; return its path."""
        assert self._store is not None
        self._ask(Barrier())
        return self._store.backup(dest)

    def compact(self) -> CompactionReport:
        """Compact now (it also runs every ``compact_interval_s``); return what went.

        Removes closed agents, read messages and delivered completions beyond
        the ``retain_*`` limits; never anything unread, undelivered or live.
        """
        return self._ask(Compact())

    def _compact_loop(self) -> None:
        while not self._stopping.wait(self.limits.compact_interval_s):
            try:
                self._submit(Compact())
            except RetinueError:
                return

    # -- asyncio faces ---------------------------------------------------------------

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
        return await self._ask_async(Spawn(HOST, profile, task, name, parent, idempotency_key))

    async def interrupt_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`interrupt_tree`, without blocking the event loop."""
        return await self._ask_async(InterruptTree(HOST, ref))

    async def messages_async(self, timeout: float | None = None) -> list[Message]:
        """Like :meth:`messages`, without blocking the event loop.

        Cancelling the awaiting task loses nothing: messages already handed
        to it are given back, unread, to the next ``messages`` call.
        """
        seconds = resolve_timeout(timeout, self.limits)
        result: list[Message] = await self._await_wait(
            HostMessages(HOST), seconds, self._return_messages
        )
        return result

    def _return_messages(self, future: concurrent.futures.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        messages: list[Message] = future.result()
        if messages:
            with contextlib.suppress(RetinueError):
                self._submit(ReturnHostMessages(tuple(messages)))

    async def wait_async(
        self, ref: str, timeout: float | None = None, *, lease: str | None = None
    ) -> Completion:
        """Like :meth:`wait`, without blocking the event loop.

        Cancelling the awaiting task loses nothing: a completion already
        handed to this wait is given back and goes to the next wait (a leased
        one is released).
        """
        seconds = resolve_timeout(timeout, self.limits)
        give_back = self._unreceive if lease is None else self._releaser(lease)
        result: Completion = await self._await_wait(
            Wait(HOST, ref, lease=lease), seconds, give_back
        )
        return result

    def _releaser(self, lease: str) -> Callable[[concurrent.futures.Future[Any]], None]:
        """Return the give-back of a cancelled leased wait: release its lease."""

        def release(future: concurrent.futures.Future[Any]) -> None:
            if not future.cancelled() and future.exception() is None:
                with contextlib.suppress(RetinueError):
                    self._submit(ReleaseLease(lease))

        return release

    async def ack_lease_async(self, lease: str) -> bool:
        """Like :meth:`ack_lease`, without blocking the event loop."""
        return await self._ask_async(AckLease(lease))

    async def release_lease_async(self, lease: str) -> bool:
        """Like :meth:`release_lease`, without blocking the event loop."""
        return await self._ask_async(ReleaseLease(lease))

    async def leases_async(self) -> dict[str, Completion]:
        """Like :meth:`leases`, without blocking the event loop."""
        return await self._ask_async(Leases())

    async def _await_wait(
        self,
        command: Any,
        seconds: float,
        give_back: Callable[[concurrent.futures.Future[Any]], None],
    ) -> Any:
        """Submit a host wait and await its answer for up to ``seconds``.

        If the awaiting task is cancelled, nothing is lost: a wait not yet
        answered is given up; what an answered one took goes to ``give_back``.

        Raises:
            WaitTimeout: nothing arrived in time.
        """
        future: concurrent.futures.Future[Any] = Reply()
        with self._lock:
            self._async_waits[future] = give_back
        try:
            self._submit(command, reply=future)
            value = await await_waiter(future, seconds, lambda: self._give_up_wait(future, seconds))
        except asyncio.CancelledError:
            if self._claim(future):
                if future.cancel():  # not answered: the supervisor skips it; forget it
                    self._give_up_wait(future, seconds)
                else:  # answered (or being answered): give what it took back
                    future.add_done_callback(give_back)
            raise
        except BaseException:
            self._claim(future)
            raise
        if not self._claim(future):
            raise RuntimeClosed(
                "the runtime closed before this wait's task resumed; what it was handed "
                "was given back and waits in the store"
            )
        return value

    def _claim(self, future: concurrent.futures.Future[Any]) -> bool:
        """Claim an async host wait's answer for its task; False if the close took it back."""
        with self._lock:
            return self._async_waits.pop(future, None) is not None

    def _give_back_unclaimed(self) -> None:
        """At close: give back what async host waits were handed but their tasks never received.

        A task whose loop is busy (or blocked in this very close) cannot
        resume before the supervisor stops, so its give-back could not be
        served later; the close serves it now, and the task's wait ends
        with ``RuntimeClosed``.
        """
        with self._lock:
            waits, self._async_waits = self._async_waits, {}
        for future, give_back in waits.items():
            if future.done():
                give_back(future)
            else:
                future.add_done_callback(give_back)  # answered by the shutdown, if at all

    def _unreceive(self, future: concurrent.futures.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        completion: Completion = future.result()
        with contextlib.suppress(RetinueError):
            self._submit(Unreceive(completion.agent_id, completion.generation))

    async def send_async(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        return await self._ask_async(Send(HOST, ref, content, dedup_key))

    async def follow_up_async(self, ref: str, task: str) -> AgentInfo:
        """Like :meth:`follow_up`, without blocking the event loop."""
        return await self._ask_async(FollowUp(HOST, ref, task))

    async def interrupt_async(self, ref: str) -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        return await self._ask_async(Interrupt(HOST, ref))

    async def close_async(self, ref: str = _NO_REF) -> AgentInfo:
        """Like :meth:`close` of an agent, without blocking the event loop."""
        return await self._ask_async(Close(HOST, _agent_ref(ref, "close_async")))

    async def resume_async(self, ref: str) -> AgentInfo:
        """Like :meth:`resume`, without blocking the event loop."""
        return await self._ask_async(Resume(HOST, ref))

    async def close_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        return await self._ask_async(CloseTree(HOST, ref))

    async def agents_async(self, *, include_closed: bool = False) -> list[AgentInfo]:
        """Like :meth:`agents`, without blocking the event loop."""
        return await self._ask_async(Agents(HOST, include_closed))

    async def compact_async(self) -> CompactionReport:
        """Like :meth:`compact`, without blocking the event loop."""
        return await self._ask_async(Compact())

    async def get_async(self, ref: str) -> AgentInfo:
        """Like :meth:`get`, without blocking the event loop."""
        return await self._ask_async(Get(HOST, ref))

    async def inspect_async(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Like :meth:`inspect`, without blocking the event loop."""
        return await self._ask_async(Inspect(HOST, ref, transcript_tail))

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def abandoned_runners(self) -> int:
        """Sync runners that ignored an interrupt (or close) and still hold their thread.

        Each was announced by a :class:`~retinue.protocol.messages.RunnerAbandoned`
        event; past ``Limits.max_abandoned_runners`` new sync turns wait as
        ``starting`` until one returns.
        """
        core = self._core
        return 0 if core is None else len(core.scheduler.abandoned)

    @property
    def closed(self) -> bool:
        """True once the runtime is closed."""
        return self._closed

    def shutdown(self) -> None:
        """Close the runtime; return only once its store is released.

        Idempotent and safe from any thread, however often: the first call
        interrupts running turns, waits a bounded time for their runners
        (never for a runner that is itself closing the runtime), persists
        everything, stops every actor and releases the store (a temporary
        store is removed); any other call meanwhile, from a host thread, a
        runner or an event loop, returns when that is done. So an immediate
        reopen always finds the store free.
        """
        me = running_agent()
        with self._lock:
            first = not self._shutting_down
            self._shutting_down = True
            if me is not None:
                self._closing_runners.add(me)
        if not first:
            self._released.wait()
            return
        try:
            self._shut_down()
        finally:
            self._released.set()

    def _shut_down(self) -> None:
        self._stopping.set()
        if self._compactor is not None and self._compactor is not threading.current_thread():
            self._compactor.join()
        with self._lock:
            self._closing = True
        actor = self._actor
        actors: list[tuple[str, pykka.ActorRef[Any]]] = []
        if actor is not None:
            # A failed store cannot record the interrupts; the turns are cancelled anyway.
            with contextlib.suppress(RetinueError):
                actors = self._ask(Shutdown())
        with self._lock:
            self._closed = True
        self._give_back_unclaimed()
        self._stop_runners(actors)
        if self._executor is not None:
            # Before the supervisor stops: cancelled async turns finish here and
            # give back the completions their waits had taken (GiveBack is
            # served while closing), so none is lost to a stopped supervisor.
            self._executor.shutdown(CLOSE_GRACE_S)
        if actor is not None:
            actor.stop(block=True)
        if self._reader is not None:
            self._reader.close()
        if self._store is not None:
            self._store.close()
        self._bus.close()
        if self._temporary:
            shutil.rmtree(self.path, ignore_errors=True)

    def _stop_runners(self, actors: list[tuple[str, pykka.ActorRef[Any]]]) -> None:
        """Stop the actors of interrupted turns, waiting at most ``CLOSE_GRACE_S`` in all.

        A runner that is closing the runtime itself is not waited for: it
        waits for this close, and returns once the store is released. Closed
        from the runtime's own event loop (an async runner), none is waited
        for: the loop's turns cannot end while it is blocked here.
        """
        stops = [(agent_id, ref, ref.stop(block=False)) for agent_id, ref in actors]
        if self._executor is not None and self._executor.loop.thread_id == threading.get_ident():
            return  # an async runner closes the runtime: the loop's turns cannot end meanwhile
        deadline = time.monotonic() + CLOSE_GRACE_S
        for agent_id, ref, stopped in stops:
            while ref.is_alive() and time.monotonic() < deadline:
                with self._lock:
                    if agent_id in self._closing_runners:
                        break
                with contextlib.suppress(pykka.Timeout):
                    stopped.get(timeout=STOP_POLL_S)

    def __enter__(self) -> Runtime:
        """Return the runtime itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the runtime (see :meth:`shutdown`)."""
        self.shutdown()


def _agent_ref(ref: Any, method: str) -> str:
    """Return ``ref`` if one was given.

    Raises:
        ArgumentTypeError: it is missing or None (closing the runtime is ``shutdown()``).
    """
    if ref is _NO_REF or ref is None:
        given = "no argument" if ref is _NO_REF else "None"
        raise ArgumentTypeError(
            f"{method}() closes one agent and needs its id or path, got {given}; "
            "to close the runtime use shutdown() or a with block"
        )
    checked: str = ref  # its type is checked by the supervisor (ArgumentTypeError)
    return checked
