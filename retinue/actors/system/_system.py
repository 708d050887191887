"""A writable runtime's running parts, started and stopped together.

:class:`System` is a writable runtime below its facade: the store, the
executors agent actors run on, the supervisor actor, the compactor thread,
the event bus, and the channel and engine every call goes through. It opens
them in order and closes them in the reverse order, once, whoever asks and
however often; a failed start closes what it opened.
:class:`~retinue.actors.system._readonly.ReadOnlySystem` is the same for a store
opened read-only beside its writer.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pykka

from retinue.actors import Profile
from retinue.actors.admission import Admission
from retinue.actors.calls import Channel, Engine, RuntimeState, actor_target
from retinue.actors.commands import Compact, Rearm, Shutdown
from retinue.actors.events import EventBus, Spans
from retinue.actors.supervisor import Supervisor, Timings
from retinue.actors.system._boot import Booted, boot
from retinue.actors.tree import write_open_index
from retinue.actors.turns import Executor, Runner, running_agent
from retinue.errors import RetinueError, StoreError
from retinue.persistence.options import StoreOptions, make_folder, remove_created
from retinue.persistence.restore import Diagnostic
from retinue.persistence.space import StoreSpace
from retinue.persistence.store import Store
from retinue.protocol.limits import Limits
from retinue.protocol.messages import StoreMapFilling
from retinue.protocol.paths import ROOT

__all__ = ["CLOSE_GRACE_S", "System"]

CLOSE_GRACE_S = 5.0
"""How long a close waits, in all, for the runners of the turns it interrupts."""
STOP_POLL_S = 0.01  # how often a close looks again at a runner it waits for
log = logging.getLogger("retinue.runtime")


class System:
    """The running parts of a writable runtime. Thread-safe; built by :meth:`start`."""

    def __init__(
        self,
        *,
        path: Path,
        created: Path | None,
        temporary: bool,
        store: Store,
        executor: Executor,
        bus: EventBus,
        engine: Engine,
        limits: Limits,
    ) -> None:
        """Gather the parts (see :meth:`start`); the supervisor is attached by :meth:`start`."""
        self.path = path
        self.created = created  # the folder the start made (None: it was there)
        self.temporary = temporary
        self.store = store
        self.executor = executor
        self.bus = bus
        self.engine = engine
        self.limits = limits
        self._froze = False  # the open froze what was alive (a big tree)
        self.core: Supervisor | None = None
        self.actor: pykka.ActorRef[Any] | None = None
        self.timings: Timings | None = None  # the commits' and commands' timers, once serving
        self.diagnostics: list[Diagnostic] = []
        self._lock = threading.Lock()
        self._shutting_down = False
        self._released = threading.Event()  # set once the store is released
        self._closing_runners: set[str] = set()  # agents whose runner is closing the runtime
        self._stopping = threading.Event()
        self._compactor: threading.Thread | None = None
        self.before_stop: list[Callable[[], None]] = []
        self.admission: Admission | None = None  # the provider limits' gate, if any

    @classmethod
    def start(
        cls,
        options: StoreOptions,
        *,
        create: bool,
        profiles: dict[str, Profile],
        runners: dict[str, Runner],
        limits: Limits,
        bus: EventBus | None = None,
        before_stop: Sequence[Callable[[], None]] = (),
        spans: Spans | None = None,
        admission: Admission | None = None,
    ) -> System:
        """Open (or create) the writable store ``options`` names and start everything on it.

        ``options.path`` None makes a temporary folder. ``bus`` is the event
        bus to publish on (a new one if None). ``before_stop`` are the close
        functions of what the host's layers started on the runtime's executors
        (MCP sessions): the shutdown calls them once the turns are interrupted,
        before the event loop stops. A failed start leaves nothing behind: the
        executor is stopped, the store closed, a folder this call created
        removed again and the ``before_stop`` functions called. ``spans`` is where
        the turns' spans go (:mod:`retinue.tracing`; None: no spans); ``admission`` the
        gate model calls pass under provider limits (None: none; stopped at shutdown).

        Raises:
            StoreError: the folder cannot be created, or the recovery not written.
            StoreLocked, StoreVersionError, StoreCorrupted: as :class:`Store` raises.
        """
        try:
            system = cls._open(options, create=create, limits=limits, bus=bus)
        except BaseException:
            _call_each(before_stop)
            raise
        system.before_stop = list(before_stop)
        system.admission = admission
        try:
            booted = boot(
                system.store,
                profiles=profiles,
                runners=runners,
                limits=limits,
                bus=system.bus,
                engine=system.engine,
                executor=system.executor,
                spans=spans,
                admission=admission,
            )
        except BaseException:
            system._discard()
            raise
        try:
            system._serve(booted)
        except BaseException:
            system.shutdown()
            raise
        return system

    @classmethod
    def _open(
        cls, options: StoreOptions, *, create: bool, limits: Limits, bus: EventBus | None
    ) -> System:
        """Make the folder, open the store and start the executors; a failure undoes them.

        Raises:
            StoreError, StoreLocked, StoreVersionError, StoreCorrupted: as :meth:`start`.
        """
        created = _make_folder(options.path)
        path = options.path if options.path is not None else created
        assert path is not None
        try:
            store = Store(
                path,
                durability=options.durability,
                map_size=options.map_size,
                group_commit=options.group_commit,
                create=create,
            )
        except BaseException:
            remove_created(created)
            raise
        executor: Executor | None = None
        try:
            executor = Executor()
            executor.start()  # threads start here, never on the supervisor's or writer's
        except BaseException:
            if executor is not None:
                executor.shutdown(0.0)
            store.close()
            remove_created(created)
            raise
        return cls(
            path=path,
            created=created,
            temporary=options.path is None,
            store=store,
            executor=executor,
            bus=bus if bus is not None else EventBus(limits.event_queue_capacity),
            engine=Engine(Channel(after_close=True)),
            limits=limits,
        )

    def _discard(self) -> None:
        """Undo a start whose supervisor never ran: stop the executors, close the store."""
        self.executor.shutdown(0.0)
        self.store.close()
        remove_created(self.created)
        _call_each(self.before_stop)

    def _serve(self, booted: Booted) -> None:
        """Connect the running supervisor, re-arm its timers and start the compactor."""
        self.core, self.actor = booted.core, booted.actor
        self._froze = booted.froze
        self.timings = Timings(self.store, booted.core)
        self.diagnostics = booted.diagnostics
        observer = booted.core.world.observer
        capture = observer.capture if observer.spans is not None else None
        self.engine.channel.connect(actor_target(booted.actor, capture))
        self.engine.tell(Rearm())  # pending restarts and approval timeouts get their timers
        self.store.watch_map(self.limits.store_map_warn_ratio, self._map_filling)
        self._compactor = threading.Thread(
            target=self._compact_loop, name="retinue-compactor", daemon=True
        )
        self._compactor.start()

    def _map_filling(self, space: StoreSpace) -> None:
        """Warn that the file's high-water mark passed its share of the map (writer thread)."""
        log.info(
            "store %s: the file reaches %.0f%% of its LMDB map (%d of %d bytes; %d bytes free "
            "inside it, %d on the disk); the map doubles when full",
            self.path,
            100 * space.map_used_ratio,
            space.used_bytes,
            space.map_bytes,
            space.free_bytes,
            space.disk_free_bytes,
        )
        self.bus.publish(
            [
                StoreMapFilling(
                    agent_id="",
                    path=ROOT,
                    at=time.time(),
                    file_bytes=space.file_bytes,
                    used_bytes=space.used_bytes,
                    in_use_bytes=space.in_use_bytes,
                    free_bytes=space.free_bytes,
                    map_bytes=space.map_bytes,
                    map_headroom_bytes=space.map_headroom_bytes,
                    disk_free_bytes=space.disk_free_bytes,
                )
            ]
        )

    @property
    def state(self) -> RuntimeState:
        """Open, closing or closed."""
        return self.engine.channel.state

    @property
    def abandoned_runners(self) -> int:
        """Sync runners that ignored an interrupt (or close) and still hold their thread."""
        core = self.core
        return 0 if core is None else len(core.scheduler.abandoned)

    def _compact_loop(self) -> None:
        while not self._stopping.wait(self.limits.compact_interval_s):
            try:
                self.engine.submit(Compact())
            except RetinueError:
                return

    # -- stopping -------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Close the runtime; return only once its store is released.

        Idempotent and safe from any thread, however often: the first call
        interrupts running turns, waits a bounded time for their runners
        (never for a runner that is itself closing the runtime), persists
        everything, stops every actor and releases the store (a temporary
        store is removed); any other call meanwhile, from a host thread, a
        runner or an event loop, returns when that is done.
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
            self._tear_down()
        finally:
            self._released.set()

    def _tear_down(self) -> None:
        """The parts stop in reverse order of their start."""
        self._stopping.set()
        if self._compactor is not None and self._compactor is not threading.current_thread():
            self._compactor.join()
        channel = self.engine.channel
        channel.close(RuntimeState.CLOSING)
        actors: list[tuple[str, pykka.ActorRef[Any]]] = []
        if self.actor is not None:
            # A failed store cannot record the interrupts; the turns are cancelled anyway.
            with contextlib.suppress(RetinueError):
                actors = self.engine.ask(Shutdown())
        channel.close(RuntimeState.CLOSED)
        self.engine.give_back_host_waits()
        self._stop_runners(actors)
        _call_each(self.before_stop)  # on the loop, before it stops (MCP process groups)
        # Before the supervisor stops: cancelled async turns finish here and
        # give back the completions their waits had taken (GiveBack is served
        # while closing), so none is lost to a stopped supervisor.
        self.executor.shutdown(CLOSE_GRACE_S)
        if self.actor is not None:
            self.actor.stop(block=True)
        channel.disconnect()  # a command sent as the supervisor stopped is refused
        if self.core is not None:  # the actor has stopped: nothing reads the tree now
            # A big tree's indexes, for the next open to take instead of walking every
            # agent; a store that failed keeps none (the next open walks them).
            tree = self.core.tree
            with contextlib.suppress(RetinueError):
                write_open_index(self.store, len(tree.agents), tree.open_index)
            self.core.release()
        if self._froze:  # the open froze what was alive: let the collector reach it again
            gc.unfreeze()
        self.store.close()
        self.bus.close()
        if self.temporary:
            shutil.rmtree(self.path, ignore_errors=True)

    def _stop_runners(self, actors: list[tuple[str, pykka.ActorRef[Any]]]) -> None:
        """Stop the actors of interrupted turns, waiting at most ``CLOSE_GRACE_S`` in all.

        A runner that is closing the runtime itself is not waited for: it
        waits for this close, and returns once the store is released. Closed
        from the runtime's own event loop (an async runner), none is waited
        for: the loop's turns cannot end while it is blocked here.
        """
        stops = [(agent_id, ref, ref.stop(block=False)) for agent_id, ref in actors]
        if self.executor.loop.thread_id == threading.get_ident():
            return  # an async runner closes the runtime: the loop's turns cannot end meanwhile
        deadline = time.monotonic() + CLOSE_GRACE_S
        for agent_id, ref, stopped in stops:
            while ref.is_alive() and time.monotonic() < deadline:
                with self._lock:
                    if agent_id in self._closing_runners:
                        break
                with contextlib.suppress(pykka.Timeout):
                    stopped.get(timeout=STOP_POLL_S)


def _call_each(closes: Sequence[Callable[[], None]]) -> None:
    """Call each close function in order; one that fails is logged and the next called."""
    for close in closes:
        try:
            close()
        except Exception:
            log.exception("closing %r failed", close)


def _make_folder(path: Path | None) -> Path | None:
    """Create the store's folder (a temporary one for None); return it if this call made it.

    Raises:
        StoreError: it cannot be created.
    """
    if path is not None:
        return make_folder(path)
    try:
        return Path(tempfile.mkdtemp(prefix="retinue-"))
    except OSError as exc:
        raise StoreError(f"cannot create a temporary store folder: {exc}") from None
