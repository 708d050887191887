"""The supervisor's inbox: commands go in bare, pykka's own messages still work, a stop holds.

A command's envelope is put in the supervisor actor's inbox as it is (not in
pykka's envelope through ``tell``), and the actor's loop serves it before
asking pykka what a message is. What that must keep: commands are served in
the order they were put, mixed with pykka's messages (an ``ask``, a proxy's
attribute) which are answered as pykka answers them; once the supervisor has
stopped, a command is refused with ``RuntimeClosed`` and never lost in the
inbox unanswered; and the stop commits what was served.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest

from retinue import Limits, Profile, RuntimeClosed
from retinue.actors.calls import RuntimeState, actor_target
from retinue.actors.commands import HOST, Agents, Barrier, Envelope, Spawn
from retinue.actors.supervisor import SupervisorActor
from retinue.actors.system import System
from retinue.persistence.options import check_store_options
from retinue.testing import echo

WATCHDOG_S = 30.0


def start(path: Path) -> System:
    """Start a writer's System on ``path`` with one echo profile."""
    options = check_store_options(
        path, durability="full", map_size=1 << 24, readonly=False, group_commit=True
    )
    return System.start(
        options,
        create=False,
        profiles={"worker": Profile("worker", runner=echo)},
        runners={"worker": echo},
        limits=Limits(),
    )


def test_commands_and_pykka_messages_share_the_inbox_in_order(tmp_path: Path) -> None:
    system = start(tmp_path / "s")
    try:
        actor = system.actor
        assert actor is not None
        spawned: list[concurrent.futures.Future[Any]] = []
        asked = []
        for i in range(20):
            spawned.append(system.engine.submit(Spawn(HOST, "worker", f"t{i}", f"w{i}")))
            asked.append(actor.ask("not a command", block=False))  # pykka's: logged, None
        names = [f.result(timeout=WATCHDOG_S).name for f in spawned]
        assert names == [f"w{i}" for i in range(20)]
        assert [a.get(timeout=WATCHDOG_S) for a in asked] == [None] * 20
        assert actor.proxy().core.get(timeout=WATCHDOG_S) is system.core  # a proxy's get
        agents = system.engine.ask(Agents(HOST))
        assert sorted(a.name for a in agents) == sorted(names)
    finally:
        system.shutdown()


