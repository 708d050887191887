"""A runtime's running parts, started and stopped together: the writer's and the reader's.

:class:`System` is a writable runtime below its facade: the store, the
executors agent actors run on, the supervisor actor, the compactor thread,
the event bus, and the channel and engine every call goes through. It opens
them in order and closes them in the reverse order, once, whoever asks and
however often. :class:`ReadOnlySystem` is the same for a store opened
read-only beside its writer.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pykka

from retinue.actors.agent import running_agent
from retinue.actors.boot import boot, read_diagnostics
from retinue.actors.channel import Channel, RuntimeState, actor_target
from retinue.actors.commands import Compact, Rearm, Shutdown
from retinue.actors.engine import Engine
from retinue.actors.events import EventBus
from retinue.actors.executor import Executor
from retinue.actors.profile import Profile
from retinue.actors.reader import StoreReader
from retinue.actors.supervisor import Supervisor
from retinue.actors.turn import Runner
from retinue.errors import RetinueError, StoreError
from retinue.persistence.options import StoreOptions, make_folder, remove_created
from retinue.persistence.restore import Diagnostic
from retinue.persistence.store import Store
from retinue.protocol.limits import Limits

__all__ = ["CLOSE_GRACE_S", "ReadOnlySystem", "System"]

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
        temporary: bool,
        store: Store,
        executor: Executor,
        bus: EventBus,
        engine: Engine,
        limits: Limits,
    ) -> None:
        """Gather the parts (see :meth:`start`); the supervisor is attached by :meth:`start`."""
        self.path = path
        self.temporary = temporary
        self.store = store
        self.executor = executor
        self.bus = bus
        self.engine = engine
        self.limits = limits
        self.core: Supervisor | None = None
        self.actor: pykka.ActorRef[Any] | None = None
        self.diagnostics: list[Diagnostic] = []
        self._lock = threading.Lock()
        self._shutting_down = False
        self._released = threading.Event()  # set once the store is released
        self._closing_runners: set[str] = set()  # agents whose runner is closing the runtime
        self._stopping = threading.Event()
        self._compactor: threading.Thread | None = None
        self.before_stop: list[Callable[[], None]] = []

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
    ) -> System:
        """Open (or create) the writable store ``options`` names and start everything on it.

        ``options.path`` None makes a temporary folder. ``bus`` is the event
        bus to publish on (a new one if None). ``before_stop`` are the close
        functions of what the host's layers started on the runtime's executors
        (MCP sessions): the shutdown calls them once the turns are interrupted,
        before the event loop stops. A failed start leaves nothing behind: the
        executor is stopped, the store closed and a folder this call created
        removed again.

        Raises:
            StoreError: the folder cannot be created, or the recovery not written.
            StoreLocked, StoreVersionError, StoreCorrupted: as :class:`Store` raises.
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
            bus = bus if bus is not None else EventBus(limits.event_queue_capacity)
            engine = Engine(Channel(after_close=True))
            system = cls(
                path=path,
                temporary=options.path is None,
                store=store,
                executor=executor,
                bus=bus,
                engine=engine,
                limits=limits,
            )
            booted = boot(
                store,
                profiles=profiles,
                runners=runners,
                limits=limits,
                bus=bus,
                engine=engine,
                executor=executor,
            )
        except BaseException:
            if executor is not None:
                executor.shutdown(0.0)
            store.close()
            remove_created(created)
            raise
        system.core, system.actor = booted.core, booted.actor
        system.diagnostics = booted.diagnostics
        engine.channel.connect(actor_target(booted.actor))
        engine.tell(Rearm())  # pending restarts and approval timeouts get their timers
        system._compactor = threading.Thread(
            target=system._compact_loop, name="retinue-compactor", daemon=True
        )
        system._compactor.start()
        return system

    @property
    def state(self) -> RuntimeState:
        """Open, closing or closed."""
        return self.engine.channel.state

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
        for close in self.before_stop:  # on the loop, before it stops (MCP process groups)
            try:
                close()
            except Exception:
                log.exception("closing %r failed", close)
        # Before the supervisor stops: cancelled async turns finish here and
        # give back the completions their waits had taken (GiveBack is served
        # while closing), so none is lost to a stopped supervisor.
        self.executor.shutdown(CLOSE_GRACE_S)
        if self.actor is not None:
            self.actor.stop(block=True)
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


class ReadOnlySystem:
    """A store opened read-only beside its writer, and the reader that serves it."""

    def __init__(self, path: Path, limits: Limits) -> None:
        """Open the store at ``path`` read-only.

        Raises:
            StoreVersionError: the store was written by a newer schema.
            StoreError, StoreCorrupted: no readable store there.
        """
        self.path = path
        self.limits = limits
        self.bus = EventBus(limits.event_queue_capacity)
        store = Store(path, readonly=True)
        try:
            store.refuse_newer()
            self.diagnostics = read_diagnostics(store)
        except BaseException:
            store.close()
            raise
        self.store = store
        self.reader = StoreReader(store, limits)
        self.engine = Engine(Channel(after_close=False))
        self.engine.channel.connect(self.reader.submit)
        self._lock = threading.Lock()
        self._shutting_down = False
        self._released = threading.Event()

    @property
    def state(self) -> RuntimeState:
        """Open or closed."""
        return self.engine.channel.state

    def shutdown(self) -> None:
        """Release the store (waiting for reads in progress); idempotent, from any thread."""
        with self._lock:
            first = not self._shutting_down
            self._shutting_down = True
        if not first:
            self._released.wait()
            return
        try:
            self.engine.channel.close(RuntimeState.CLOSED)
            self.reader.close()
            self.store.close()
            self.bus.close()
        finally:
            self._released.set()
