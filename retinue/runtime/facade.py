"""The host-facing facade: :class:`Runtime`, opened on a store, closed by ``shutdown``.

``Runtime`` is thread-safe and thin. It holds one thing, the running parts
below it (:class:`~retinue.actors.system.System` for a writer,
:class:`~retinue.actors.system._readonly.ReadOnlySystem` for a reader), which start
together at :meth:`Runtime.open` and stop together at :meth:`Runtime.shutdown`;
its state is theirs. Its calls come from the call groups it mixes in (see
:mod:`retinue.runtime`), each one line over a typed command.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from retinue.actors import Profile
from retinue.actors.calls import RuntimeState
from retinue.actors.system import ReadOnlySystem, System
from retinue.actors.turns import Runner
from retinue.errors import StoreError
from retinue.llm.mcp import McpManager, McpServer
from retinue.persistence.options import check_store_options
from retinue.persistence.restore import Diagnostic
from retinue.persistence.space import Diagnostics
from retinue.persistence.store import DEFAULT_MAP_SIZE, Durability
from retinue.protocol.limits import Limits
from retinue.runtime.approvals import ApprovalCalls
from retinue.runtime.events import EventCalls
from retinue.runtime.lifecycle import LifecycleCalls
from retinue.runtime.mailbox import MailboxCalls
from retinue.runtime.opening import (
    apply_team,
    attach_reader,
    checked_limits,
    open_tracing,
    start_writer,
)
from retinue.runtime.reads import ReadCalls
from retinue.runtime.upkeep import UpkeepCalls
from retinue.runtime.waits import WaitCalls
from retinue.team import Team

__all__ = ["Runtime"]


class Runtime(
    LifecycleCalls, WaitCalls, MailboxCalls, ReadCalls, EventCalls, UpkeepCalls, ApprovalCalls
):
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
        ``StoreReadOnly``. ``mcp_servers`` names MCP servers
        (:class:`~retinue.llm.McpServer`) whose tools profiles grant as
        ``<server>.<tool>`` or ``<server>.*``; they add to, and win over, the
        team's ``[mcp.<server>]`` (see :mod:`retinue.llm.mcp`).
        ``tracer_provider`` (None: the global one) and ``capture_content`` (None:
        as the environment says) are the spans' (:mod:`retinue.tracing`, extra ``otel``).

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
            ExtraNotInstalled: a ``tracer_provider`` without the ``otel`` extra.
        """
        given = apply_team(team, readonly, profiles, runner, limits, workspace)
        options = check_store_options(
            path,
            durability=durability,
            map_size=map_size,
            readonly=readonly,
            group_commit=group_commit,
        )
        checked = checked_limits(given.limits)
        if options.readonly:
            return cls._over(attach_reader(options, checked))
        spans = open_tracing(tracer_provider, capture_content, checked)
        writer = start_writer(options, checked, given, runner, create, mcp_servers, spans)
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
        """What the restore of the store skipped or repaired (see the README's table).

        A list of :class:`~retinue.persistence.restore.Diagnostic`; its
        ``store`` attribute is how the data file is used now
        (:class:`~retinue.persistence.space.StoreSpace`: file size, pages in
        use and free, the map's headroom), None once the runtime is closed.

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
        return Diagnostics(system.diagnostics, space)

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