def test_commands_from_many_threads_are_each_answered_once(tmp_path: Path) -> None:
    system = start(tmp_path / "s")
    try:
        got: list[int] = []
        lock = threading.Lock()

        def ask(k: int) -> None:
            for _ in range(25):
                count = len(system.engine.ask(Agents(HOST)))
                with lock:
                    got.append(count)

        threads = [threading.Thread(target=ask, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WATCHDOG_S)
        assert got == [0] * 100
    finally:
        system.shutdown()


def test_a_stopped_supervisor_refuses_commands_and_kept_what_it_served(tmp_path: Path) -> None:
    system = start(tmp_path / "s")
    actor = system.actor
    assert actor is not None
    served = system.engine.submit(Spawn(HOST, "worker", "t", "kept"))
    actor.stop()  # pykka's stop message, behind the command: served first, then committed
    assert served.result(timeout=WATCHDOG_S).name == "kept"
    with pytest.raises(RuntimeClosed, match="supervisor has stopped"):
        system.engine.submit(Agents(HOST))
    system.shutdown()
    reopened = start(tmp_path / "s")
    try:
        assert [a.name for a in reopened.engine.ask(Agents(HOST))] == ["kept"]
    finally:
        reopened.shutdown()


def test_the_actor_target_called_as_a_target_delivers_and_refuses_once_stopped(
    tmp_path: Path,
) -> None:
    """A channel delivers to an actor's target inline; called as any target (a channel of
    another kind may wrap it), it delivers the same, and refuses once the actor stopped."""
    system = start(tmp_path / "s")
    try:
        actor = system.actor
        assert actor is not None
        target = actor_target(actor)
        given: concurrent.futures.Future[Any] = concurrent.futures.Future()
        assert target(Spawn(HOST, "worker", "t", "direct"), given) is given
        assert given.result(timeout=WATCHDOG_S).name == "direct"
        built = target(Agents(HOST), None)  # no reply given: the target builds one
        assert [a.name for a in built.result(timeout=WATCHDOG_S)] == ["direct"]
        actor.stop()
        with pytest.raises(RuntimeClosed, match="supervisor has stopped"):
            target(Agents(HOST), None)
    finally:
        system.shutdown()


@contextlib.contextmanager
def holding(system: System) -> Iterator[concurrent.futures.Future[Any]]:
    """Hold the supervisor inside an ``Agents`` command while the block runs; yield the
    command's future. The supervisor goes on as the block ends."""
    gate, inside = threading.Event(), threading.Event()
    core = system.core
    assert core is not None
    real = core.dispatch

    def held(tx: Any, command: Any) -> Any:
        if isinstance(command, Agents):  # hold the supervisor inside this command
            inside.set()
            gate.wait(WATCHDOG_S)
        return real(tx, command)

    core.dispatch = held  # type: ignore[method-assign]
    try:
        busy = system.engine.submit(Agents(HOST))
        assert inside.wait(WATCHDOG_S)
        yield busy
    finally:
        gate.set()
        core.dispatch = real  # type: ignore[method-assign]


def test_a_command_put_behind_the_stop_message_is_refused_not_left_unanswered(
    tmp_path: Path,
) -> None:
    """A command served while closing (a Barrier here) sent after pykka's stop message was
    queued, while the supervisor is still inside a command: pykka's teardown drops inbox
    items with no reply slot, so it was never answered and an ``ask`` of it hung for ever."""
    system = start(tmp_path / "s")
    assert system.actor is not None
    try:
        with holding(system) as busy:
            system.engine.channel.close(RuntimeState.CLOSED)  # as a close does first
            system.actor.stop(block=False)  # pykka's stop message, behind the held command
            late = system.engine.submit(Barrier())  # served while closing: gets through
        assert busy.result(timeout=WATCHDOG_S) == []
        with pytest.raises(RuntimeClosed, match="supervisor has stopped"):
            late.result(timeout=WATCHDOG_S)
    finally:
        system.shutdown()


def test_a_command_put_as_the_supervisor_stopped_is_refused_by_the_disconnect(
    tmp_path: Path,
) -> None:
    """A sender that saw the supervisor running puts its command after the actor's own
    teardown drained the inbox: the channel's disconnect (the close's, once the actor has
    stopped) refuses it, and the channel takes nothing after."""
    system = start(tmp_path / "s")
    try:
        actor = system.actor
        assert actor is not None
        actor.stop()
        late: concurrent.futures.Future[Any] = concurrent.futures.Future()
        actor.actor_inbox.put(Envelope(Barrier(), late))  # type: ignore[arg-type]  # as the channel
        system.engine.channel.disconnect()
        with pytest.raises(RuntimeClosed, match="supervisor has stopped"):
            late.result(timeout=WATCHDOG_S)
        with pytest.raises(RuntimeClosed, match="runtime is closed"):
            system.engine.submit(Barrier())
    finally:
        system.shutdown()


def test_the_teardown_and_the_disconnect_drain_one_inbox_at_once_without_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pykka answers the stop before its loop runs the teardown, so a close's disconnect
    drains the inbox while the actor's teardown does: the teardown saw an item, the
    disconnect took it, and a blocking take would wait for ever (review54: the supervisor's
    thread, holding the whole tree, outlived the close)."""
    tearing: set[int] = set()
    seen, drained = threading.Event(), threading.Event()

    class Inbox(queue.SimpleQueue):  # type: ignore[type-arg]
        """Holds the teardown's first look at a non-empty inbox until the disconnect ran."""

        def _hold(self) -> None:
            if threading.get_ident() in tearing and self.qsize() and not seen.is_set():
                seen.set()
                drained.wait(WATCHDOG_S)

        def empty(self) -> bool:  # (a drain that looks, then takes: held in between)
            empty = super().empty()
            self._hold()
            return empty

        def get_nowait(self) -> Any:
            self._hold()
            return super().get_nowait()

    teardown = SupervisorActor._actor_loop_teardown

    def noted(self: SupervisorActor) -> None:
        tearing.add(threading.get_ident())
        teardown(self)

    monkeypatch.setattr(SupervisorActor, "_create_actor_inbox", staticmethod(Inbox))
    monkeypatch.setattr(SupervisorActor, "_actor_loop_teardown", noted)
    system = start(tmp_path / "s")
    actor = system.actor
    assert actor is not None
    try:
        with holding(system) as busy:
            system.engine.channel.close(RuntimeState.CLOSED)
            stopping = actor.stop(block=False)  # pykka's stop message ...
            late = system.engine.submit(Barrier())  # ... and a command behind it
        busy.result(timeout=WATCHDOG_S)
        stopping.get(timeout=WATCHDOG_S)  # answered: the teardown has not run yet
        assert seen.wait(WATCHDOG_S)  # the teardown found the command in the inbox ...
        system.engine.channel.disconnect()  # ... and the close's disconnect takes it
        drained.set()
        with pytest.raises(RuntimeClosed, match="supervisor has stopped"):
            late.result(timeout=WATCHDOG_S)
        threads = [t for t in threading.enumerate() if t.ident in tearing]
        for thread in threads:
            thread.join(WATCHDOG_S)
        assert threads and not any(t.is_alive() for t in threads), "the teardown blocked"
    finally:
        drained.set()
        system.shutdown()


def test_the_overridden_loop_is_pykkas_own() -> None:
    """SupervisorActor._actor_loop_running is pykka 4.5.0's loop with bare envelopes served
    first: a pykka upgrade that changes its loop must be read against the override first."""
    import hashlib
    import importlib.metadata
    import inspect

    import pykka

    source = inspect.getsource(pykka.Actor._actor_loop_running)
    digest = hashlib.sha256(source.encode()).hexdigest()
    assert (importlib.metadata.version("pykka"), digest) == (
        "4.5.0",
        "4109f316d2be434e5a2a178eda154e0eb17919333986a4b505f33091e4987dbd",
    ), "pykka's receive loop changed: port retinue/actors/supervisor/_actor.py's copy of it"


def test_the_overridden_teardown_answers_what_pykkas_does() -> None:
    """SupervisorActor._actor_loop_teardown replaces pykka 4.5.0's (``refuse_left``): a pykka
    upgrade that changes what its teardown does must be read against the override first."""
    import hashlib
    import importlib.metadata
    import inspect

    import pykka

    source = inspect.getsource(pykka.Actor._actor_loop_teardown)
    digest = hashlib.sha256(source.encode()).hexdigest()
    assert (importlib.metadata.version("pykka"), digest) == (
        "4.5.0",
        "1b35ca263372af740dcc818e13a5eec1ddfc56a99129e409b97522a5ed3af93b",
    ), "pykka's teardown changed: port retinue/actors/calls/_channel.py's refuse_left"


def test_a_stop_queued_behind_another_is_answered_as_pykka_answers_it(tmp_path: Path) -> None:
    """Two stops queued while the actor is busy: both say the actor stopped (True), as
    plain pykka answers them (review55: the teardown answered the second ActorDeadError,
    so ``stop()`` said False)."""

    def two_stops(ref: pykka.ActorRef[Any]) -> tuple[bool, bool]:
        gate = threading.Event()
        ref.proxy().block = gate.wait  # set on the actor (pykka waits for it)
        blocked = ref.proxy().block(WATCHDOG_S)  # the actor's thread waits here
        first, second = ref.stop(block=False), ref.stop(block=False)
        gate.set()
        blocked.get(timeout=WATCHDOG_S)
        return first.get(timeout=WATCHDOG_S), second.get(timeout=WATCHDOG_S)

    class Plain(pykka.ThreadingActor):
        """pykka's own answers, for comparison."""

    assert two_stops(Plain.start()) == (True, True)
    system = start(tmp_path / "s")
    try:
        assert system.actor is not None
        assert two_stops(system.actor) == (True, True)
    finally:
        system.shutdown()
