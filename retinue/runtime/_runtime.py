"""The host-facing facade: :class:`Runtime`, opened on a store, closed by ``shutdown``.

``Runtime`` is thread-safe and thin: every call is one line over a typed
command (:mod:`retinue.actors.commands`), and each sync call sits next to its
``*_async`` twin, so the face is long and each method is short (httpx's
``Client`` is the model). It holds one thing, the running parts below it
(:class:`~retinue.actors.system.System` for a writer,
:class:`~retinue.actors.system.ReadOnlySystem` for a reader), which start
together at :meth:`Runtime.open` and stop together at :meth:`Runtime.shutdown`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import msgspec

from retinue.actors import Profile
from retinue.actors.calls import Engine, HostReceipt, RuntimeState, resolve_timeout
from retinue.actors.commands import (
    HOST,
    AckLease,
    Agents,
    Approvals,
    Approve,
    Barrier,
    Close,
    CloseTree,
    Command,
    Compact,
    CountAgents,
    CountBacklog,
    Deny,
    FollowUp,
    Fork,
    Get,
    HostMessages,
    Idle,
    Inspect,
    Interrupt,
    InterruptTree,
    Leases,
    ReleaseLease,
    Resume,
    Run,
    Send,
    Spawn,
    Wait,
)
from retinue.actors.events import AsyncEventStream, EventBus, EventStream, Subscriber, stream_root
from retinue.actors.supervisor import TimingSink
from retinue.actors.system import ReadOnlySystem, System
from retinue.actors.turns import Runner
from retinue.errors import ArgumentTypeError, RuntimeClosed, StoreError, StoreReadOnly, WaitTimeout
from retinue.llm.mcp import McpManager, McpServer
from retinue.persistence.options import check_store_options
from retinue.persistence.restore import Diagnostic
from retinue.persistence.space import Diagnostics
from retinue.persistence.store import DEFAULT_MAP_SIZE, Durability, Store
from retinue.protocol.details import AgentCounts, AgentDetail, Backlog, CompactionReport
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message
from retinue.protocol.paging import AGENTS_PAGE_DEFAULT, aiter_pages, iter_pages
from retinue.protocol.provider_limits import ProviderLimit
from retinue.protocol.supervision import ApprovalRequest
from retinue.runtime._opening import (
    apply_team,
    attach_reader,
    checked_control,
    checked_limits,
    open_tracing,
    provider_limits_of,
    start_control,
    start_writer,
)
from retinue.team import Team

__all__ = ["Runtime"]

R = TypeVar("R")
NOT_OPEN = "the runtime is not open; use Runtime.open(...)"
_NO_REF: Any = object()


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


class Runtime:
    """A supervised tree of agents kept in one LMDB store. Open it with :meth:`open`.

    Its calls come by theme from :mod:`retinue.runtime`'s call groups: an
    agent's lifecycle (``spawn``, ``follow_up``, ``interrupt``, ``close``, ...),
    waits and leases (``wait``, ``ack_lease``, ``wait_idle``, ...), mailboxes
    (``send``, ``messages``), reads (``get``, ``agents``, ``inspect``,
    ``backlog``), events (``subscribe``), upkeep (``backup``, ``compact``) and
    approvals (``approvals``, ``approve``, ``deny``), each sync call with its
    ``*_async`` twin.
    """

    def __init__(self) -> None:
        """Use :meth:`Runtime.open`; the constructor only declares the fields."""
        self.path: Path = Path()
        self.limits = Limits()
        self.readonly = False
        self._system = None
        self._profiles: dict[str, Profile] = {}
        self._mcp: McpManager | None = None

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
        mcp_servers: dict[str, McpServer] | None = None,
        tracer_provider: Any = None,
        capture_content: bool | None = None,
        provider_limits: Iterable[ProviderLimit] | None = None,
        control: bool = True,
    ) -> Runtime:
        """Open (or create) the store at ``path`` and restore its tree.

        ``path=None``: a temporary store, removed on close. ``durability``: ``"full"`` (fsync
        before answering) or ``"buffered"`` (survives a killed process; synced every second).
        ``map_size``: the initial LMDB map, grown as needed; ``group_commit=False`` commits each
        transition alone (benchmarks). ``workspace``: the folder the built-in tools of its model
        runners are confined to. ``team`` (a :class:`~retinue.team.Team` or a team file's path):
        its profiles first, its ``[limits]`` and ``[defaults] workspace`` unless given. A new
        folder becomes a new store; ``create=True`` starts an empty one where a store lost its
        data file (refused by default). Agents queued or running at the last use come back
        ``interrupted``; restore problems are in :attr:`diagnostics`. ``readonly=True`` opens
        beside the writer: reads work, changes raise ``StoreReadOnly``. ``mcp_servers``
        (:class:`~retinue.llm.McpServer`): tools granted as ``<server>.<tool>`` or
        ``<server>.*``, over the team's ``[mcp.<server>]``. ``tracer_provider`` (None: the
        global one) and ``capture_content`` (None: as the environment says): the spans' (extra
        ``otel``). ``provider_limits`` (:class:`~retinue.ProviderLimit`, by match over the
        team's ``[providers]`` and ``RETINUE_PROVIDER_LIMITS``) admit each model call, fairly
        between trees, once it fits every limit covering it. ``control=False``: no control
        socket (:mod:`retinue.control`). Every argument is checked before the disk is
        touched; a failed open removes a temporary folder or a store folder it created.

        Raises:
            ArgumentTypeError: an argument of the wrong type (``path`` an
                int, ``limits`` a dict, ``control`` a str, ...).
            InvalidArgument: ``path`` is blank, contains NUL or names a file;
                a bad ``map_size`` or ``durability``.
            ConfigurationError: a profile without a runner, or defined twice; a
                profile whose tools exceed those of a profile that spawns it
                (the capability ceiling; the message names the extra tools).
            TeamFileError: the team file is unusable (named by table and key).
            DelegationCycleError, DelegationDepthError: a bad profile graph.
            InvalidLimits: ``limits`` is None and a ``RETINUE_*`` variable is bad; a bad
                ``provider_limits`` item, or a match named twice in one source.
            StoreLocked: another writer holds the store.
            StoreVersionError, StoreCorrupted: a newer schema's store; a data file truncated,
                damaged or lost.
            StoreError: the folder cannot be created or LMDB refuses it.
            ExtraNotInstalled: a ``tracer_provider`` without the ``otel`` extra.
        """
        serve_control = checked_control(control)
        given = apply_team(team, readonly, profiles, runner, limits, workspace)
        options = check_store_options(
            path,
            durability=durability,
            map_size=map_size,
            readonly=readonly,
            group_commit=group_commit,
        )
        checked = checked_limits(given.limits)
        providers = provider_limits_of(given, provider_limits)
        if options.readonly:
            return cls._over(attach_reader(options, checked))
        spans = open_tracing(tracer_provider, capture_content, checked)
        writer = start_writer(
            options, checked, given, runner, create, mcp_servers, spans, providers
        )
        start_control(writer.system, serve_control)
        return cls._over(*writer)

    @classmethod
    def _over(
        cls,
        system: System | ReadOnlySystem,
        mcp: McpManager | None = None,
        profiles: dict[str, Profile] | None = None,
    ) -> Runtime:
        """Return a runtime over ``system``, the running parts an open started."""
        rt = cls()
        rt._system, rt._mcp, rt._profiles = system, mcp, profiles or {}
        rt.path, rt.limits = system.path, system.limits
        rt.readonly = isinstance(system, ReadOnlySystem)
        return rt

    # -- state -------------------------------------------------------------------------

    @property
    def diagnostics(self) -> Diagnostics[Diagnostic]:
        """What the restore of the store skipped or repaired (codes: docs/guides/operating.md).

        A list of :class:`~retinue.persistence.restore.Diagnostic`; its
        ``store`` attribute is how the data file is used now
        (:class:`~retinue.persistence.space.StoreSpace`: file size, pages in
        use and free, the map's headroom), None once the runtime is closed.
        ``provider_limits`` holds each provider limit's figures now
        (:class:`~retinue.protocol.provider_limits.LimitSnapshot`: calls in
        flight, waiting, admitted, 429s, the adaptive level, the windows'
        use, the end of a Retry-After as wall-clock time), and
        ``admission_waiting`` the paths of the agents whose model call waits
        for admission (both empty without provider limits).

        Raises:
            StoreCorrupted, StoreError: the store could not be measured.
        """
        system = self._system
        if system is None:
            return Diagnostics()
        try:
            space = None if system.state is RuntimeState.CLOSED else system.store.space()
        except StoreError:
            if system.state is not RuntimeState.CLOSED:
                raise
            space = None  # it closed meanwhile
        gate = getattr(system, "admission", None)
        if gate is None:
            return Diagnostics(system.diagnostics, space)
        return Diagnostics(system.diagnostics, space, gate.snapshot(), gate.waiting())

    @property
    def state(self) -> RuntimeState:
        """``open``, ``closing`` (``shutdown()`` is under way) or ``closed``."""
        return RuntimeState.CLOSED if self._system is None else self._system.state

    @property
    def closed(self) -> bool:
        """True once the runtime is closed."""
        return self.state is RuntimeState.CLOSED

    @property
    def abandoned_runners(self) -> int:
        """Sync runners that ignored an interrupt (or close) and still hold their thread.

        Each was announced by a :class:`~retinue.protocol.messages.RunnerAbandoned`
        event; past ``Limits.max_abandoned_runners`` new sync turns wait as
        ``starting`` until one returns.
        """
        return 0 if self._system is None else self._system.abandoned_runners

    @property
    def mcp(self) -> McpManager | None:
        """The runtime's MCP servers (:class:`~retinue.llm.mcp.McpManager`), None if it has none."""
        return self._mcp

    # -- closing -----------------------------------------------------------------------

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
        if self._system is not None:
            self._system.shutdown()

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

    # -- the running parts and the one way to ask them -----------------------------------

    path: Path
    limits: Limits
    readonly: bool
    _system: System | ReadOnlySystem | None

    @property
    def _engine(self) -> Engine:
        """The engine every call of this runtime goes through.

        Raises:
            RuntimeClosed: the runtime was never opened.
        """
        if self._system is None:
            raise RuntimeClosed(NOT_OPEN)
        return self._system.engine

    @property
    def _store(self) -> Store:
        """The runtime's store (open until the runtime closes)."""
        if self._system is None:
            raise RuntimeClosed(NOT_OPEN)
        return self._system.store

    def _ask(self, command: Command[R]) -> R:
        """Submit ``command`` and block until it is answered (committed)."""
        return self._engine.ask(command)

    def _ask_async(self, command: Command[R]) -> Coroutine[Any, Any, R]:
        """Submit ``command`` and await its answer without blocking the loop: the engine's
        coroutine itself, awaited by the caller (no coroutine of its own around it).

        Raises (when awaited):
            RuntimeClosed: the runtime is closed; and whatever the command raises.
        """
        system = self._system  # as _engine, inline: a Python call fewer per async call
        if system is None:
            raise RuntimeClosed(NOT_OPEN)
        return system.engine.ask_async(command)

    # -- an agent's lifecycle: spawn, follow-up, resume, interrupt, close ----------------

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
            UnknownProfile, NotPermitted, DuplicateAgentPath: as the supervisor's
                rules say, and so do DepthLimitExceeded, FanoutLimitExceeded,
                AgentLimitExceeded, InvalidAgentPath, UnknownAgent and DedupKeyTooLong.
            InvalidArgument: a blank task, or the key was used for another profile.
        """
        return self._ask(Spawn(HOST, profile, task, name, parent, idempotency_key))

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

    def fork(
        self,
        ref: str,
        *,
        at: int | None = None,
        name: str | None = None,
        parent: str | None = None,
        tree: bool = True,
    ) -> AgentInfo:
        """Copy agent ``ref`` as of its generation ``at`` (None: now); return the copy.

        The copy is settled (give it a turn with :meth:`follow_up` to carry on
        differently), goes beside ``ref`` (or below ``parent``; ``"/root"``: top
        level) as ``name`` (default ``<name>_fork<n>``), with ``ref``'s profile,
        task, state, output and transcript up to the end of that generation,
        usage from nothing, and ``forked_from`` naming ``ref``. With ``tree``
        its subtree is copied too, each agent as of the last generation it had
        settled when that generation ended (one still in its first turn then
        is copied ``interrupted``). A busy ``ref`` is copied as of its last
        settled generation. The origin is untouched and shares nothing with
        the copies. A fork counts as spawns do against every cap.

        Raises:
            UnknownAgent: no agent ``ref`` (or ``parent``).
            InvalidAgentPath: a bad ``ref``, ``parent`` or ``name``.
            ArgumentTypeError: an argument of the wrong type.
            InvalidArgument: ``at`` is not one of its generations.
            GenerationNotKept: that generation is not kept (``Limits.fork_generations``),
                never settled, or is from before ``ref`` was itself forked.
            AgentLimitExceeded: the copies do not fit (so do ``UnknownProfile``,
                ``NotPermitted``, ``AgentClosed``, ``DuplicateAgentPath``,
                ``DepthLimitExceeded`` and ``FanoutLimitExceeded``, as for :meth:`spawn`).
        """
        return self._ask(Fork(HOST, ref, at, name, parent, tree))

    async def fork_async(
        self,
        ref: str,
        *,
        at: int | None = None,
        name: str | None = None,
        parent: str | None = None,
        tree: bool = True,
    ) -> AgentInfo:
        """Like :meth:`fork`, without blocking the event loop."""
        return await self._ask_async(Fork(HOST, ref, at, name, parent, tree))

    def follow_up(self, ref: str, task: str) -> AgentInfo:
        """Queue a new turn for an idle agent.

        Raises:
            AgentBusy: a turn is queued or running. AgentClosed: it is closed.
            CompletionBacklogFull: too many of its completions are unreceived.
        """
        return self._ask(FollowUp(HOST, ref, task))

    async def follow_up_async(self, ref: str, task: str) -> AgentInfo:
        """Like :meth:`follow_up`, without blocking the event loop."""
        return await self._ask_async(FollowUp(HOST, ref, task))

    def resume(self, ref: str) -> AgentInfo:
        """Re-run an interrupted agent's task as a new turn.

        Raises:
            AgentStateError: the agent is not interrupted.
        """
        return self._ask(Resume(HOST, ref))

    async def resume_async(self, ref: str) -> AgentInfo:
        """Like :meth:`resume`, without blocking the event loop."""
        return await self._ask_async(Resume(HOST, ref))

    def interrupt(self, ref: str) -> AgentInfo:
        """Cancel an agent's queued or running turn; it settles ``interrupted`` at once."""
        return self._ask(Interrupt(HOST, ref))

    async def interrupt_async(self, ref: str) -> AgentInfo:
        """Like :meth:`interrupt`, without blocking the event loop."""
        return await self._ask_async(Interrupt(HOST, ref))

    def interrupt_tree(self, ref: str) -> list[AgentInfo]:
        """Interrupt the queued and running turns of an agent's live subtree, leaves first.

        Returns every live agent of the subtree in that order (idle ones as
        they were). None of them is woken by another's interrupted completion.

        Raises:
            AgentClosed: the agent is closed. UnknownAgent: no such agent.
        """
        return self._ask(InterruptTree(HOST, ref))

    async def interrupt_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`interrupt_tree`, without blocking the event loop."""
        return await self._ask_async(InterruptTree(HOST, ref))

    def close(self, ref: str = _NO_REF) -> AgentInfo:
        """Close agent ``ref``: interrupt its turn first, then free its name.

        To close the runtime itself use :meth:`shutdown` (or a ``with`` block).

        Raises:
            ArgumentTypeError: no agent reference (or None) was given.
            ActiveDescendants: the agent still has live children.
            AgentClosed: it is already closed.
        """
        return self._ask(Close(HOST, _agent_ref(ref, "close")))

    async def close_async(self, ref: str = _NO_REF) -> AgentInfo:
        """Like :meth:`close` of an agent, without blocking the event loop."""
        return await self._ask_async(Close(HOST, _agent_ref(ref, "close_async")))

    def close_tree(self, ref: str) -> list[AgentInfo]:
        """Close an agent and its whole live subtree, children first; return them in order."""
        return self._ask(CloseTree(HOST, ref))

    async def close_tree_async(self, ref: str) -> list[AgentInfo]:
        """Like :meth:`close_tree`, without blocking the event loop."""
        return await self._ask_async(CloseTree(HOST, ref))

    # -- waits, leases and quiescence ----------------------------------------------------

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
        result: Completion = self._engine.wait(Wait(HOST, ref, lease=lease), seconds)
        return result

    async def wait_async(
        self, ref: str, timeout: float | None = None, *, lease: str | None = None
    ) -> Completion:
        """Like :meth:`wait`, without blocking the event loop.

        Cancelling the awaiting task loses nothing: a completion already
        handed to this wait is given back and goes to the next wait (a leased
        one is released).
        """
        seconds = resolve_timeout(timeout, self.limits)
        system = self._system  # as _engine, inline: a Python call fewer per wait
        if system is None:
            raise RuntimeClosed(NOT_OPEN)
        engine = system.engine
        command = Wait(HOST, ref, lease=lease)
        result: Completion = await engine.wait_async(
            command, seconds, engine.receipt if lease is None else HostReceipt(engine, lease)
        )
        return result

    def run(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
        timeout: float | None = None,
        lease: str | None = None,
    ) -> Completion:
        """Spawn an agent and wait for its first completion, in one command and one commit.

        The same as :meth:`spawn` followed by :meth:`wait` on the new agent,
        with the same arguments and answers, but the supervisor serves both in
        one transition: the spawn's writes commit with the host's wait
        registered, and the answer comes when the agent's turn settles (one
        command and one commit fewer than the two calls). ``timeout=None``
        means ``wait_default_s``; it is checked before anything is spawned.

        With ``idempotency_key`` a retried run waits on the agent the first
        made (the host's next completion of it: if the first run received it,
        the retry raises ``NothingToWaitFor``, as ``wait`` would; with the same
        ``lease`` the retry gets the completion the first took).

        Raises:
            UnknownProfile, NotPermitted, DuplicateAgentPath: as :meth:`spawn`
                raises them (nothing was spawned), and so do DepthLimitExceeded,
                FanoutLimitExceeded, AgentLimitExceeded, InvalidAgentPath,
                UnknownAgent and DedupKeyTooLong.
            InvalidArgument, ArgumentTypeError: a blank task, or a bad ``lease``
                or ``timeout`` (nothing was spawned).
            WaitTimeout: the agent did not settle in time; it keeps running, and
                the error's ``path`` names it, so the host can :meth:`wait` on it.
            AgentClosed: the agent was closed with no completion for the host.
            NothingToWaitFor: a retried run (``idempotency_key``) whose agent has
                nothing left for the host.
            RuntimeClosed: the runtime is (or gets) closed.
        """
        seconds = resolve_timeout(timeout, self.limits)
        command = Run(HOST, profile, task, name, parent, idempotency_key, lease)
        result: Completion = self._engine.wait(command, seconds)
        return result

    async def run_async(
        self,
        profile: str,
        task: str,
        *,
        name: str | None = None,
        parent: str = "/root",
        idempotency_key: str | None = None,
        timeout: float | None = None,
        lease: str | None = None,
    ) -> Completion:
        """Like :meth:`run`, without blocking the event loop.

        Cancelling the awaiting task loses nothing, as with :meth:`wait_async`:
        the agent, once spawned, keeps running, and a completion already
        handed to this call is given back to the next :meth:`wait` on it (a
        leased one is released). Use ``name`` or ``idempotency_key`` to find
        the agent again after a cancel.
        """
        seconds = resolve_timeout(timeout, self.limits)
        engine = self._engine
        command = Run(HOST, profile, task, name, parent, idempotency_key, lease)
        result: Completion = await engine.wait_async(
            command, seconds, engine.receipt if lease is None else HostReceipt(engine, lease)
        )
        return result

    def ack_lease(self, lease: str) -> bool:
        """Forget ``lease``: the host has the completion its wait returned.

        Returns True if the lease was stored (False: unknown, or acknowledged
        or released before), so acknowledging twice is harmless.

        Raises:
            ArgumentTypeError, InvalidArgument: not a usable lease id.
        """
        return self._ask(AckLease(lease))

    async def ack_lease_async(self, lease: str) -> bool:
        """Like :meth:`ack_lease`, without blocking the event loop."""
        return await self._ask_async(AckLease(lease))

    def release_lease(self, lease: str) -> bool:
        """Give back the completion ``lease`` holds: the host never got it.

        The completion goes to the next host wait on its agent (as when a
        ``wait_async`` is cancelled after it was answered), and the lease is
        forgotten. Returns True if the lease was stored.

        Raises:
            ArgumentTypeError, InvalidArgument: not a usable lease id.
        """
        return self._ask(ReleaseLease(lease))

    async def release_lease_async(self, lease: str) -> bool:
        """Like :meth:`release_lease`, without blocking the event loop."""
        return await self._ask_async(ReleaseLease(lease))

    def leases(self) -> dict[str, Completion]:
        """Return every lease not acknowledged or released yet, with its completion."""
        return self._ask(Leases())

    async def leases_async(self) -> dict[str, Completion]:
        """Like :meth:`leases`, without blocking the event loop."""
        return await self._ask_async(Leases())

    def wait_idle(self, timeout: float | None = None) -> None:
        """Block until the runtime is quiescent; ``timeout=None`` means ``wait_default_s``.

        Quiescent: no turn is queued or running, no restart is pending, every
        runner has returned (an abandoned one included), no command waits for
        the supervisor, and every event published so far was handed to its
        subscribers. A turn parked for approval does not count (it waits for a
        person). For tests
        and drivers that would otherwise poll; a host that keeps spawning may
        never see it.

        Raises:
            WaitTimeout: the runtime was still busy after ``timeout``.
            RuntimeClosed: the runtime is (or gets) closed.
        """
        seconds = resolve_timeout(timeout, self.limits)
        deadline = time.monotonic() + seconds
        self._engine.wait(Idle(HOST), seconds)
        self._flush_events(deadline)

    async def settled(self, timeout: float | None = None) -> None:
        """Like :meth:`wait_idle`, without blocking the event loop."""
        seconds = resolve_timeout(timeout, self.limits)
        deadline = time.monotonic() + seconds
        engine = self._engine
        await engine.wait_async(Idle(HOST), seconds, engine.receipt)
        await asyncio.get_running_loop().run_in_executor(None, self._flush_events, deadline)

    async def wait_idle_async(self, timeout: float | None = None) -> None:
        """Like :meth:`wait_idle`, without blocking the event loop (the twin's usual name;
        :meth:`settled` is the same call)."""
        await self.settled(timeout)

    def _flush_events(self, deadline: float) -> None:
        """Wait until subscribers have every event published so far.

        Raises:
            WaitTimeout: they had not by ``deadline``.
        """
        system = self._system
        if system is not None and not system.bus.flush(max(0.0, deadline - time.monotonic())):
            raise WaitTimeout("the runtime's subscribers did not take every event in time")

    # -- mailboxes: send, the host's inbox -----------------------------------------------

    def send(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Put a message in an agent's durable mailbox (read by its next turn).

        The same ``dedup_key`` returns the original message instead of a second one.

        Raises:
            MessageTooLarge, DedupKeyTooLong, MailboxFull, AgentClosed, UnknownAgent: as
                the mailbox rules say.
        """
        return self._ask(Send(HOST, ref, content, dedup_key))

    async def send_async(self, ref: str, content: str, *, dedup_key: str | None = None) -> Message:
        """Like :meth:`send`, without blocking the event loop."""
        return await self._ask_async(Send(HOST, ref, content, dedup_key))

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
        result: list[Message] = self._engine.wait(HostMessages(HOST), seconds)
        return result

    async def messages_async(self, timeout: float | None = None) -> list[Message]:
        """Like :meth:`messages`, without blocking the event loop.

        Cancelling the awaiting task loses nothing: messages already handed
        to it are given back, unread, to the next ``messages`` call.
        """
        seconds = resolve_timeout(timeout, self.limits)
        engine = self._engine
        result: list[Message] = await engine.wait_async(HostMessages(HOST), seconds, engine.receipt)
        return result

    # -- reads: get, agents, inspect, backlog --------------------------------------------

    def get(self, ref: str) -> AgentInfo:
        """Return an agent by id or live path.

        Raises:
            UnknownAgent: no such agent.
        """
        return self._ask(Get(HOST, ref))

    async def get_async(self, ref: str) -> AgentInfo:
        """Like :meth:`get`, without blocking the event loop."""
        return await self._ask_async(Get(HOST, ref))

    def agents(
        self, *, include_closed: bool = False, limit: int | None = None, after: str | None = None
    ) -> list[AgentInfo]:
        """Return every agent, oldest first; closed ones only with ``include_closed``.

        With ``limit`` or ``after``, one page instead: agents ordered by path then id,
        at most ``limit`` of them (up to ``Limits.agents_page_max``), after ``after``
        (the id, the path, or ``"<path> <id>"`` of the previous page's last agent).
        :meth:`iter_agents` walks the pages.

        Raises:
            PageLimitExceeded: ``limit`` is above ``Limits.agents_page_max``.
            InvalidArgument, ArgumentTypeError: a bad ``limit`` or ``after``.
            UnknownAgent: ``after`` is an id of no agent (compacted: use ``"<path> <id>"``).
        """
        return self._ask(Agents(HOST, include_closed, limit, after))

    async def agents_async(
        self, *, include_closed: bool = False, limit: int | None = None, after: str | None = None
    ) -> list[AgentInfo]:
        """Like :meth:`agents`, without blocking the event loop."""
        return await self._ask_async(Agents(HOST, include_closed, limit, after))

    def iter_agents(
        self,
        *,
        include_closed: bool = False,
        page_size: int = AGENTS_PAGE_DEFAULT,
        after: str | None = None,
    ) -> Iterator[AgentInfo]:
        """Yield every agent by path, one :meth:`agents` page of ``page_size`` at a time
        (each page a short read: the supervisor is never held for the whole tree).

        Raises:
            PageLimitExceeded, InvalidArgument, ArgumentTypeError: as :meth:`agents`.
        """
        return iter_pages(
            lambda limit, cursor: self.agents(
                include_closed=include_closed, limit=limit, after=cursor
            ),
            page_size,
            after,
        )

    def iter_agents_async(
        self,
        *,
        include_closed: bool = False,
        page_size: int = AGENTS_PAGE_DEFAULT,
        after: str | None = None,
    ) -> AsyncIterator[AgentInfo]:
        """Like :meth:`iter_agents`, as an async iterator (``async for``)."""
        return aiter_pages(
            lambda limit, cursor: self.agents_async(
                include_closed=include_closed, limit=limit, after=cursor
            ),
            page_size,
            after,
        )

    def inspect(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Return one agent in full: its snapshot, unread messages, pending completions
        and the last ``transcript_tail`` messages of its stored transcript.

        Served by a writer and by a read-only runtime alike, from one view of the store.

        Raises:
            UnknownAgent: no such agent. InvalidArgument: a negative ``transcript_tail``.
        """
        return self._ask(Inspect(HOST, ref, transcript_tail))

    async def inspect_async(self, ref: str, *, transcript_tail: int = 20) -> AgentDetail:
        """Like :meth:`inspect`, without blocking the event loop."""
        return await self._ask_async(Inspect(HOST, ref, transcript_tail))

    def agent_counts(self) -> AgentCounts:
        """Count the store's agents by state (closed ones included) and the live ones by
        profile. A writer keeps the counts as its tree changes (this reads no agent); a
        read-only runtime walks the agents database. What the metrics' gauges read.
        """
        return self._ask(CountAgents(HOST))

    async def agent_counts_async(self) -> AgentCounts:
        """Like :meth:`agent_counts`, without blocking the event loop."""
        return await self._ask_async(CountAgents(HOST))

    def backlog(self) -> Backlog:
        """Count what waits to be received in the whole store: unread messages and
        pending completions (the host's among them), from one view of the store.

        Served by a writer and a read-only runtime alike (for metrics: one call, not
        one ``inspect`` per agent).
        """
        return self._ask(CountBacklog(HOST))

    async def backlog_async(self) -> Backlog:
        """Like :meth:`backlog`, without blocking the event loop."""
        return await self._ask_async(CountBacklog(HOST))

    # -- events: subscribe, stream -------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(event)`` for every committed transition; return unsubscribe.

        Events arrive on one dispatcher thread, in commit order.

        Raises:
            RuntimeClosed: the runtime is closed (or closing).
        """
        system = self._system
        if system is None or system.state is not RuntimeState.OPEN:
            raise RuntimeClosed("the runtime is closed; open it again to subscribe")
        return system.bus.subscribe(callback)

    def _attach_timings(self, sink: TimingSink) -> Callable[[], None] | None:
        """Tell ``sink`` how long each store commit and supervisor command takes; return
        detach (None: a read-only runtime, which commits and serves no command).

        Nothing is timed while no sink is attached (see :mod:`retinue.actors.supervisor._timings`).

        Raises:
            RuntimeClosed: the runtime is closed (or closing).
        """
        system = self._system
        if system is None or system.state is not RuntimeState.OPEN:
            raise RuntimeClosed("the runtime is closed; open it again to time it")
        if not isinstance(system, System) or system.timings is None:
            return None
        return system.timings.attach(sink)

    def stream(self, ref: str | None = None) -> EventStream:
        """Iterate over the events of ``ref``'s subtree as they happen (None: every agent).

        ``ref`` is an agent id or a path (absolute, or relative to ``/root``; it
        need not be live yet). Bounded like a subscriber (``event_queue_capacity``;
        one that falls behind gets ``EventsDropped``); ends when the loop is left
        (``break``, ``close()``, a ``with`` block) or the runtime shuts down.

        Raises:
            RuntimeClosed: the runtime is closed. StoreReadOnly: it is read-only
                (a reader has no events). InvalidAgentPath: a bad ``ref``.
        """
        return EventStream(*self._events_of(ref))

    def stream_async(self, ref: str | None = None) -> AsyncEventStream:
        """Like :meth:`stream`, as an async iterator that never blocks the event loop."""
        return AsyncEventStream(*self._events_of(ref))

    def _events_of(self, ref: str | None) -> tuple[EventBus, str | None]:
        """The bus a stream listens on and the root of the subtree it follows."""
        system = self._system
        if system is None or system.state is not RuntimeState.OPEN:
            raise RuntimeClosed("the runtime is closed; open it again to stream its events")
        if not isinstance(system, System):
            raise StoreReadOnly("a read-only runtime has no events; stream from the writer")
        return system.bus, stream_root(system.store, ref)

    # -- upkeep: backup, compact ---------------------------------------------------------

    def backup(self, dest: str | os.PathLike[str]) -> Path:
        """Write a compacted hot copy of the live store to ``dest``; return its path.

        Raises:
            RuntimeClosed: the runtime is closed, or closed during the copy.
        """
        self._ask(Barrier())
        return self._on_store(Store.backup, dest)

    async def backup_async(self, dest: str | os.PathLike[str]) -> Path:
        """Like :meth:`backup`, without blocking the event loop (the copy runs on a thread)."""
        await self._ask_async(Barrier())
        return await asyncio.to_thread(self._on_store, Store.backup, dest)

    def _on_store(self, call: Callable[..., R], *args: Any) -> R:
        """``call(store, *args)`` for the host: a store the runtime closed meanwhile (another
        thread's ``shutdown``) is ``RuntimeClosed``, as any call on a closed runtime; damage
        found (``StoreCorrupted``) and any store error of an open store are raised as they are.

        Raises:
            RuntimeClosed: the runtime closed before or during the call.
            StoreError: the store failed while the runtime was open.
        """
        store = self._store
        try:
            return call(store, *args)
        except StoreError as exc:
            # Damage found (StoreCorrupted, ...) or a store failure of an open runtime: as it
            # is; the plain StoreError of a store the close took away: RuntimeClosed.
            if type(exc) is not StoreError or not store.closed:
                raise
            raise RuntimeClosed("the runtime closed during the call") from exc

    def compact(self, *, reclaim: bool = False) -> CompactionReport:
        """Compact now (it also runs every ``compact_interval_s``); return what went.

        Removes closed agents, read messages and delivered completions beyond
        the ``retain_*`` limits; never anything unread, undelivered or live.
        ``reclaim=True`` then gives the store file's free pages back to the
        file system: a compacting copy of the file is swapped in at a quiet
        point of the store's writer (what is committed meanwhile waits while
        the file is copied: 0.25 s for 33 MiB here; nothing acknowledged is
        lost, and a crash at any step leaves a store that opens whole). The report's
        ``file_bytes_before`` and ``file_bytes_after`` say what it gave back.

        Raises:
            StoreReadOnly: the runtime is read-only.
            StoreCorrupted: the store is damaged (nothing was changed).
            StoreError: the copy failed, e.g. for lack of disk (nothing was changed).
        """
        report = self._ask(Compact())
        if not reclaim:
            return report
        before, after = self._on_store(Store.reclaim)
        return msgspec.structs.replace(report, file_bytes_before=before, file_bytes_after=after)

    async def compact_async(self, *, reclaim: bool = False) -> CompactionReport:
        """Like :meth:`compact`, without blocking the event loop."""
        report = await self._ask_async(Compact())
        if not reclaim:
            return report
        before, after = await asyncio.to_thread(self._on_store, Store.reclaim)
        return msgspec.structs.replace(report, file_bytes_before=before, file_bytes_after=after)

    # -- approvals of tool calls ---------------------------------------------------------

    def approvals(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Return the pending approval requests, oldest first: of ``ref``'s subtree, or all.

        Served by a writer and by a read-only runtime alike.

        Raises:
            UnknownAgent, InvalidAgentPath: a bad ``ref``.
        """
        return self._ask(Approvals(HOST, ref))

    async def approvals_async(self, ref: str | None = None) -> list[ApprovalRequest]:
        """Like :meth:`approvals`, without blocking the event loop."""
        return await self._ask_async(Approvals(HOST, ref))

    def approve(self, request_id: str, *, note: str | None = None) -> None:
        """Approve a pending request: the call runs and the model gets its result.

        It is recorded approved before it runs; a call a crash leaves in
        doubt (running, without a result) is not run again without a new
        approval (see ``Profile.in_doubt``).

        Raises:
            UnknownApproval: no request has that id.
            ApprovalAlreadyAnswered: it was approved, denied, timed out or
                cancelled before.
            ArgumentTypeError, InvalidArgument: a bad id or note.
        """
        self._ask(Approve(request_id, note))

    async def approve_async(self, request_id: str, *, note: str | None = None) -> None:
        """Like :meth:`approve`, without blocking the event loop."""
        await self._ask_async(Approve(request_id, note))

    def deny(self, request_id: str, *, reason: str) -> None:
        """Deny a pending request: the model gets ``{"error": "denied: <reason>"}``.

        Raises:
            UnknownApproval, ApprovalAlreadyAnswered: as :meth:`approve`.
            ArgumentTypeError, InvalidArgument: a bad id, or a blank reason.
        """
        self._ask(Deny(request_id, reason))

    async def deny_async(self, request_id: str, *, reason: str) -> None:
        """Like :meth:`deny`, without blocking the event loop."""
        await self._ask_async(Deny(request_id, reason))
